"""Exactly-once appends: the writer answers for a request id itself (docs/spec.md §2.4).

A retry of an Append request carries the same ``request_id`` as its first attempt.
The writer answers it, and writes nothing again, in one of two ways:

* **from memory**: the last :data:`REMEMBERED_REQUEST_IDS` request ids of all
  sessions together (one global bound, least recently used forgotten first), each with
  a fingerprint of the request's records and the answer it got (~300 bytes an id:
  under 20 MB in all, however many sessions come and go). A retry of an attempt still
  in flight waits for its answer; an attempt that failed is forgotten, so its retry
  writes.
* **from the file**, when memory cannot tell (the writer restarted, or the id aged
  out): the first line a request writes carries its id and fingerprint (a request
  mark, shared.records). Given ``request_since_seq`` S, the seq the request would
  have been written at or after, the writer reads the session's lines back from the
  point after which its memory is complete (the session's *request floor*, below) to
  seq S, looking for the id: found, the request landed there and its first answer is
  rebuilt from the line's seq; not found, it never landed and is written now.

The request floor of a session is (seq, byte offset) such that every request id
written at or after it is in memory: the file's end when this process first opened
the session, raised when memory forgets one of its ids. So a lookup reads only lines
an earlier process wrote (or ids that aged out), usually none: a client sends S as the
next seq it last learnt, and the lines between S and the floor are the few another
client wrote meanwhile. A lookup reads at most :data:`MAX_LOOKUP_BYTES`; an S further
back is refused (FAILED_PRECONDITION) rather than answered by a guess.

The same id with other records is refused (INVALID_ARGUMENT), from memory or file.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from shared.committed_lines import lines_before
from shared.errors import InvalidArgumentError, SessionStateError
from shared.layout import open_session_file
from shared.reasons import request_subject
from shared.records import line_seq, parse_record, request_mark_of

#: Request ids remembered across all sessions (stated in writer.proto).
REMEMBERED_REQUEST_IDS = 65_536
MAX_REQUEST_ID_CHARS = 128
#: Bytes of a session file a lookup by request id reads at most (from its request floor back).
MAX_LOOKUP_BYTES = 64 * 1024 * 1024
#: Bytes read at a time, backwards from the floor.
LOOKUP_CHUNK_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class RememberedAppend:
    """The answer a request id got: seqs, next seq, the durability future, and the byte offset
    just after the request's lines (where the file ends once they are durable)."""

    fingerprint: bytes
    seqs: list[int]
    next_seq: int
    durable: asyncio.Future[None]
    end_offset: int = 0

    @property
    def settled(self) -> bool:
        """Durable (the future done without an error)."""
        return self.durable.done() and not self.durable.cancelled() and self.durable.exception() is None


def fingerprint(
    records: Sequence[Sequence[tuple[str, dict[str, Any]]]], times: Sequence[str] | None = None
) -> bytes:
    """A 16-byte fingerprint of a request's record payloads and source times (one record at a time)."""
    hasher = hashlib.blake2b(digest_size=16)
    for index, payloads in enumerate(records):
        hasher.update(b"\x1e")
        if times is not None and times[index]:
            hasher.update(times[index].encode())
        hasher.update(b"\x1f")
        for record_type, payload in payloads:
            hasher.update(record_type.encode())
            hasher.update(orjson.dumps(payload))
    return hasher.digest()


def check_request_id(request_id: str) -> None:
    """Refuse (InvalidArgumentError, field ``request_id``) an id over :data:`MAX_REQUEST_ID_CHARS`."""
    if len(request_id) > MAX_REQUEST_ID_CHARS:
        raise InvalidArgumentError("request_id", f"is longer than {MAX_REQUEST_ID_CHARS} characters")


def reused_id(request_id: str) -> InvalidArgumentError:
    """The refusal of a request id sent again with other records."""
    return InvalidArgumentError(
        "request_id",
        f"{request_id!r} was already used for different records; use a new id for a new request",
    )


class RequestMemory:
    """Remembered request ids of every session, at most ``limit`` in all.

    ``on_forget(session_id, answer)`` is called for each id forgotten to keep within the
    bound (so the session's request floor can move past it); ids whose request is not
    yet durable are never the ones forgotten.
    """

    def __init__(
        self,
        limit: int = REMEMBERED_REQUEST_IDS,
        on_forget: Callable[[str, RememberedAppend], None] | None = None,
    ) -> None:
        self._limit = limit
        self._on_forget = on_forget
        self._ids: OrderedDict[tuple[str, str], RememberedAppend] = OrderedDict()

    def __len__(self) -> int:
        return len(self._ids)

    def recall(self, session_id: str, request_id: str, print_: bytes) -> RememberedAppend | None:
        """The earlier answer to this request id, or None when memory does not hold it.

        Raises InvalidArgumentError for an overlong id, or an id reused with other records.
        """
        check_request_id(request_id)
        key = (session_id, request_id)
        remembered = self._ids.get(key)
        if remembered is None:
            return None
        if remembered.durable.done() and remembered.durable.exception() is not None:
            del self._ids[key]
            return None
        if remembered.fingerprint != print_:
            raise reused_id(request_id)
        self._ids.move_to_end(key)
        return remembered

    def remember(self, session_id: str, request_id: str, answer: RememberedAppend) -> None:
        """Remember an answer; beyond the bound the least recently used settled ids are forgotten."""
        self._ids[(session_id, request_id)] = answer
        self._ids.move_to_end((session_id, request_id))
        passes = len(self._ids)
        while len(self._ids) > self._limit and passes > 0:
            passes -= 1
            key, oldest = self._ids.popitem(last=False)
            if not oldest.durable.done():
                self._ids[key] = oldest  # in flight: keep it (moved to the recent end)
                continue
            if self._on_forget is not None and oldest.settled:
                self._on_forget(key[0], oldest)


def find_request(path: Path, request_id: str, since_seq: int, before_offset: int) -> tuple[int, str] | None:
    """Where request ``request_id`` landed in a session file, read back from ``before_offset``
    (a line boundary; I/O thread): (seq of its first line, its fingerprint as hex), or None
    when no line at or after seq ``since_seq`` (and before the offset) carries its mark.

    Raises SessionStateError (FAILED_PRECONDITION) when seq ``since_seq`` lies more than
    :data:`MAX_LOOKUP_BYTES` back, OSError when the file cannot be read.
    """
    needle = b'"request_id":' + orjson.dumps(request_id)
    fd = open_session_file(path)
    try:
        end = min(before_offset, os.fstat(fd).st_size)
        read = 0
        for raw in lines_before(fd, end, LOOKUP_CHUNK_BYTES):
            read += len(raw) + 1
            if read > MAX_LOOKUP_BYTES:
                raise SessionStateError(
                    f"request_since_seq {since_seq} lies more than {MAX_LOOKUP_BYTES} bytes back in the"
                    f" session file; the writer cannot tell whether request {request_id!r} landed. Send"
                    " the next seq last learnt (an AppendResponse's next_seq) as request_since_seq",
                    subject=request_subject(request_id),
                    precondition="request_since_seq within the lookup window",
                )
            done, found = _match(raw, needle, request_id, since_seq)
            if done:
                return found
        return None
    finally:
        os.close(fd)


def _match(raw: bytes, needle: bytes, request_id: str, since_seq: int) -> tuple[bool, tuple[int, str] | None]:
    """(stop reading back, what was found) for one whole line."""
    seq = line_seq(raw)
    if seq is None:
        return False, None  # not a line the writer wrote whole: nothing to read from it
    if seq < since_seq:
        return True, None
    if needle not in raw:
        return False, None
    record = parse_record(raw)
    mark = request_mark_of(record) if record is not None else None
    if mark is None or mark[0] != request_id or record is None:
        return False, None
    return True, (int(record["seq"]), mark[1])
