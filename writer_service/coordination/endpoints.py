"""etcd members named as ``HOST:PORT[,HOST:PORT...]``, and the rotation of requests over them.

Each member gets one gRPC channel, made when first used (in the running event loop). Every
request goes to the member in use. A member that fails a request (refuses the connection,
answers UNAVAILABLE because it has no leader or is shutting down, or leaves an attempt
unanswered for ``attempt_timeout`` seconds: a stopped process, a partition) hands the turn
to the next member, and the request is sent there at once. After a whole round of failures
the next round waits a pause (0.1 s, doubling to 1 s), so that a cluster with no member up
is not spun on.

Requests carry etcd's require-leader metadata (``hasleader: true``): a member cut off from
its cluster's leader refuses them with UNAVAILABLE at once and ends the streams it serves,
instead of holding them until its own request timeout, so the request moves on.

Channels reconnect within a second of a member's return (gRPC's reconnect backoff is capped
at 1 s here; its default grows to 2 min) and send an HTTP/2 keepalive ping every 6 s, also on
a stream with nothing to send (etcd refuses pings more often than every 5 s by default,
``--grpc-keepalive-min-time``); a ping unanswered for 5 s closes the connection, so that a
watch served by a member that stopped answering moves on within about 11 s.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from writer_service.coordination.errors import CoordinationError, EtcdUnavailableError, LeaseGoneError
from writer_service.coordination.protocol import etcd_rpc

#: Metadata of every request: a member without a leader refuses at once (etcd's require-leader).
REQUIRE_LEADER = (("hasleader", "true"),)

#: Statuses after which a request is tried on the next member: the member is down, cut off,
#: changing leader, overloaded, or the connection broke. Any other status is etcd's answer.
RETRYABLE = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.INTERNAL,
    }
)

#: Seconds one attempt on one member may take before the request moves to the next member.
ATTEMPT_TIMEOUT = 2.0
#: Seconds a whole request may take, over every member, before EtcdUnavailableError.
REQUEST_TIMEOUT = 10.0
#: Pause (seconds) after a round in which every member failed; doubles up to ROUND_PAUSE_MAX.
ROUND_PAUSE = 0.1
ROUND_PAUSE_MAX = 1.0

CHANNEL_OPTIONS = (
    ("grpc.keepalive_time_ms", 6_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.http2.ping_timeout_ms", 5_000),  # any ping (gRPC's default waits a minute)
    ("grpc.http2.max_pings_without_data", 0),  # an idle watch stream is pinged too
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1_000),
)


@dataclass(frozen=True)
class Endpoint:
    """One etcd member's client address (plain gRPC, no TLS)."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_endpoints(text: str) -> tuple[Endpoint, ...]:
    """``HOST:PORT[,HOST:PORT...]`` (an IPv6 host in brackets, an ``http://`` prefix allowed)
    -> the endpoints in that order, duplicates removed.

    Raises ValueError naming the part that is not an endpoint (TLS, ``https://``, is refused).
    """
    endpoints: list[Endpoint] = []
    for raw in text.split(","):
        part = raw.strip()
        if part.startswith("https://"):
            raise ValueError(f"etcd endpoint {part!r}: TLS is not supported; give HOST:PORT")
        address = part.removeprefix("http://").rstrip("/")
        host, colon, port_text = address.rpartition(":")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        elif ":" in host:
            host = ""  # an IPv6 address needs brackets to say where its port starts
        if not colon or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ValueError(f"etcd endpoint {part!r} is not HOST:PORT (e.g. 127.0.0.1:2379, [::1]:2379)")
        endpoint = Endpoint(host, int(port_text))
        if endpoint not in endpoints:
            endpoints.append(endpoint)
    return tuple(endpoints)


@dataclass(frozen=True)
class Member:
    """One etcd member's channel and the stubs over it."""

    index: int
    endpoint: Endpoint
    channel: Any
    kv: Any
    lease: Any
    watch: Any


def etcd_refusal(error: grpc.aio.AioRpcError, what: str, lease_id: int | None = None) -> CoordinationError:
    """etcd's answer refusing ``what`` (not a failure of the member) as our error: LeaseGoneError
    when it names lease ``lease_id`` unknown, CoordinationError with its status otherwise."""
    details = error.details() or ""
    if lease_id is not None and error.code() == grpc.StatusCode.NOT_FOUND and "lease not found" in details:
        return LeaseGoneError(lease_id, f"{what}: {details}")
    return CoordinationError(f"{what}: etcd answered {error.code().name}: {details}")


class MemberRotation:
    """The members of one etcd cluster and the one requests go to (see the module docstring).

    ``attempt_timeout``: seconds one attempt may take on one member.
    """

    def __init__(self, endpoints: Sequence[Endpoint], *, attempt_timeout: float = ATTEMPT_TIMEOUT) -> None:
        if not endpoints:
            raise ValueError("no etcd endpoint given")
        self.endpoints = tuple(endpoints)
        self.attempt_timeout = attempt_timeout
        self._members: dict[int, Member] = {}
        # Writers start on a random member, so that many of them spread over the cluster.
        self._current = random.randrange(len(self.endpoints))
        self._closed = False

    @property
    def current(self) -> Endpoint:
        """The member requests go to now."""
        return self.endpoints[self._current]

    def member(self) -> Member:
        """The member in use, its channel made if this is its first use."""
        if self._closed:
            raise CoordinationError("the etcd client is closed")
        index = self._current
        member = self._members.get(index)
        if member is None:
            endpoint = self.endpoints[index]
            channel = grpc.aio.insecure_channel(str(endpoint), options=CHANNEL_OPTIONS)
            member = Member(
                index,
                endpoint,
                channel,
                etcd_rpc.KVStub(channel),
                etcd_rpc.LeaseStub(channel),
                etcd_rpc.WatchStub(channel),
            )
            self._members[index] = member
        return member

    def failed(self, member: Member) -> None:
        """``member`` failed a request: the turn passes to the next member (once, however many
        requests saw it fail)."""
        if self._current == member.index:
            self._current = (member.index + 1) % len(self.endpoints)

    async def unary(
        self,
        method: Callable[[Member], Any],
        request: Any,
        *,
        timeout: float,
        what: str,
        lease_id: int | None = None,
    ) -> tuple[Any, float]:
        """Send ``request`` with ``method(member)`` (a unary stub method), moving over members
        until one answers; ``timeout``: seconds in all. Returns the answer and the
        ``time.monotonic()`` at which the answered attempt was sent.

        Raises EtcdUnavailableError when no member answered in time (the text lists the last
        failures), LeaseGoneError when etcd does not know lease ``lease_id``, CoordinationError
        for any other refusal of ``what``.
        """
        limit = time.monotonic() + timeout
        failures: list[str] = []
        pause = ROUND_PAUSE
        while True:
            remaining = limit - time.monotonic()
            if remaining <= 0:
                seen = "; ".join(failures[-len(self.endpoints) :]) or "no attempt was made"
                raise EtcdUnavailableError(f"{what}: no etcd member answered within {timeout:g} s ({seen})")
            member = self.member()
            sent_at = time.monotonic()
            try:
                answer = await method(member)(
                    request, timeout=min(self.attempt_timeout, remaining), metadata=REQUIRE_LEADER
                )
            except grpc.aio.AioRpcError as error:
                if error.code() not in RETRYABLE:
                    raise etcd_refusal(error, what, lease_id) from error
                failures.append(f"{member.endpoint}: {error.code().name} {error.details()}")
                self.failed(member)
                if len(failures) % len(self.endpoints) == 0:
                    await asyncio.sleep(min(pause, max(0.0, limit - time.monotonic())))
                    pause = min(pause * 2, ROUND_PAUSE_MAX)
                continue
            return answer, sent_at

    async def close(self) -> None:
        """Close every channel; requests still running fail with CANCELLED."""
        self._closed = True
        members, self._members = list(self._members.values()), {}
        for member in members:
            await member.channel.close()
