"""Request-id memory for exactly-once appends (SPEC §2.4).

The writer remembers the last :data:`REMEMBERED_REQUEST_IDS` request ids of all
sessions together (one global bound, least recently used forgotten first), each
with a fingerprint of the request's records and the answer it got (~300 bytes an
id: under 20 MB in all, however many sessions come and go). The ids of a stopped
session age out like any other. A retry with the same id and records gets the first answer
(waiting for it if the first attempt is still in flight) and writes nothing; the
same id with other records is refused. An attempt that failed is forgotten, so
its retry writes. After a restart ids are gone: clients pair ``request_id`` with
``expected_next_seq`` to stay exactly-once across restarts.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from shared.errors import InvalidArgumentError

#: Request ids remembered across all sessions (stated in writer.proto).
REMEMBERED_REQUEST_IDS = 65_536
MAX_REQUEST_ID_CHARS = 128


@dataclass(frozen=True, slots=True)
class RememberedAppend:
    """The answer a request id got: seqs, next seq and the durability future."""

    fingerprint: bytes
    seqs: list[int]
    next_seq: int
    durable: asyncio.Future[None]


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


class RequestMemory:
    """Remembered request ids of every session, at most ``limit`` in all."""

    def __init__(self, limit: int = REMEMBERED_REQUEST_IDS) -> None:
        self._limit = limit
        self._ids: OrderedDict[tuple[str, str], RememberedAppend] = OrderedDict()

    def __len__(self) -> int:
        return len(self._ids)

    def recall(self, session_id: str, request_id: str, print_: bytes) -> RememberedAppend | None:
        """The earlier answer to this request id, or None when it must be written.

        Raises InvalidArgumentError for an overlong id, or an id reused with other records.
        """
        if len(request_id) > MAX_REQUEST_ID_CHARS:
            raise InvalidArgumentError("request_id", f"is longer than {MAX_REQUEST_ID_CHARS} characters")
        key = (session_id, request_id)
        remembered = self._ids.get(key)
        if remembered is None:
            return None
        if remembered.durable.done() and remembered.durable.exception() is not None:
            del self._ids[key]
            return None
        if remembered.fingerprint != print_:
            raise InvalidArgumentError(
                "request_id",
                f"{request_id!r} was already used for different records; use a new id for a new request",
            )
        self._ids.move_to_end(key)
        return remembered

    def remember(self, session_id: str, request_id: str, answer: RememberedAppend) -> None:
        """Remember an answer; beyond the bound the least recently used id is forgotten."""
        self._ids[(session_id, request_id)] = answer
        self._ids.move_to_end((session_id, request_id))
        while len(self._ids) > self._limit:
            self._ids.popitem(last=False)
