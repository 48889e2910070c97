"""Exactly-once appends without the caller's help (docs/spec.md §2.4, writer.proto ``AppendRequest``).

Every Append request carries a fresh ``request_id`` and ``request_since_seq`` S, the
session's next seq as this client last learnt it before the first attempt (a seq at
or below the one the request's first record gets). The writer answers for the
request id itself: before writing, it looks the id up in its memory of recent ids
and, from seq S on, in the session file, where the first line of every request
carries its id (a request mark, shared.records). Found: the first answer comes back
and nothing is written; not found: the request never landed and is written now. So
a retry needs no one but the writer, across lost answers and writer restarts alike.
The answers, and what the client does:

1. **OK**: done; the Session's next seq becomes the answer's ``next_seq``.
2. **UNAVAILABLE, RESOURCE_EXHAUSTED, ABORTED, DEADLINE_EXCEEDED**, and CANCELLED from
   the service (a writer shutting down cancels the calls it has not finished; one the
   client cancels itself raises CancelledError instead): the request may
   or may not have landed (except gRPC's own "larger than max" refusal of a request
   over the writer's size limit: never retried, see :func:`is_retryable`). The *same*
   request (same id, same S) is sent again after a backoff, until the policy's
   deadline; the writer answers the retry for the id, never writing it twice.
3. Any other status: raised as its typed error; the request is not retried. Each of
   them means the request was not written: the writer looks up the id before every
   check that could refuse it (a stopped session, ``expected_next_seq``), except the
   refusal to look it up at all (FAILED_PRECONDITION, PreconditionFailure subject
   ``request/<id>``: S lies too far back), which after an attempt that may have
   landed is :class:`AppendOutcomeUnknownError`.

An attempt refused at connect (no connection to the writer: gRPC never sent it, see
:mod:`rollout_client._connections`) cannot have landed and is not counted as one that
may have: while the writer is away (it answered before), the request waits for it to
accept connections again and is sent then. A deadline that runs out after an attempt
that may have landed raises :class:`AppendOutcomeUnknownError`; one that runs out with
every attempt unsent raises UnavailableError saying the request was not written. Never
a second copy, never a silent loss, and never a success inferred from counts.

A Session whose next seq is unknown (attached
with ``client.session(id)``) learns it first from the writer: an Append with
``expected_next_seq=0`` (never a valid next seq: seq 0 is the session_meta) is
refused without writing and names the actual next seq.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import grpc

from rollout.v1 import writer_pb2
from rollout_client._connections import ServiceConnection, UnreachedError, refused_at_connect
from rollout_client._errors import (
    AppendOutcomeUnknownError,
    ClientClosedError,
    FailedPreconditionError,
    RolloutError,
    UnavailableError,
)
from shared.reasons import GRPC_MESSAGE_TOO_LARGE, REPLY_TOO_LARGE, request_subject

T = TypeVar("T")

#: Statuses after which the same request is sent again (backoff, within the deadline).
RETRYABLE = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.CANCELLED,  # by the service as it stops (ours raise CancelledError)
    }
)
#: Statuses that prove a request was refused before anything was written.
REFUSED_UNWRITTEN = frozenset({grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.ABORTED})


def is_retryable(error: RolloutError, retry_on: frozenset[grpc.StatusCode] = RETRYABLE) -> bool:
    """Whether sending the same request again may succeed: a status in ``retry_on``, except the
    RESOURCE_EXHAUSTED refusals the same request meets every time: gRPC's own of a message over
    the service's size limit ("larger than max") and the reader's reply too large for one
    message (ErrorInfo reason ``REPLY_TOO_LARGE``: use the streaming call)."""
    if error.code not in retry_on:
        return False
    if error.code is not grpc.StatusCode.RESOURCE_EXHAUSTED:
        return True
    return not (is_reply_too_large(error) or GRPC_MESSAGE_TOO_LARGE in error.message)


def is_reply_too_large(error: RolloutError) -> bool:
    """Whether ``error`` is the reader's refusal of an answer too large for one unary reply
    (ErrorInfo reason ``REPLY_TOO_LARGE``): the streaming call serves it."""
    return any(info.reason == REPLY_TOO_LARGE for info in error.error_info)


@dataclass(frozen=True)
class RetryPolicy:
    """Backoff for retryable statuses: waits ``initial_backoff`` (s), times ``multiplier`` per
    attempt, capped at ``max_backoff`` (s), each with up to ±20 % jitter; gives up ``deadline``
    seconds after the first attempt. ``attempt_timeout`` (s) bounds each single call;
    ``max_attempts`` (0: no limit) caps the attempts of one call within the deadline."""

    deadline: float = 30.0
    initial_backoff: float = 0.05
    max_backoff: float = 2.0
    multiplier: float = 2.0
    attempt_timeout: float = 10.0
    max_attempts: int = 0

    def backoff(self, attempt: int) -> float:
        """Seconds to wait before attempt ``attempt + 1`` (``attempt`` counts from 1)."""
        base = min(self.max_backoff, self.initial_backoff * self.multiplier ** (attempt - 1))
        return float(base * random.uniform(0.8, 1.2))


class Attempts:
    """Attempt counting and backoff within one call's deadline (a :class:`RetryPolicy`), timed by
    the monotonic clock only: calls are sent without a gRPC timeout and bounded by :meth:`send`,
    because gRPC turns a timeout into a deadline with ``time.time()``, which the caller's process
    may move (a test freezing the wall clock made every attempt's deadline lie in the past)."""

    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy
        self.started = time.monotonic()
        self.count = 0

    def remaining(self) -> float:
        """Seconds left before the policy's deadline (negative once it has passed)."""
        return self.policy.deadline - (time.monotonic() - self.started)

    def timeout(self) -> float:
        """Seconds the next attempt may take (at least 10 ms)."""
        self.count += 1
        return max(0.01, min(self.policy.attempt_timeout, self.remaining()))

    def spent(self) -> bool:
        """Whether the policy's ``max_attempts`` have been made."""
        return bool(self.policy.max_attempts) and self.count >= self.policy.max_attempts

    async def send(
        self,
        start: Callable[[], Awaitable[T]],
        connection: ServiceConnection[Any] | None = None,
        reach_limit: float | None = None,
    ) -> T:
        """Make one attempt: ``start()`` (a gRPC call made without ``timeout=``) awaited for at most
        :meth:`timeout` seconds of the event loop's clock; then it is cancelled and raises
        ``grpc.aio.AioRpcError`` DEADLINE_EXCEEDED, as a gRPC deadline would have.

        With the ``connection`` the call goes through: a service that answered before and is away
        now is waited for first (nothing sent meanwhile), and an attempt refused at connect
        (nothing sent) is made again once it is back, within the deadline. Raises
        :class:`UnreachedError` when the call cannot be sent: a service that never answered refused
        it, or the deadline passed (or the attempts were spent) without a connection, or
        ``reach_limit`` seconds did (a shard's owner: the caller asks who owns it now)."""
        while True:
            if connection is not None:
                wait = self.remaining() if reach_limit is None else min(reach_limit, self.remaining())
                await connection.reached(wait)
            timeout = self.timeout()
            try:
                # A timeout scope, not wait_for: no task of its own per attempt (the hot path).
                async with asyncio.timeout(timeout):
                    result = await start()
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if (
                    connection is not None
                    and connection.closed
                    and task is not None
                    and not task.cancelling()
                ):
                    # the client closed the channel under this call: say so, not "cancelled"
                    raise ClientClosedError(
                        "the client was closed before this call completed (an append may have landed)"
                    ) from None
                raise
            except TimeoutError:
                raise grpc.aio.AioRpcError(
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    grpc.aio.Metadata(),
                    grpc.aio.Metadata(),
                    details=f"no answer within the attempt's {timeout:.3g} s",
                ) from None
            except grpc.aio.AioRpcError as error:
                if connection is None:
                    raise
                connection.failed(error)
                if not refused_at_connect(error):
                    raise
                if self.remaining() <= 0 or self.spent() or reach_limit is not None:
                    raise UnreachedError(connection.gone()) from error
                # the connection broke as the attempt started: wait for it again
                await asyncio.sleep(min(self.policy.initial_backoff, self.remaining()))
                continue
            if connection is not None:
                connection.answered = True
            return result

    async def wait(self) -> bool:
        """Sleep the backoff; False (without sleeping) when the deadline would pass or the
        attempts are spent."""
        if self.spent():
            return False
        delay = self.policy.backoff(self.count)
        if time.monotonic() - self.started + delay >= self.policy.deadline:
            return False
        await asyncio.sleep(delay)
        return True


@dataclass
class PendingAppend:
    """One Append request on its way to exactly-once: the records, their line counts, the seq
    it would land at or after (S), its id, an optional compare-and-swap seq, and whether an
    attempt may have landed."""

    session_id: str
    records: list[writer_pb2.AppendRecord]
    lines: list[int]
    since_seq: int
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    #: Optional compare-and-swap: the seq the first record must get (FAILED_PRECONDITION otherwise).
    expected_next_seq: int | None = None
    maybe_landed: bool = False

    @property
    def line_count(self) -> int:
        """k: the lines (seqs) this request writes."""
        return sum(self.lines)

    def request(self) -> writer_pb2.AppendRequest:
        """The request to send (the same on every attempt)."""
        request = writer_pb2.AppendRequest(
            session_id=self.session_id,
            records=self.records,
            request_id=self.request_id,
            request_since_seq=self.since_seq,
        )
        if self.expected_next_seq is not None:
            request.expected_next_seq = self.expected_next_seq
        return request

    def after_transport_failure(self, code: grpc.StatusCode) -> None:
        """Note an attempt whose answer was lost: it may have landed unless the status proves
        a refusal before any write."""
        if code not in REFUSED_UNWRITTEN:
            self.maybe_landed = True

    def unsettled(self, error: RolloutError) -> bool:
        """Whether ``error``, the last answer, leaves the request's outcome unknown: a retryable
        status, or the writer's refusal to look the id up, after an attempt that may have landed."""
        if not self.maybe_landed:
            return False
        if error.code in RETRYABLE:
            return True
        return isinstance(error, FailedPreconditionError) and any(
            violation.subject == request_subject(self.request_id)
            for violation in error.precondition_violations
        )

    def not_written(self, unreached: UnavailableError) -> UnavailableError:
        """The error raised when no attempt of the request was sent (each found no connection):
        it did not land."""
        return UnavailableError(
            f"append {self.request_id} to session {self.session_id} was not written: {unreached.message}",
            code=unreached.code,
        )

    def outcome_unknown(self, last: RolloutError) -> AppendOutcomeUnknownError:
        """The error raised when the request's outcome cannot be known (see :meth:`unsettled`)."""
        return AppendOutcomeUnknownError(
            f"append {self.request_id} to session {self.session_id} may have landed (an answer was"
            f" lost, and then: {last}); nothing was sent again. Replay the session to see whether"
            " its records are there, or send the same request again later: the writer answers for"
            " its request id",
            request_id=self.request_id,
            expected_next_seq=self.since_seq,
            actual_next_seq=None,
            record_count=self.line_count,
        )
