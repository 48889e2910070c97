"""Deleting sessions for good: the deletion record first, then the file, never half (docs/deletion.md).

A delete of one session, on an I/O thread, in this order:

1. its **deletion record** (:class:`Deletion`: which session, whose, who asked, when; no
   content) is appended to its shard's ``deletions.jsonl`` and fsynced (the file's folder too
   when the file is new). From here on the deletion is decided: the id is a tombstone the
   writer never uses again, and a start-up finishes what a crash interrupted;
2. the session file is renamed into the shard's ``trash/`` folder and both folders are
   fsynced: the session is gone from its sessions folder at once (readers follow it: their
   caches and indexes drop it);
3. what derives from it is removed: its delegation marker in its parent's folder, the
   markers of its own children (``delegations/<id>/``), its saved writer state and the bytes
   a torn-tail repair set aside (``<name>.torn-<n>``);
4. the file is unlinked from ``trash/`` and the folder fsynced.

A crash before step 1 is durable leaves the session whole (a torn deletion record is cut
away at start-up, as a torn session tail is); after it, :func:`recover_shard` (start-up)
moves a tombstoned session that is still in its sessions folder to the trash and finishes
steps 3 and 4 for everything in ``trash/``. A file in the trash without a deletion record
(which step 1 rules out) is put back. Each step is idempotent.

Tombstones are kept in memory as 16-byte ids with the offset of their record (~100 bytes
per deleted session), so CreateSession, Fork and ImportSessions refuse a deleted id from
memory, and a retried delete reads its one record back.

For tests, ``ROLLOUT_TEST_KILL_DELETE_AT`` set to a step name (:data:`KILL_POINTS`) makes the
writer kill itself with SIGKILL at that point of every delete.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
import signal
import threading
import uuid
from pathlib import Path

from shared.deletions import DELETIONS_FILE, Deletion
from shared.layout import PRIVATE_FILE_MODE, DataRoot
from shared.lineage import forked_from
from shared.naming import session_file_name
from shared.session_meta import read_session_meta
from writer_service.atomic_files import fsync_dir, make_durable_dirs, write_all
from writer_service.saved_state import state_path

log = logging.getLogger(__name__)

#: A shard's folder of session files being deleted.
TRASH_DIR = "trash"
#: The test hook: the step at which every delete kills the writer (SIGKILL).
KILL_AT_ENV = "ROLLOUT_TEST_KILL_DELETE_AT"
#: Where the test hook may kill: after the deletion record is durable, after the file went to
#: the trash, after the derived files were removed (before the trash is emptied).
KILL_POINTS = ("recorded", "trashed", "cleaned")


def _kill_point(step: str) -> None:
    if os.environ.get(KILL_AT_ENV) == step:
        os.kill(os.getpid(), signal.SIGKILL)


def _key(session_id: str) -> bytes:
    return uuid.UUID(session_id).bytes


class Tombstones:
    """The deleted session ids of the shards loaded, each with its record's offset (thread-safe)."""

    def __init__(self) -> None:
        self._offsets: dict[bytes, int] = {}
        self._lock = threading.Lock()

    def __contains__(self, session_id: object) -> bool:
        if not isinstance(session_id, str):
            return False
        try:
            return _key(session_id) in self._offsets
        except ValueError:
            return False

    def __len__(self) -> int:
        return len(self._offsets)

    def load_shard(self, shard_dir: Path) -> None:
        """Read a shard's deletion records (start-up); a torn last line (a crash while it was
        written: that delete never happened) is cut away first. Raises OSError."""
        path = shard_dir / DELETIONS_FILE
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return
        end = data.rfind(b"\n") + 1
        if end != len(data):
            os.truncate(path, end)
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            log.warning("cut a torn deletion record from %s (%d bytes)", path, len(data) - end)
        offset = 0
        for line in data[:end].splitlines(keepends=True):
            record = Deletion.of_line(line)
            if record is not None:
                with contextlib.suppress(ValueError):
                    self._offsets[_key(record.session_id)] = offset
            offset += len(line)

    def record(self, shard_dir: Path, deletion: Deletion) -> None:
        """Append ``deletion`` to its shard's file and fsync it (I/O thread); the id is a
        tombstone from then on. Raises OSError (nothing is recorded: the session stays)."""
        path = shard_dir / DELETIONS_FILE
        make_durable_dirs(shard_dir)
        line = deletion.line()
        with self._lock:
            created = not os.path.lexists(path)
            fd = os.open(
                path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, PRIVATE_FILE_MODE
            )
            try:
                offset = os.fstat(fd).st_size
                try:
                    write_all(fd, line)
                    os.fsync(fd)
                except OSError:
                    os.ftruncate(fd, offset)  # no partial record is left behind
                    raise
            finally:
                os.close(fd)
            if created:
                fsync_dir(shard_dir)
            self._offsets[_key(deletion.session_id)] = offset

    def read(self, shard_dir: Path, session_id: str) -> Deletion | None:
        """The deletion record of a tombstoned id (None when it is not one). Raises OSError."""
        offset = self._offsets.get(_key(session_id))
        if offset is None:
            return None
        with open(shard_dir / DELETIONS_FILE, "rb") as handle:
            handle.seek(offset)
            return Deletion.of_line(handle.readline())


def remove_session(root: DataRoot, tombstones: Tombstones, deletion: Deletion, name: str) -> None:
    """Delete one session whose file is ``name`` (I/O thread): steps 1 to 4 of the module doc.

    Raises OSError: before the record is durable, the session is whole; after it, the
    deletion is finished at the next start-up (or by a retried delete).
    """
    shard_dir = root.shard_dir(root.shard_of(deletion.session_id))
    try:
        origin = forked_from(read_session_meta(root.session_path(deletion.session_id, name)))
    except OSError:
        origin = None  # unreadable: its lineage ends here
    tombstones.record(shard_dir, dataclasses.replace(deletion, forked_from=origin))
    _kill_point("recorded")
    finish_removal(root, deletion.session_id, name)


def finish_removal(root: DataRoot, session_id: str, name: str) -> None:
    """Steps 2 to 4 of a decided deletion (its record is durable); idempotent. Raises OSError."""
    shard = root.shard_of(session_id)
    shard_dir = root.shard_dir(shard)
    sessions = root.sessions_folder(shard)
    trash = shard_dir / TRASH_DIR
    trashed = trash / name
    if os.path.lexists(sessions / name):
        make_durable_dirs(trash)
        os.rename(sessions / name, trashed)
        fsync_dir(sessions)
        fsync_dir(trash)
    _kill_point("trashed")
    meta = None
    if os.path.lexists(trashed):
        try:
            meta = read_session_meta(trashed)
        except OSError:
            meta = None  # unreadable (a link planted in its place): nothing derived to find
    parent = str((meta or {}).get("parent_session_id", ""))
    if parent:
        marker = root.delegation_marker(parent, str((meta or {}).get("delegation_id", "")), session_id)
        if os.path.lexists(marker):
            marker.unlink()
            fsync_dir(marker.parent)
    children = root.delegations_folder(session_id)
    if os.path.lexists(children):
        shutil.rmtree(children)
        fsync_dir(children.parent)
    state_path(shard_dir, session_id).unlink(missing_ok=True)
    if os.path.isdir(sessions):
        for sidecar in os.listdir(sessions):
            if sidecar.startswith(name + ".torn-"):
                (sessions / sidecar).unlink(missing_ok=True)
    _kill_point("cleaned")
    if os.path.lexists(trashed):
        trashed.unlink()
        fsync_dir(trash)


def recover_shard(root: DataRoot, shard: int, tombstones: Tombstones) -> int:
    """Finish the deletions a crash interrupted in one shard (start-up, after its tombstones
    are loaded): every file in its trash (put back into its sessions folder when no deletion
    record names it). Returns how many were finished. Tombstoned sessions still in the
    sessions folder are the index's to find (:func:`writer_service.session_index.build_index`
    calls :func:`finish_removal` for them). Raises OSError."""
    trash = root.shard_dir(shard) / TRASH_DIR
    try:
        names = os.listdir(trash)
    except FileNotFoundError:
        return 0
    finished = 0
    for name in names:
        parsed = session_file_name(name)
        if parsed is None:
            continue
        if parsed.session_id in tombstones:
            finish_removal(root, parsed.session_id, name)
            finished += 1
        else:
            sessions = root.sessions_folder(shard)
            os.rename(trash / name, sessions / name)
            fsync_dir(sessions)
            fsync_dir(trash)
            log.warning("put %s back: no deletion record names it", name)
    if finished:
        log.warning("finished %d deletions a crash interrupted in shard %d", finished, shard)
    return finished
