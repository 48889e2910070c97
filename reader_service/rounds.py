"""ListRounds and GetRound: a session's rounds (shared.rounds), kept per file and extended as it grows.

The rounds of a session are derived state (docs/spec.md §5: keyed by file identity and
committed length, always rebuildable, never the source of truth). :class:`RoundCache`
keeps, per session file read, one :class:`shared.rounds.RoundTracker` fed every
committed line once, with the file's identity as the replay cache checks it
(device, inode, committed length, the last committed line, size and modification
time): a file that grew is read from its committed length only; one replaced,
truncated or rewritten in place is read again from its first byte. Entries beyond
``max_entries`` are dropped least recently used first.

GetRound reads only its round's bytes of the file (the tracker knows their offsets).
A fork's round ids follow its lineage (shared.lineage.lineage_of: ``forked_from`` of its
session_meta, and of its source's, live or deleted), which the caller hands in.
"""

from __future__ import annotations

import base64
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import orjson

from reader_service.replay_cache import LINE_CHECK_BYTES, READ_BYTES
from rollout.v1 import reader_pb2
from shared.committed_lines import CommittedLines
from shared.errors import InvalidArgumentError, ReplyTooLargeError, clip
from shared.layout import open_session_file, session_fd
from shared.naming import is_session_id
from shared.rounds import Lineage, Round, RoundTracker, round_to_close, track_file
from shared.wire import round_to_proto

T = TypeVar("T")

#: Rounds per page unless the request says (and the most it may ask).
DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000
#: Sessions whose rounds the cache keeps.
DEFAULT_MAX_ENTRIES = 256
#: Bytes of serialized settled rounds the cache keeps over all its sessions.
DEFAULT_ENCODED_BUDGET = 64 * 1024 * 1024
#: Round ids the origin index holds (~150 bytes each) before it starts over: past it the index
#: is emptied and refilled by the lookups that need it (GetRound by id alone reads again).
DEFAULT_MAX_ORIGINS = 200_000
#: The tag of ListRoundsResponse.rounds (field 1, length-delimited) on the wire.
_ROUNDS_TAG = b"\x0a"


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
        #: Serialized Round messages of the settled rounds so far (``tracker.done``, which only
        #: grows), made by the ListRounds pages that needed them; their total size in bytes.
        self.encoded: list[bytes] = []
        self.encoded_bytes = 0
        #: Settled rounds whose origin the cache has noted (:meth:`RoundCache.origin`), in the
        #: origin index's generation ``noted_generation``.
        self.noted = 0
        self.noted_generation = 0

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
        lines = track_file(self.tracker, fd, self.committed, stat.st_size, READ_BYTES)
        for committed, last in lines:
            self.committed = committed  # in step with the tracker, should a later chunk fail
            self.last_line_start = committed - len(last) - 1
            self.last_line = (last + b"\n")[:LINE_CHECK_BYTES]
        self.seen_size, self.seen_mtime_ns = stat.st_size, stat.st_mtime_ns


class RoundCache:
    """Rounds of recently read session files (thread-safe); ``counts`` says how answers were made."""

    def __init__(
        self,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        encoded_budget: int = DEFAULT_ENCODED_BUDGET,
        max_origins: int = DEFAULT_MAX_ORIGINS,
    ) -> None:
        self.max_entries = max_entries
        self.encoded_budget = encoded_budget
        self.max_origins = max_origins
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self.counts = {"unchanged": 0, "extended": 0, "rebuilt": 0}
        #: Round id -> (session that wrote its trigger, the trigger's seq), for every round read
        #: so far (ids are derived from both: they never change), and per session file read the
        #: committed length noted: the derived index GetRound by id alone looks in. Bounded by
        #: :attr:`max_origins`: when full it is emptied and its generation moves on, so that
        #: every entry notes its rounds again and every file counts as not noted.
        self._origins: dict[str, tuple[str, int]] = {}
        self._noted_bytes: dict[str, int] = {}
        self._generation = 0
        self._closing: dict[str, tuple[tuple[int, int, int], Round | None]] = {}

    def rounds(self, path: Path, lineage: Callable[[], Lineage]) -> list[Round]:
        """The rounds of the session file at ``path`` as it is now; ``lineage`` is asked only when
        the file is read from its start. Raises OSError naming the file when it cannot be read."""
        return self.read(path, lineage, lambda entry: entry.tracker.rounds())

    def to_close(self, path: Path, lineage: Callable[[], Lineage]) -> Round | None:
        """The round the session file at ``path`` leaves pending as it is now
        (shared.rounds.round_to_close); raises as :meth:`rounds` does. The answer is kept per
        file (inode, size, modification time): an idle session is not read again, even once its
        rounds have left the cache. A file not in the cache is read without entering it, so a
        sweep over every session (ListPendingRounds) does not evict the sessions being read."""
        seen = os.stat(path, follow_symlinks=False)
        identity = (seen.st_ino, seen.st_size, seen.st_mtime_ns)
        with self._lock:
            known = self._closing.get(str(path))
        if known is not None and known[0] == identity:
            return known[1]
        answer = self.read(path, lineage, lambda entry: round_to_close(entry.tracker), keep=False)
        with self._lock:
            self._closing[str(path)] = (identity, answer)
        return answer

    def page(self, path: Path, lineage: Callable[[], Lineage], size: int, start: int) -> bytes:
        """A serialized ListRoundsResponse: ``size`` rounds from index ``start`` of the session
        file at ``path`` as it is now. Settled rounds are serialized once and kept (within
        :attr:`encoded_budget` bytes over the cache, least recently used dropped first), so a
        page of a session read before costs what its bytes do. Raises as :meth:`rounds` does."""
        answer = self.read(path, lineage, lambda entry: _encoded_page(entry, size, start))
        self._trim_encoded()
        return answer

    def _trim_encoded(self) -> None:
        with self._lock:
            total = sum(entry.encoded_bytes for entry in self._entries.values())
            victims = list(self._entries.values())
        for entry in victims:  # least recently used first; one entry's lock at a time
            if total <= self.encoded_budget:
                return
            with entry.lock:
                total -= entry.encoded_bytes
                entry.encoded, entry.encoded_bytes = [], 0

    def read(
        self, path: Path, lineage: Callable[[], Lineage], answer: Callable[[_Entry], T], keep: bool = True
    ) -> T:
        """``answer`` of the session's entry (under its lock), brought up to date with the file;
        with ``keep`` false, an entry read from the file's start is not kept."""
        with session_fd(path) as fd:
            return self._read(str(path), fd, lineage, answer, keep)

    def _read(
        self, key: str, fd: int, lineage: Callable[[], Lineage], answer: Callable[[_Entry], T], keep: bool
    ) -> T:
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
                    self._note(key, entry)
                    return answer(entry)
        entry = _Entry(stat.st_dev, stat.st_ino, lineage())
        with entry.lock:
            entry.extend(fd, stat)
            self._count("rebuilt")
            self._note(key, entry)
            if not keep:
                return answer(entry)
            with self._lock:
                self._entries[key] = entry
                self._entries.move_to_end(key)
                while len(self._entries) > self.max_entries:
                    self._entries.popitem(last=False)
            return answer(entry)

    def _note(self, key: str, entry: _Entry) -> None:
        """Note the origins of the rounds of ``entry`` not noted yet (call under its lock)."""
        tracker = entry.tracker
        lineage = tracker.lineage or Lineage("")
        with self._lock:
            if len(self._origins) + len(tracker.done) - entry.noted + 1 > self.max_origins:
                self._origins.clear()
                self._noted_bytes.clear()
                self._generation += 1
            if entry.noted_generation != self._generation:
                entry.noted, entry.noted_generation = 0, self._generation
            fresh = [(found.round_id, found.start_seq) for found in tracker.done[entry.noted :]]
            if tracker.current is not None:
                fresh.append((tracker.current.round_id, tracker.current.start_seq))
            for round_id, seq in fresh:
                self._origins[round_id] = (lineage.owner(seq), seq)
            self._noted_bytes[key] = entry.committed
        entry.noted = len(tracker.done)

    def origin(self, round_id: str) -> tuple[str, int] | None:
        """(session that wrote the trigger, its seq) of a round this cache has read, or None."""
        with self._lock:
            return self._origins.get(round_id)

    def noted_bytes(self, path: Path) -> int:
        """The committed length of ``path`` whose rounds' origins are noted (-1: never read)."""
        with self._lock:
            return self._noted_bytes.get(str(path), -1)

    def _count(self, kind: str) -> None:
        with self._lock:
            self.counts[kind] += 1

    def forget(self, path: Path) -> None:
        """Drop what is kept of a session file that went (deleted: none of its content is kept).
        Its rounds' origins stay: a round whose trigger it wrote may be held by its forks
        (reader_service.round_index.holders), and an origin holds no content."""
        key = str(path)
        with self._lock:
            self._entries.pop(key, None)
            self._noted_bytes.pop(key, None)
            self._closing.pop(key, None)


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


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _encoded_page(entry: _Entry, size: int, start: int) -> bytes:
    """The serialized page :func:`rounds_page` makes, the settled rounds' bytes taken from (and
    added to) ``entry.encoded``: a message's fields may be written in any order and a repeated
    field's elements one by one, so the page is their concatenation (protobuf encoding)."""
    rounds = entry.tracker.rounds()
    done = len(entry.tracker.done)
    page = rounds[start : start + size]
    following = start + len(page)
    parts: list[bytes] = []
    for index, found in enumerate(page, start):
        if index < done:
            while len(entry.encoded) <= index:
                encoded = round_to_proto(rounds[len(entry.encoded)]).SerializeToString()
                entry.encoded.append(encoded)
                entry.encoded_bytes += len(encoded)
            raw = entry.encoded[index]
        else:
            raw = round_to_proto(found).SerializeToString()
        parts += (_ROUNDS_TAG, _varint(len(raw)), raw)
    tail = reader_pb2.ListRoundsResponse(
        next_page_token=_token(following) if following < len(rounds) else "", total=len(rounds)
    )
    parts.append(tail.SerializeToString())
    return b"".join(parts)


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
