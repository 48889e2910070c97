"""Watches: the changes under a key prefix, in revision order, resumed across broken streams.

A watch asks etcd for every put and delete under its prefix from a revision on. It keeps
the revision that follows the last change it delivered (or the last progress report etcd
sent: etcd reports progress only once everything before it was sent), and when its stream
breaks (the member was killed, lost its leader, stopped answering pings) it opens one on
the next member from that revision: no change is delivered twice or skipped, unless etcd
compacted that revision away, which ends the watch with WatchCompactedError.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections import deque
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

import grpc

from writer_service.coordination.endpoints import (
    REQUIRE_LEADER,
    RETRYABLE,
    ROUND_PAUSE,
    ROUND_PAUSE_MAX,
    Member,
    MemberRotation,
    etcd_refusal,
)
from writer_service.coordination.errors import WatchCompactedError
from writer_service.coordination.protocol import etcd_rpc, prefix_range_end

log = logging.getLogger(__name__)


class EventKind(enum.Enum):
    """What happened to a key."""

    PUT = "put"
    DELETE = "delete"


@dataclass(frozen=True)
class KeyEvent:
    """One change of one key.

    ``value``, ``create_revision`` and ``lease_id`` describe the key after a PUT and before
    a DELETE (a deleted key's last value, etcd's ``prev_kv``; empty and 0 when etcd no
    longer had it). ``revision``: the revision of the change itself.
    """

    kind: EventKind
    key: str
    value: bytes
    revision: int
    create_revision: int
    lease_id: int


def key_event(event: Any) -> KeyEvent:
    """etcd's ``mvccpb.Event`` as a KeyEvent."""
    if event.type == etcd_rpc.Event.DELETE:
        before = event.prev_kv
        return KeyEvent(
            EventKind.DELETE,
            event.kv.key.decode(),
            before.value,
            event.kv.mod_revision,
            before.create_revision,
            before.lease,
        )
    kv = event.kv
    return KeyEvent(EventKind.PUT, kv.key.decode(), kv.value, kv.mod_revision, kv.create_revision, kv.lease)


class Watch:
    """An async iterator of the KeyEvents under ``prefix`` from ``start_revision`` on (None:
    from now), made by :meth:`~writer_service.coordination.EtcdClient.watch`.

    Iterating raises WatchCompactedError when the revision to resume from was compacted, and
    CoordinationError when etcd refuses the watch; a closed watch stops iterating.
    """

    def __init__(self, rotation: MemberRotation, prefix: str, start_revision: int | None) -> None:
        self.prefix = prefix
        self._rotation = rotation
        self._next_revision = start_revision or 0
        self._pending: deque[KeyEvent] = deque()
        self._call: Any = None
        self._member: Member | None = None
        self._failures = 0
        self._pause = ROUND_PAUSE
        self._closed = False

    @property
    def next_revision(self) -> int:
        """The revision the watch resumes from: one past the last change delivered or reported
        (0 until etcd answered the first stream of a watch from now)."""
        return self._next_revision

    @property
    def closed(self) -> bool:
        """Whether the watch was closed (or ended by a compaction)."""
        return self._closed

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> KeyEvent:
        while not self._pending:
            if self._closed:
                raise StopAsyncIteration
            await self._read()
        return self._pending.popleft()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """End the stream; iterating stops (changes not yet read are dropped)."""
        self._closed = True
        self._pending.clear()
        self._drop()

    def _drop(self) -> None:
        if self._call is not None:
            self._call.cancel()
        self._call = None

    async def _read(self) -> None:
        """Read one answer from the stream, opening it first; a broken stream is dropped and
        the next member's is opened on the next read (after a pause once per round)."""
        try:
            if self._call is None:
                await self._open()
            response = await self._call.read()
        except asyncio.CancelledError:
            self._drop()  # the call was cancelled with the read; the next read opens another
            raise
        except grpc.aio.AioRpcError as error:
            if error.code() not in RETRYABLE:
                self._drop()
                raise etcd_refusal(error, f"watch {self.prefix!r}") from error
            await self._broken(f"{error.code().name} {error.details()}")
            return
        except asyncio.InvalidStateError:
            await self._broken("etcd ended the stream")
            return
        broken = "etcd ended the stream" if response is grpc.aio.EOF else self._take(response)
        if broken is not None:
            await self._broken(broken)

    async def _open(self) -> None:
        member = self._rotation.member()
        call = member.watch.Watch(metadata=REQUIRE_LEADER)
        self._call, self._member = call, member
        prefix = self.prefix.encode()
        create = etcd_rpc.WatchCreateRequest(
            key=prefix,
            range_end=prefix_range_end(prefix),
            start_revision=self._next_revision,
            prev_kv=True,
            progress_notify=True,
        )
        await call.write(etcd_rpc.WatchRequest(create_request=create))

    def _take(self, response: Any) -> str | None:
        """Take one WatchResponse; returns why the stream must be dropped, if it must."""
        if response.compact_revision > 0:
            self.close()
            raise WatchCompactedError(self.prefix, self._next_revision, response.compact_revision)
        if response.canceled:
            return f"etcd cancelled the watch: {response.cancel_reason}"
        self._failures, self._pause = 0, ROUND_PAUSE
        if response.created:
            if self._next_revision == 0:
                self._next_revision = response.header.revision + 1
        elif not response.events:  # a progress report: everything up to its revision was sent
            self._next_revision = max(self._next_revision, response.header.revision + 1)
        else:
            for event in response.events:
                self._pending.append(key_event(event))
            self._next_revision = self._pending[-1].revision + 1
        return None

    async def _broken(self, why: str) -> None:
        member = self._member
        self._drop()
        if member is None:
            return
        log.info(
            "etcd watch of %r on %s broke (%s); resuming at revision %d",
            self.prefix,
            member.endpoint,
            why,
            self._next_revision,
        )
        self._rotation.failed(member)
        self._failures += 1
        if self._failures % len(self._rotation.endpoints) == 0:
            await asyncio.sleep(self._pause)
            self._pause = min(self._pause * 2, ROUND_PAUSE_MAX)
