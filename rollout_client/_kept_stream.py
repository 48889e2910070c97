"""Appends over a kept stream: one writer.proto ``AppendStream`` per session and event loop, left
open between appends (docs/spec.md §2.4 for what settles a request).

A unary Append costs a call's setup at both ends; a request on an open stream costs one message
each way, about a third less time for a one-record append on loopback (bench/README.md,
agents_session). A session's appends from one loop are sent one at a time, so each request on
its stream is answered before the next is sent, and an answer is always the last request's.

The stream is only a faster way to make the first attempt of a request; exactly once is kept by
the request itself (its id and ``request_since_seq``, :mod:`rollout_client._appends`). When the
answer does not come back on the stream (the stream ended with any status, broke, or the
attempt's timeout passed), the stream is closed and the *same* request is settled by the unary
path: the writer answers for its id if the stream's attempt landed, and writes it otherwise; a
refusal on the stream (a stale ``expected_next_seq``, a stopped session, a bad record, another
writer owning the shard) is met again there and raised as the unary call raises it. The stream
is used only while the writer's channel on the loop is connected; otherwise the unary path
(waiting for a restarting writer, failing fast for one that never answered) makes the attempt.

A stream is ended while its loop still runs: when the loop shuts down (``asyncio.run`` closes the
async generators of its loop before closing it) and when this object goes, the client half-closes
it and waits for the writer's status (a stream left open when its loop closed would be finished
later by gRPC on a loop that no longer runs).
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import AsyncIterator
from typing import Any

import grpc

from rollout.v1 import writer_pb2
from rollout_client._appends import PendingAppend, RetryPolicy
from rollout_client._connections import refused_at_connect
from rollout_client._routing import WriterRouting

#: Seconds an ending stream waits for the writer's status before it is cancelled. Short: when
#: ``asyncio.run`` ends, it cancels every task of its loop, gRPC's own task that receives a
#: stream's status among them, before it closes the async generators that end the streams; no
#: status can come then, and this wait is how long the run's exit is delayed. Cancelling a
#: stream costs nothing at the writer: every request sent on it was answered, or is settled by
#: the unary path.
END_SECONDS = 0.25


async def _half_close(call: Any) -> None:
    """Half-close an open stream and wait for the writer's status (cancel it after
    :data:`END_SECONDS`, or when it cannot be half-closed)."""
    if call.done():
        return
    try:
        async with asyncio.timeout(END_SECONDS):
            await call.done_writing()
            await call.code()
    except (TimeoutError, grpc.aio.AioRpcError, asyncio.InvalidStateError):
        call.cancel()


async def _end(call: Any) -> None:
    """End a stream on its loop (:func:`_half_close`), even when the loop's shutdown cancels the
    task doing it (``asyncio.run`` cancels what is left, then waits for it): the end is finished
    first, then the cancellation raised."""
    try:
        await _half_close(call)
    except asyncio.CancelledError:
        await _half_close(call)
        raise


async def _held(call: Any) -> AsyncIterator[None]:
    """Started once when its stream opens and never resumed: closing it (its loop's shutdown, or
    its collection once the stream's owner goes) ends the stream on that loop (:func:`_end`)."""
    try:
        yield
    finally:
        await _end(call)


async def _start_held(holder: AsyncIterator[None]) -> None:
    """Start ``holder`` (:func:`_held`): the running loop now knows it, and its next
    ``shutdown_asyncgens()`` closes it. A loop whose owner called that already and keeps running
    (the Agents SDK's ``Runner.run_sync`` does after every run) still closes it at its next one;
    the ResourceWarning asyncio gives for a generator started after a shutdown is not raised
    (a caller's warnings-as-errors filter would make it the append's error). The generator runs
    to its ``yield`` without suspending, so the filter is changed only while nothing else runs
    on this thread."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", "asynchronous generator .* after loop.shutdown_asyncgens", ResourceWarning
        )
        await anext(holder)


class KeptAppendStream:
    """One session's AppendStream on one event loop (see the module doc); opened on first use,
    opened again after it ends."""

    def __init__(self) -> None:
        self._call: Any = None  # a grpc.aio StreamStreamCall while open
        self._holder: AsyncIterator[None] | None = None

    async def send(
        self, routing: WriterRouting, retry: RetryPolicy, pending: PendingAppend
    ) -> writer_pb2.AppendResponse | None:
        """The writer's answer to ``pending`` sent on the stream, or None when the stream gave none:
        then the stream is closed, ``pending`` notes whether the attempt may have landed, and the
        caller settles it with the unary path (the same request). A cancellation closes the
        stream (a later answer is never taken for another request's) and is raised."""
        call = self._call
        if call is None or call.done():
            self._call = None
            connection = await routing.route(pending.session_id, retry.deadline)
            if not connection.ready():
                return None
            call = connection.stub.AppendStream()
            holder = _held(call)
            await _start_held(holder)
            self._call, self._holder = call, holder
        try:
            async with asyncio.timeout(retry.attempt_timeout):
                await call.write(pending.request())
                response = await call.read()
        except asyncio.InvalidStateError:  # the stream had ended: nothing of this request was sent
            self.close()
            return None
        except grpc.aio.AioRpcError as error:
            self.close()
            if not refused_at_connect(error):
                pending.after_transport_failure(error.code())
            return None
        except TimeoutError:
            self.close()
            pending.maybe_landed = True
            return None
        except asyncio.CancelledError:
            self.close()
            raise
        if not isinstance(response, writer_pb2.AppendResponse) or response.session_id != pending.session_id:
            self.close()  # the stream ended without an answer (EOF)
            pending.maybe_landed = True
            return None
        return response

    def close(self) -> None:
        """Let the stream go: it is ended on its loop (:func:`_held`); the next send opens another."""
        self._call = None
        self._holder = None  # collected now: its close ends the stream (:func:`_end`)
