"""Exactly-once appends without the caller's help (SPEC §2.4, writer.proto ``AppendRequest``).

Every Append request carries a fresh ``request_id`` and ``expected_next_seq`` E,
the seq this Session expects its first record to get. A request writes k lines
(k counted as the writer counts: a message with N reasoning blocks is N + 1).
The answers, and what the client does:

1. **OK**: done; the Session's next seq becomes the answer's ``next_seq``.
2. **UNAVAILABLE, RESOURCE_EXHAUSTED, ABORTED, DEADLINE_EXCEEDED**: the request may
   or may not have landed (except gRPC's own "larger than max" refusal of a request
   over the writer's size limit: never retried, see :func:`is_retryable`). The *same* request (same id, same E) is sent again after
   a backoff, until the policy's deadline. A writer that kept running answers the
   retry from its request-id memory (the first answer; nothing written again).
3. **FAILED_PRECONDITION with the actual next seq N** (a seq mismatch):

   a. if no earlier attempt of this request can have landed (this is its first
      attempt, or the earlier ones were settled as not landed), another client
      appended N - E lines meanwhile: nothing of ours is in the file; E becomes N
      and the request is sent again (an append is an append, not a
      compare-and-swap);
   b. if an earlier attempt may have landed, the writer restarted between that
      attempt and now (it forgets request ids, so the retry was checked against
      ``expected_next_seq`` instead). Requests are atomic, and every attempt since
      E was settled carried that same E, so a landed attempt sits exactly at seqs
      E .. E + k - 1:

      * N < E + k: it did not land (N - E lines of someone else, fewer than ours):
        E becomes N and it is sent again;
      * N >= E + k: the records at seqs E .. E + k - 1 are read back from the
        reader (WatchSession from E) and compared, type and payload, with the
        lines this request writes: the same, it landed (its seqs are returned,
        the next seq is N); different, another client wrote them and ours did not
        land: E becomes N and it is sent again. Only identical records written by
        another client in that window would be taken for ours.
      * When the reader cannot answer within the attempt's timeout, seqs alone
        decide: N == E + k is taken as landed (exact when nothing else appended
        to the session meanwhile: one writer per session), and N > E + k raises
        :class:`AppendOutcomeUnknownError` (nothing is sent again).

4. Any other status: raised as its typed error; the request is not retried.

A deadline that runs out after an attempt that may have landed raises
:class:`AppendOutcomeUnknownError` too: never a second copy, never a silent loss.
A Session whose next seq is unknown (attached with ``client.session(id)``) learns it
first from the reader's stop facts (``next_seq``, read from the file's tail), or,
when the tail holds no record, by asking the writer for ``expected_next_seq=0``:
seq 0 is always the session_meta, so the writer refuses without writing and names
the actual next seq.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from rollout.v1 import writer_pb2
from rollout_client._errors import AppendOutcomeUnknownError, FailedPreconditionError, RolloutError
from shared.errors import REPLY_TOO_LARGE
from shared.wire import append_payloads

#: Statuses after which the same request is sent again (backoff, within the deadline).
RETRYABLE = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
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
    return not (is_reply_too_large(error) or "larger than max" in error.message)


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
    """Attempt counting and backoff within one call's deadline (a :class:`RetryPolicy`)."""

    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy
        self.started = time.monotonic()
        self.count = 0

    def timeout(self) -> float:
        """Seconds the next attempt may take (at least 10 ms)."""
        self.count += 1
        remaining = self.policy.deadline - (time.monotonic() - self.started)
        return max(0.01, min(self.policy.attempt_timeout, remaining))

    async def wait(self) -> bool:
        """Sleep the backoff; False (without sleeping) when the deadline would pass or the
        attempts are spent."""
        if self.policy.max_attempts and self.count >= self.policy.max_attempts:
            return False
        delay = self.policy.backoff(self.count)
        if time.monotonic() - self.started + delay >= self.policy.deadline:
            return False
        await asyncio.sleep(delay)
        return True


@dataclass
class PendingAppend:
    """One Append request on its way to exactly-once: the records, their line counts, the
    seq they must start at and whether an earlier attempt may have landed."""

    session_id: str
    records: list[writer_pb2.AppendRecord]
    lines: list[int]
    expected_next_seq: int
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    maybe_landed: bool = False

    @property
    def line_count(self) -> int:
        """k: the lines (seqs) this request writes."""
        return sum(self.lines)

    def request(self) -> writer_pb2.AppendRequest:
        """The request to send now (the same id every time; E as currently settled)."""
        return writer_pb2.AppendRequest(
            session_id=self.session_id,
            records=self.records,
            expected_next_seq=self.expected_next_seq,
            request_id=self.request_id,
        )

    def after_transport_failure(self, code: grpc.StatusCode) -> None:
        """Note an attempt whose answer was lost: it may have landed unless the status proves
        a refusal before any write."""
        if code not in REFUSED_UNWRITTEN:
            self.maybe_landed = True

    def after_mismatch(self, error: FailedPreconditionError) -> writer_pb2.AppendResponse | None:
        """Rule 3: the response the request got if it has landed, else None (send again with
        the settled E). Raises AppendOutcomeUnknownError (3b, N > E + k), or ``error`` itself
        when it names no next seq."""
        actual = error.next_seq
        if actual is None:
            raise error
        expected, count = self.expected_next_seq, self.line_count
        if not self.maybe_landed or actual < expected + count:
            self.expected_next_seq = actual
            self.maybe_landed = False
            return None
        if actual == expected + count:
            return self.landed_response()
        raise AppendOutcomeUnknownError(
            f"append {self.request_id} to session {self.session_id} may have landed: the writer"
            f" restarted and now has next seq {actual}, more than the {count} line(s) this request"
            f" writes from seq {expected}; nothing was sent again. Replay the session to see"
            " whether its records are there.",
            request_id=self.request_id,
            expected_next_seq=expected,
            actual_next_seq=actual,
            record_count=count,
        )

    def landed_response(self, next_seq: int | None = None) -> writer_pb2.AppendResponse:
        """The answer the lost attempt got: each record's seq (a message's own seq, after its
        reasoning blocks) and the next seq (``next_seq`` when known, else E + k)."""
        seqs, seq = [], self.expected_next_seq
        for lines in self.lines:
            seq += lines
            seqs.append(seq - 1)
        return writer_pb2.AppendResponse(session_id=self.session_id, seqs=seqs, next_seq=next_seq or seq)

    def needs_comparison(self, actual_next_seq: int) -> bool:
        """Rule 3b with N >= E + k: whether an earlier attempt may sit at seqs E .. E + k - 1."""
        return self.maybe_landed and actual_next_seq >= self.expected_next_seq + self.line_count

    def written_lines(self) -> list[tuple[str, dict[str, Any]]]:
        """(type, payload) of each line this request writes, in file order (as the writer makes them)."""
        return [
            (str(kind), payload)
            for index, record in enumerate(self.records)
            for kind, payload in append_payloads(record, index)
        ]

    def settle_by_records(
        self, stored: Sequence[tuple[str, Any]], actual_next_seq: int
    ) -> writer_pb2.AppendResponse | None:
        """Rule 3b by content: ``stored`` is (type, payload) of the records at seqs E .. E + k - 1.
        This request's lines: it landed (its answer). Others: it did not; E becomes N (None)."""
        if list(stored) == self.written_lines():
            return self.landed_response(actual_next_seq)
        self.expected_next_seq = actual_next_seq
        self.maybe_landed = False
        return None

    def outcome_unknown(self, last: Exception) -> AppendOutcomeUnknownError:
        """The error raised when the deadline ends after an attempt that may have landed (the
        writer's next seq was never learned: ``actual_next_seq`` None)."""
        return AppendOutcomeUnknownError(
            f"append {self.request_id} to session {self.session_id} may have landed (its answer was"
            f" lost: {last}) and the retry deadline ran out; nothing was sent again",
            request_id=self.request_id,
            expected_next_seq=self.expected_next_seq,
            actual_next_seq=None,
            record_count=self.line_count,
        )
