"""Request-id memory for exactly-once appends (SPEC §2.4).

Each session remembers its last :data:`REMEMBERED_PER_SESSION` request ids for
the life of the writer process, with a fingerprint of the request's records and
the answer it got. A retry with the same id and records gets the first answer
(waiting for it if the first attempt is still in flight) and writes nothing; the
same id with other records is refused. An attempt that failed is forgotten, so
its retry writes. After a restart ids are gone: clients pair ``request_id`` with
``expected_next_seq`` to stay exactly-once across restarts.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import orjson

from shared.errors import InvalidArgumentError

REMEMBERED_PER_SESSION = 4096
MAX_REQUEST_ID_CHARS = 128


@dataclass(frozen=True, slots=True)
class RememberedAppend:
    """The answer a request id got: seqs, next seq and the durability future."""

    fingerprint: bytes
    seqs: list[int]
    next_seq: int
    durable: asyncio.Future[None]


def fingerprint(records: Any) -> bytes:
    """A 16-byte fingerprint of a request's record payloads."""
    return hashlib.blake2b(orjson.dumps(records), digest_size=16).digest()


class RequestMemory:
    """Remembered request ids of every session (bounded per session)."""

    def __init__(self, per_session: int = REMEMBERED_PER_SESSION) -> None:
        self._per_session = per_session
        self._sessions: dict[str, OrderedDict[str, RememberedAppend]] = {}

    def recall(self, session_id: str, request_id: str, print_: bytes) -> RememberedAppend | None:
        """The earlier answer to this request id, or None when it must be written.

        Raises InvalidArgumentError for an overlong id, or an id reused with other records.
        """
        if len(request_id) > MAX_REQUEST_ID_CHARS:
            raise InvalidArgumentError("request_id", f"is longer than {MAX_REQUEST_ID_CHARS} characters")
        ids = self._sessions.get(session_id)
        remembered = ids.get(request_id) if ids is not None else None
        if remembered is None:
            return None
        if remembered.durable.done() and remembered.durable.exception() is not None:
            del self._sessions[session_id][request_id]
            return None
        if remembered.fingerprint != print_:
            raise InvalidArgumentError(
                "request_id",
                f"{request_id!r} was already used for different records; use a new id for a new request",
            )
        return remembered

    def remember(self, session_id: str, request_id: str, answer: RememberedAppend) -> None:
        ids = self._sessions.setdefault(session_id, OrderedDict())
        ids[request_id] = answer
        while len(ids) > self._per_session:
            ids.popitem(last=False)
