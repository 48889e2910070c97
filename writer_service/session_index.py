"""The writer's in-memory index of every session under its data root (docs/spec.md §2.10).

One :class:`IndexEntry` per session file: its name, the next seq and the stop
state. :func:`build_index` builds it once at start-up, shard by shard, from the file names and the
tails (shared.tail: bounded bytes per file, whatever its size), repairing torn
tails on the way (writer_service.recovery); create, fork, stop and resume keep it
current. The writer is the data root's only writer, so the index is complete: an
unknown id is answered NOT_FOUND from memory, without touching the disk or
blocking the event loop. A session file added behind a running writer's back is
seen at its next start.

An entry is small (~200 bytes): 20,000 sessions take a few MB. An entry marked
not ``fresh`` (after a failed write) is re-read from its file's tail when next used.

One bad session never stops the start-up: a file whose torn tail cannot be repaired
(no space for the sidecar) or that cannot be read (permissions, a symbolic link,
which is never followed) is indexed not fresh and put in the index's
:class:`~writer_service.recovery.RepairBacklog`: calls on it are refused
(UNAVAILABLE, with the reason) and its repair is retried, while every other session
serves.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared.layout import DataRoot, open_session_file
from shared.naming import session_file_name
from shared.tail import Tail, next_seq_of_tail, read_tail, stop_of_tail
from writer_service.atomic_files import remove_stale_temporaries
from writer_service.deletion import Tombstones, finish_removal, recover_shard
from writer_service.recovery import RepairBacklog, repair_torn_tail, unavailable
from writer_service.saved_state import remove_stale_saves

log = logging.getLogger(__name__)

#: Bytes of each file's tail read at start-up (doubled only for a longer last record).
STARTUP_TAIL_WINDOW = 4096


@dataclass(slots=True)
class IndexEntry:
    """One session: file name, next seq, stop kind (None: open; "": a legacy stop without a kind)."""

    name: str
    next_seq: int
    stopped_kind: str | None
    #: False after a failed write: next seq and stop state are re-read from the tail when next used.
    fresh: bool = True
    #: The view a recently closed session had: (call ids, session_meta, file size, saved offset).
    kept: tuple[set[str], dict[str, Any], int, int] | None = None
    #: (seq, byte offset) from which every request id written is in the writer's memory (None:
    #: not opened by this process since start-up or a failed write; writer_service.idempotency).
    requests_floor: tuple[int, int] | None = None


def entry_from_tail(name: str, tail: Tail) -> IndexEntry:
    """The index entry a file's tail describes (its last complete record decides; the next
    seq and stop state as the reader's stop facts have them: shared.tail). A tail without a
    record gives an entry that is not fresh (read again when used)."""
    stop = stop_of_tail(tail.records)
    stopped = stop.kind if stop is not None else None
    return IndexEntry(name, next_seq_of_tail(tail.records), stopped, fresh=bool(tail.records))


def read_entry(path: Path) -> IndexEntry:
    """Read one session file's entry from its tail (I/O thread). Raises OSError when unreadable."""
    fd = open_session_file(path)
    try:
        return entry_from_tail(path.name, read_tail(fd, want=1, window=STARTUP_TAIL_WINDOW))
    finally:
        os.close(fd)


class SessionIndex:
    """Session id -> :class:`IndexEntry` (event loop only; not thread-safe), and the sessions
    refused until their file is repaired (``repairs``)."""

    def __init__(self, entries: dict[str, IndexEntry] | None = None) -> None:
        self.entries: dict[str, IndexEntry] = entries or {}
        self.repairs = RepairBacklog()
        #: The ids of deleted sessions: never used again (writer_service.deletion).
        self.tombstones = Tombstones()

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, session_id: str) -> IndexEntry | None:
        return self.entries.get(session_id)

    def add(self, session_id: str, entry: IndexEntry) -> None:
        self.entries[session_id] = entry

    def remove(self, session_id: str) -> None:
        """Forget a deleted session (its id stays in :attr:`tombstones`)."""
        self.entries.pop(session_id, None)
        self.repairs.dropped(session_id)


def build_index(root: DataRoot, shards: Iterable[int] | None = None) -> SessionIndex:
    """Repair torn tails and index every session file of ``shards`` (every shard of the root by
    default) under ``root`` (start-up, blocking; the root is created if new: shared.layout).

    Shard by shard (each shard's recovery is its own): temporaries a crash left are removed,
    then each file's tail is read (:data:`STARTUP_TAIL_WINDOW` bytes, more only for
    a longer last record); a file whose end is torn is repaired first (its damaged
    bytes moved to a sidecar). A file that cannot be repaired or read is indexed
    as awaiting repair (see the module doc: one bad session never stops the
    start-up); names that are not of the session shape are skipped. Returns the index.
    """
    root.create()
    if shards is None:  # the root's only writer: no other writer's probe is running
        remove_stale_saves(root.root)  # the storage probe's scratch (writer_service.storage_probe)
    entries: dict[str, IndexEntry] = {}
    failed: dict[str, str] = {}
    tombstones = Tombstones()
    repaired = 0
    for shard in range(root.shards) if shards is None else shards:
        repaired += _index_shard(root, shard, entries, failed, tombstones)
    if repaired:
        log.warning("start-up recovery repaired %d session files", repaired)
    index = SessionIndex(entries)
    index.tombstones = tombstones
    for session_id, reason in failed.items():
        index.repairs.failed(session_id, reason)
    log.info("indexed %d sessions (%d awaiting repair)", len(entries), len(failed))
    return index


def index_shard(
    root: DataRoot, shard: int, tombstones: Tombstones
) -> tuple[dict[str, IndexEntry], dict[str, str]]:
    """Recover and index one shard's session files (blocking), as :func:`build_index` does for
    each, its deleted ids loaded into ``tombstones``: (entries by session id, the reason of each
    session awaiting repair). A writer of a cluster calls it when it takes a shard
    (docs/cluster.md §2.4): another writer may have written the shard since this one last
    indexed it."""
    entries: dict[str, IndexEntry] = {}
    failed: dict[str, str] = {}
    repaired = _index_shard(root, shard, entries, failed, tombstones)
    if repaired:
        log.warning("recovery of shard %d repaired %d session files", shard, repaired)
    return entries, failed


def _index_shard(
    root: DataRoot,
    shard: int,
    entries: dict[str, IndexEntry],
    failed: dict[str, str],
    tombstones: Tombstones,
) -> int:
    """Recover and index one shard's session files into ``entries`` (``failed``: those awaiting
    repair, with the reason; ``tombstones``: its deleted ids are loaded there, and the deletions
    a crash interrupted are finished, writer_service.deletion); returns how many torn tails
    were repaired."""
    folder = root.sessions_folder(shard)
    if root.shard_dir(shard) != root.root:
        remove_stale_saves(root.shard_dir(shard))
    tombstones.load_shard(root.shard_dir(shard))
    recover_shard(root, shard, tombstones)
    try:
        remove_stale_temporaries(folder)
        names = os.listdir(folder)
    except FileNotFoundError:  # a shard no session was written to yet (shared.layout)
        return 0
    repaired = 0
    for name in names:
        parsed = session_file_name(name)  # the entries the reader lists as sessions
        if parsed is None:
            continue
        if parsed.session_id in tombstones:  # its deletion was decided, then interrupted
            try:
                finish_removal(root, parsed.session_id, name)
                log.warning("finished the deletion of %s a crash interrupted", name)
            except OSError as exc:
                log.error("could not finish the deletion of %s (retried at the next start): %s", name, exc)
            continue
        path = folder / name
        try:
            fd = open_session_file(path)
            try:
                tail = read_tail(fd, want=1, window=STARTUP_TAIL_WINDOW)
            finally:
                os.close(fd)
            if not tail.clean_end:
                if repair_torn_tail(path):
                    repaired += 1
                if not os.path.lexists(path):  # moved aside whole: it held no complete record
                    continue
                entry = read_entry(path)
            else:
                entry = entry_from_tail(name, tail)
        except OSError as exc:
            entry = IndexEntry(name, 0, None, fresh=False)
            failed[parsed.session_id] = str(unavailable(name, exc))
        entries[parsed.session_id] = entry
    return repaired
