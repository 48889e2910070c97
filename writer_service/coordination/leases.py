"""Leases: granted with a TTL, kept alive on one stream, and the deadline that fences their use.

The deadline
------------
etcd's leader ends a lease when its own monotonic clock has run the lease's TTL past the last
grant or keepalive it accepted (its lessor sets ``expiry = now + TTL`` on each, and refuses
to renew a lease already expired). An answered keepalive therefore tells us that at some
instant R, after we sent it, the leader's expiry became R + TTL on the leader's clock. We
cannot see R, but we know the instant S (``time.monotonic()``, read just before sending)
at which we sent the request, and S comes before R.

Let rho bound how much faster our clock may run than the leader's (a relative rate
difference). From R to the expiry the leader's clock runs TTL seconds, so ours runs at
least TTL * (1 - rho); from S to R ours runs at least 0. On our clock the expiry is
therefore no earlier than S + TTL * (1 - rho), and we stop using the lease at::

    deadline = S + TTL - margin,    margin = rho * TTL + slack

with rho = 1e-3 (each clock within 500 ppm of true time, the most the kernel lets NTP
slew a clock's frequency by) and slack = 0.1 s, a fixed allowance that keeps the deadline
measurably before the expiry when rho * TTL is small (10 ms for a 10 s TTL). For a 10 s
TTL the margin is 0.11 s. Both are parameters: a host whose time daemon slews faster
(chrony's ``maxslewrate`` allows 83,333 ppm while it corrects a large offset) must state a
larger bound, or cap the slew rate.

Counting from S, not from the answer's arrival (later by the round trip and any stall of
our process) nor from the acquisition of a key, is what keeps the deadline before etcd's
expiry when an answer is slow: counted from the arrival, a writer keeps going for as long
as the answer took to reach it after etcd had already started the TTL.

Two things etcd does keep this sound across a change of leader: the new leader extends
every lease by an election timeout when it takes over (so a keepalive answered by a leader
about to be deposed still counts), and an isolated leader steps down within an election
timeout (check-quorum). A revocation needs a quorum, so no lease ends while none exists.

States
------
ALIVE while ``time.monotonic() < deadline()``. LAPSED once the deadline passed without a
newer answered keepalive: the lease may still exist in etcd, keepalives go on, and one
answered with TTL > 0 makes it ALIVE again (etcd renews only a lease that has not ended, so
nothing held under it was lost). GONE when etcd answers that the lease has ended (TTL <= 0
or "lease not found"), or after :meth:`Lease.release` or :meth:`Lease.abandon`; final.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from collections.abc import Callable
from typing import Any

import grpc

from writer_service.coordination.endpoints import (
    REQUEST_TIMEOUT,
    REQUIRE_LEADER,
    RETRYABLE,
    ROUND_PAUSE,
    ROUND_PAUSE_MAX,
    MemberRotation,
)
from writer_service.coordination.errors import LeaseGoneError
from writer_service.coordination.protocol import etcd_rpc

log = logging.getLogger(__name__)

#: Bound on the relative rate difference of our monotonic clock and the etcd leader's.
DRIFT_BOUND = 1e-3
#: Seconds subtracted from the deadline on top of the drift term.
DEADLINE_SLACK = 0.1

#: Called with the lease when it stops being alive (deadline passed, or etcd ended it).
LeaseListener = Callable[["Lease"], None]


def lease_deadline(
    sent_at: float, ttl: float, *, drift_bound: float = DRIFT_BOUND, slack: float = DEADLINE_SLACK
) -> float:
    """The ``time.monotonic()`` instant until which a lease is ours, given the send time
    ``sent_at`` of its last answered grant or keepalive and its TTL (seconds):
    ``sent_at + ttl - (drift_bound * ttl + slack)`` (derivation: the module docstring)."""
    return sent_at + ttl - (drift_bound * ttl + slack)


class LeaseState(enum.Enum):
    """Where a lease stands (module docstring: States)."""

    ALIVE = "alive"
    LAPSED = "lapsed"
    GONE = "gone"


class _StreamEndedError(Exception):
    """etcd closed the keepalive stream without an error status."""


class Lease:
    """An etcd lease this process keeps alive on one stream (granted by
    :meth:`~writer_service.coordination.EtcdClient.grant_lease`).

    ``id``: etcd's lease id. ``ttl``: seconds, as etcd granted it (etcd raises a TTL below
    its minimum, 1.5 election timeouts). ``interval``: seconds between two keepalives.
    """

    def __init__(
        self,
        rotation: MemberRotation,
        lease_id: int,
        ttl: int,
        sent_at: float,
        *,
        interval: float,
        answer_timeout: float,
        drift_bound: float,
        slack: float,
        on_lost: LeaseListener | None,
    ) -> None:
        self.id = lease_id
        self.ttl = ttl
        self.interval = interval
        self._rotation = rotation
        self._answer_timeout = answer_timeout
        self._drift_bound = drift_bound
        self._slack = slack
        self._on_lost = on_lost
        self._deadline = lease_deadline(sent_at, ttl, drift_bound=drift_bound, slack=slack)
        self._state = LeaseState.ALIVE
        self._renewals = 0
        self._lost = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._timer: asyncio.TimerHandle | None = None
        self._watch_deadline()
        self._keepalive = asyncio.create_task(
            self._keep_alive(sent_at + interval), name=f"etcd lease {lease_id:x} keepalive"
        )

    def deadline(self) -> float:
        """The ``time.monotonic()`` instant (seconds) until which the lease is ours: the send
        time of the last answered grant or keepalive plus the TTL, minus the margin
        (``drift_bound * ttl + slack``). Never decreases."""
        return self._deadline

    def alive(self) -> bool:
        """Whether the lease is ours now: ``time.monotonic() < deadline()`` and not GONE."""
        return self._state is not LeaseState.GONE and time.monotonic() < self._deadline

    @property
    def state(self) -> LeaseState:
        """ALIVE, LAPSED or GONE (module docstring: States); the lapse is noticed by a timer,
        so read :meth:`alive` where the exact instant matters."""
        return self._state

    @property
    def renewals(self) -> int:
        """How many keepalives etcd answered with TTL > 0 so far."""
        return self._renewals

    async def wait_lost(self) -> None:
        """Return once the lease is not alive (its deadline passed, or it is GONE)."""
        await self._lost.wait()

    async def release(self, *, timeout: float = REQUEST_TIMEOUT) -> None:
        """Stop keeping the lease alive and revoke it: etcd deletes every key held under it.
        The lease is GONE at once (``on_lost`` is not called).

        Raises EtcdUnavailableError when no member answered within ``timeout`` seconds (the
        lease then ends by itself, a TTL after its last keepalive). A lease etcd had ended
        already is no error.
        """
        await self.abandon()
        request = etcd_rpc.LeaseRevokeRequest(ID=self.id)
        with contextlib.suppress(LeaseGoneError):  # it had ended already
            await self._rotation.unary(
                lambda member: member.lease.LeaseRevoke,
                request,
                timeout=timeout,
                what=f"revoke lease {self.id:x}",
                lease_id=self.id,
            )

    async def abandon(self) -> None:
        """Stop keeping the lease alive without revoking it: it is GONE here at once, and etcd
        ends it (deleting its keys) a TTL after its last keepalive."""
        self._end()
        self._keepalive.cancel()
        await asyncio.wait([self._keepalive])
        if not self._keepalive.cancelled() and self._keepalive.exception() is not None:
            log.error("etcd lease %x: keepalive failed", self.id, exc_info=self._keepalive.exception())

    def _kept(self) -> bool:
        return self._state is not LeaseState.GONE

    def _end(self) -> None:
        self._state = LeaseState.GONE
        self._lost.set()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _lapse(self, state: LeaseState, why: str) -> None:
        """The lease stopped being alive: notify once per loss."""
        was_alive = self._state is LeaseState.ALIVE
        if state is LeaseState.GONE:
            self._end()
        else:
            self._state = state
            self._lost.set()
        if was_alive:
            log.warning("etcd lease %x lost: %s", self.id, why)
            if self._on_lost is not None:
                try:
                    self._on_lost(self)
                except Exception:  # the listener's failure must not stop the keepalives
                    log.exception("etcd lease %x: on_lost failed", self.id)

    def _watch_deadline(self) -> None:
        """Arm the timer at the deadline, or lapse now if the deadline has passed (also the
        timer's callback)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._state is not LeaseState.ALIVE:
            return
        if time.monotonic() >= self._deadline:
            self._lapse(LeaseState.LAPSED, "no keepalive was answered before its deadline")
        else:
            self._timer = self._loop.call_later(self._deadline - time.monotonic(), self._watch_deadline)

    def _renewed(self, sent_at: float, ttl: int) -> None:
        """etcd answered the keepalive sent at ``sent_at`` with ``ttl`` seconds."""
        self._watch_deadline()  # a lapse the timer has not reported yet is reported first
        self._deadline = max(
            self._deadline, lease_deadline(sent_at, ttl, drift_bound=self._drift_bound, slack=self._slack)
        )
        self._renewals += 1
        if self._state is LeaseState.LAPSED and time.monotonic() < self._deadline:
            log.warning("etcd lease %x is kept alive again", self.id)
            self._state = LeaseState.ALIVE
            self._lost.clear()
        self._watch_deadline()

    async def _keep_alive(self, next_send: float) -> None:
        """One keepalive stream at a time, one keepalive in flight on it, every ``interval``
        seconds; a stream that fails or leaves a keepalive unanswered for ``answer_timeout``
        seconds is dropped and the next member's stream takes over."""
        request = etcd_rpc.LeaseKeepAliveRequest(ID=self.id)
        failures = 0
        pause = ROUND_PAUSE
        while self._kept():
            member = self._rotation.member()
            call = member.lease.LeaseKeepAlive(metadata=REQUIRE_LEADER)
            try:
                while self._kept():
                    delay = next_send - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    sent_at = time.monotonic()
                    # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation
                    # that arrives as the answer does, and the loop would outlive abandon().
                    async with asyncio.timeout(self._answer_timeout):
                        answer = await self._exchange(call, request)
                    if answer.TTL <= 0:
                        self._lapse(LeaseState.GONE, "etcd answered that it has ended")
                        return
                    self._renewed(sent_at, answer.TTL)
                    failures, pause = 0, ROUND_PAUSE
                    next_send = sent_at + self.interval
                return
            except grpc.aio.AioRpcError as error:
                if error.code() == grpc.StatusCode.NOT_FOUND:
                    self._lapse(LeaseState.GONE, f"etcd answered {error.details()}")
                    return
                if error.code() not in RETRYABLE:
                    log.warning("etcd lease %x: keepalive refused by %s: %s", self.id, member.endpoint, error)
                why = f"{error.code().name} {error.details()}"
            except TimeoutError:
                why = f"no answer within {self._answer_timeout:g} s"
            except (_StreamEndedError, asyncio.InvalidStateError):
                why = "etcd ended the stream"
            finally:
                call.cancel()
            log.info("etcd lease %x: keepalive stream on %s failed (%s)", self.id, member.endpoint, why)
            self._rotation.failed(member)
            failures += 1
            if failures % len(self._rotation.endpoints) == 0:
                await asyncio.sleep(pause)
                pause = min(pause * 2, ROUND_PAUSE_MAX)
            next_send = time.monotonic()

    @staticmethod
    async def _exchange(call: Any, request: Any) -> Any:
        await call.write(request)
        answer = await call.read()
        if answer is grpc.aio.EOF:
            raise _StreamEndedError
        return answer
