"""ListRounds and GetRound: a session's rounds (shared.rounds), kept per file and extended as it grows.

The rounds of a session are derived state (SPEC §5: keyed by file identity and
committed length, always rebuildable, never the source of truth). :class:`RoundCache`
keeps, per session file read, one :class:`shared.rounds.RoundTracker` fed every
committed line once, with the file's identity as the replay cache checks it
(device, inode, committed length, the last committed line, size and modification
time): a file that grew is read from its committed length only; one replaced,
truncated or rewritten in place is read again from its first byte. Entries beyond
``max_entries`` are dropped least recently used first.

GetRound reads only its round's bytes of the file (the tracker knows their offsets).
A fork's round ids follow its lineage: ``forked_from`` of its session_meta, and of
its source's, up to :data:`MAX_FORK_DEPTH` sources (a source no longer there ends the
walk: its rounds are named by the oldest source found).
"""

from __future__ import annotations

import base64
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from reader_service.replay_cache import LINE_CHECK_BYTES, READ_BYTES
from rollout.v1 import reader_pb2
from shared.committed_lines import CommittedLines
from shared.errors import InvalidArgumentError, ReplyTooLargeError, clip
from shared.layout import open_session_file
from shared.naming import is_session_id
from shared.rebuild import collector_paused
from shared.rounds import Lineage, Round, RoundTracker, forked_from
from shared.wire import round_to_proto

#: Rounds per page unless the request says (and the most it may ask).
DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000
#: Sessions whose rounds the cache keeps.
DEFAULT_MAX_ENTRIES = 256
#: Sources followed back from a fork for its round ids.
MAX_FORK_DEPTH = 32


#: (session_meta payload of a session id, or None when it cannot be found): how a lineage is walked.
MetaOf = Callable[[str], dict[str, Any] | None]


def lineage_of(session_id: str, meta: dict[str, Any], meta_of: MetaOf) -> Lineage:
    """The lineage of a session whose session_meta is ``meta``: each fork source's id and fork seq,
    oldest first, found by following ``forked_from`` through ``meta_of`` (a source that cannot be
    found ends the walk)."""
    forks: list[tuple[str, int]] = []
    origin = forked_from(meta)
    seen = {session_id}
    while origin is not None and len(forks) < MAX_FORK_DEPTH and origin[0] not in seen:
        source, point = origin
        # A source's own fork point can only be at or before what it gave this fork.
        forks.insert(0, (source, point))
        seen.add(source)
        source_meta = meta_of(source)
        origin = forked_from(source_meta) if source_meta else None
    return Lineage(session_id, tuple(forks))


class _Entry:
    """The rounds of one session file (see the module doc); used under its ``lock``."""

    def __init__(self, device: int, inode: int, lineage: Lineage) -> None:
        self.lock = threading.Lock()
        self.device, self.inode = device, inode
        self.tracker = RoundTracker(lineage)
        self.committed = 0
        self.last_line_start = 0
        self.last_line = b""
        self.seen_size = 0
        self.seen_mtime_ns = 0

    def matches(self, fd: int, stat: os.stat_result) -> bool:
        if (stat.st_dev, stat.st_ino) != (self.device, self.inode) or stat.st_size < self.committed:
            return False
        if stat.st_size == self.seen_size and stat.st_mtime_ns != self.seen_mtime_ns:
            return False
        if not self.committed:
            return True
        end = os.pread(fd, 1, self.committed - 1)
        return end == b"\n" and os.pread(fd, len(self.last_line), self.last_line_start) == self.last_line

    def extend(self, fd: int, stat: os.stat_result) -> None:
        reader = CommittedLines(fd, self.committed, stat.st_size, READ_BYTES)
        with collector_paused():
            for lines in reader:
                self.committed = self.tracker.add_lines(lines, self.committed)
                last = lines[-1]
                self.last_line_start = self.committed - len(last) - 1
                self.last_line = (last + b"\n")[:LINE_CHECK_BYTES]
        self.seen_size, self.seen_mtime_ns = stat.st_size, stat.st_mtime_ns


class RoundCache:
    """Rounds of recently read session files (thread-safe); ``counts`` says how answers were made."""

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self.counts = {"unchanged": 0, "extended": 0, "rebuilt": 0}

    def rounds(self, path: Path, lineage: Callable[[], Lineage]) -> list[Round]:
        """The rounds of the session file at ``path`` as it is now; ``lineage`` is asked only when
        the file is read from its start. Raises OSError naming the file when it cannot be read."""
        fd = open_session_file(path)
        try:
            return self._rounds(str(path), fd, lineage)
        except OSError as exc:
            if exc.filename is None:
                raise OSError(exc.errno, exc.strerror, os.fspath(path)) from exc
            raise
        finally:
            os.close(fd)

    def _rounds(self, key: str, fd: int, lineage: Callable[[], Lineage]) -> list[Round]:
        stat = os.fstat(fd)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
        if entry is not None:
            with entry.lock:
                if entry.matches(fd, stat):
                    before = entry.committed
                    entry.extend(fd, stat)
                    self._count("extended" if entry.committed != before else "unchanged")
                    return entry.tracker.rounds()
        entry = _Entry(stat.st_dev, stat.st_ino, lineage())
        with entry.lock:
            entry.extend(fd, stat)
            self._count("rebuilt")
            with self._lock:
                self._entries[key] = entry
                self._entries.move_to_end(key)
                while len(self._entries) > self.max_entries:
                    self._entries.popitem(last=False)
            return entry.tracker.rounds()

    def _count(self, kind: str) -> None:
        with self._lock:
            self.counts[kind] += 1

    def forget(self, path: Path) -> None:
        """Drop the entry of a session file that went (deleted: nothing of it is kept)."""
        with self._lock:
            self._entries.pop(str(path), None)


def check_list_request(request: reader_pb2.ListRoundsRequest) -> tuple[int, int]:
    """(page size, first round index) of a ListRounds request; InvalidArgumentError otherwise."""
    if not is_session_id(request.session_id):
        raise InvalidArgumentError(
            "session_id", f"{clip(request.session_id)!r} is not a session id (a lowercase UUID)"
        )
    if not 0 <= request.page_size <= MAX_PAGE_SIZE:
        raise InvalidArgumentError("page_size", f"must be 0..{MAX_PAGE_SIZE}, got {request.page_size}")
    start = 0
    if request.page_token:
        try:
            start = int(
                base64.urlsafe_b64decode(request.page_token.encode()).decode().removeprefix("rounds:")
            )
        except (ValueError, UnicodeDecodeError):
            start = -1
        if start < 0:
            raise InvalidArgumentError(
                "page_token", f"{clip(request.page_token)!r} is not a token a ListRounds response gave"
            )
    return request.page_size or DEFAULT_PAGE_SIZE, start


def _token(start: int) -> str:
    return base64.urlsafe_b64encode(f"rounds:{start}".encode()).decode()


def rounds_page(rounds: list[Round], size: int, start: int) -> reader_pb2.ListRoundsResponse:
    """One page of ``rounds`` from index ``start``."""
    page = rounds[start : start + size]
    following = start + len(page)
    return reader_pb2.ListRoundsResponse(
        rounds=[round_to_proto(found) for found in page],
        next_page_token=_token(following) if following < len(rounds) else "",
        total=len(rounds),
    )


def round_records(path: Path, found: Round, max_bytes: int) -> list[reader_pb2.WatchedRecord]:
    """The stored lines of one round (its byte range of the file), each with its seq, type and ts.
    Raises ReplyTooLargeError over ``max_bytes``, OSError when the file cannot be read."""
    size = found.end_offset - found.start_offset
    if size > max_bytes:
        raise ReplyTooLargeError(
            f"round {found.round_id} holds {size} bytes of records, over the reader's reply limit of"
            f" {max_bytes}; read its seqs {found.start_seq}..{found.end_seq} with StreamReplay or WatchSession"
        )
    fd = open_session_file(path)
    try:
        reader = CommittedLines(fd, found.start_offset, found.end_offset)
        records = []
        for raw in reader.lines():
            try:
                record = orjson.loads(raw)
            except orjson.JSONDecodeError:
                record = None
            if not isinstance(record, dict) or type(record.get("seq")) is not int:
                records.append(reader_pb2.WatchedRecord(seq=-1, type="", ts="", line=raw))
                continue
            records.append(
                reader_pb2.WatchedRecord(
                    seq=record["seq"],
                    type=str(record.get("type", "")),
                    ts=str(record.get("ts", "")),
                    line=raw,
                )
            )
        return records
    finally:
        os.close(fd)
