"""A LedgerSession's appends over a kept AppendStream (rollout_client/_kept_stream.py): one stream
per session and event loop, and exactly once as over unary Appends when the stream loses an
answer or refuses a request (the same request is then settled by the unary path); and the RPCs
a run of pops makes."""

from __future__ import annotations

import asyncio
import os
import signal
import warnings
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from rollout.v1 import writer_pb2
from rollout_client import CHANNEL_OPTIONS, FailedPreconditionError, RetryPolicy, RolloutClient
from rollout_client.agents import LedgerSession
from tests.client.conftest import TEST_RETRY
from tests.client.test_exactly_once import APPEND, WriterProxy, file_records
from tests.ports import free_port
from tests.processes import start_service
from tests.writer.test_exactly_once import stopped_by_signal, wait_until
from writer_service.committer import STOP_BEFORE_SYNC_ENV

APPEND_STREAM = "/rollout.v1.RolloutWriter/AppendStream"


def _method(details: Any) -> str:
    method = details.method
    return method.decode() if isinstance(method, bytes) else str(method)


class _CountingUnary(grpc.aio.UnaryUnaryClientInterceptor):
    """Counts the unary calls a client starts, by method."""

    def __init__(self, calls: Counter[str]) -> None:
        self.calls = calls

    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        self.calls[_method(details)] += 1
        return await continuation(details, request)


class _CountingStreams(grpc.aio.StreamStreamClientInterceptor):
    """Counts the bidirectional streams a client opens, by method."""

    def __init__(self, calls: Counter[str]) -> None:
        self.calls = calls

    async def intercept_stream_stream(self, continuation: Any, details: Any, requests: Any) -> Any:
        self.calls[_method(details)] += 1
        return await continuation(details, requests)


def test_a_ledger_session_appends_over_one_kept_stream(writer_process, reader_process) -> None:
    """Adds and pops of one LedgerSession on one loop go over one AppendStream, no unary Append."""
    calls: Counter[str] = Counter()

    def opener(_service: str, address: str) -> grpc.aio.Channel:
        interceptors = [_CountingUnary(calls), _CountingStreams(calls)]
        return grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS, interceptors=interceptors)

    async def run() -> list[Any]:
        ledger = LedgerSession("kept", client=client)
        for number in range(5):
            await ledger.add_items([{"role": "user", "content": f"m{number}"}])
        assert await ledger.get_items() == [{"role": "user", "content": f"m{n}"} for n in range(5)]
        assert await ledger.pop_item() == {"role": "user", "content": "m4"}
        assert await ledger.pop_item() == {"role": "user", "content": "m3"}
        return await ledger.get_items()

    with RolloutClient(
        writer_process.address, reader_process.address, retry=TEST_RETRY, channels=opener
    ) as client:
        items = asyncio.run(run())
    assert items == [{"role": "user", "content": f"m{n}"} for n in range(3)]
    assert calls[APPEND_STREAM] == 1
    assert calls[APPEND] == 0


class StreamLosingProxy(WriterProxy):
    """A WriterProxy that also serves AppendStream: each request on a stream is forwarded to the
    writer as a unary Append (so it lands), then the stream ends UNAVAILABLE with the answer lost
    (``lose_answer``), or the answer comes back (``forward``), per ``stream_plans``."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir)
        self.stream_plans: list[str] = []
        self.stream_requests = 0

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        if details.method == APPEND_STREAM:
            return grpc.stream_stream_rpc_method_handler(self.relay)
        return super().service(details)

    def relay(self, requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
        for request in requests:
            self.stream_requests += 1
            plan = self.stream_plans.pop(0) if self.stream_plans else "forward"
            answer = self.forward(APPEND, request, context)
            if plan == "lose_answer":
                context.abort(grpc.StatusCode.UNAVAILABLE, "proxy: stream answer lost on purpose")
            yield answer


@pytest.fixture
def losing_proxy(data_dir: Path) -> Iterator[StreamLosingProxy]:
    running = StreamLosingProxy(data_dir)
    yield running
    running.close()


def test_an_answer_lost_on_the_stream_is_settled_once_by_the_request_id(
    losing_proxy, reader_process, data_dir
) -> None:
    """The stream's request landed and its answer was lost: the same request, sent unary, is answered
    for its id; the item is in the file once, and the next add opens a stream again."""
    losing_proxy.stream_plans = ["forward", "lose_answer", "forward"]

    async def run(client: RolloutClient) -> tuple[str, list[Any]]:
        ledger = LedgerSession("lost-answer", client=client)
        for text in ("one", "two", "three"):
            await ledger.add_items([{"role": "user", "content": text}])
        assert ledger._attached is not None
        return ledger._attached.session.id, await ledger.get_items()

    with RolloutClient(losing_proxy.address, reader_process.address, retry=TEST_RETRY) as client:
        session_id, items = asyncio.run(run(client))
    assert items == [{"role": "user", "content": text} for text in ("one", "two", "three")]
    contents = [
        r["payload"].get("content") for r in file_records(data_dir, session_id) if r["type"] == "message"
    ]
    assert contents == ["one", "two", "three"]
    assert losing_proxy.stream_requests == 3
    assert losing_proxy.appends_seen == 1  # the lost answer's request, settled unary


def test_a_refusal_on_the_stream_is_raised_as_the_unary_call_raises_it(client) -> None:
    """A stale expected_next_seq refused on the stream ends it; the request is met again unary and
    raises FailedPreconditionError with the session's next seq, and nothing is written."""

    async def run() -> None:
        ledger = LedgerSession("refused", client=client)
        await ledger.add_items([{"role": "user", "content": "kept"}])
        assert ledger._attached is not None
        session = ledger._attached.session
        with pytest.raises(FailedPreconditionError) as refused:
            await session.append({"role": "user", "content": "stale"}, expected_next_seq=1)
        assert refused.value.next_seq == session.next_seq == 2
        await ledger.add_items([{"role": "user", "content": "after"}])
        assert await ledger.get_items() == [
            {"role": "user", "content": "kept"},
            {"role": "user", "content": "after"},
        ]

    asyncio.run(run())


def test_the_stream_is_not_used_while_the_writer_channel_is_not_connected() -> None:
    """Without a connected channel on the loop the kept stream gives no answer and sends nothing,
    so the unary path (its waits and fail-fast) makes the attempt."""
    from rollout_client._appends import PendingAppend, RetryPolicy
    from rollout_client._kept_stream import KeptAppendStream

    class _Connection:
        def ready(self) -> bool:
            return False

    class _Routing:
        async def route(self, session_id: str, deadline: float) -> _Connection:
            return _Connection()

    pending = PendingAppend("s", [writer_pb2.AppendRecord()], [1], 1)
    answer = asyncio.run(KeptAppendStream().send(_Routing(), RetryPolicy(), pending))  # type: ignore[arg-type]
    assert answer is None
    assert not pending.maybe_landed


def test_a_run_of_pops_reads_the_tail_once_per_kept_tail_not_once_per_pop(
    writer_process, reader_process
) -> None:
    """Pops past the object's kept tail read the next TAIL_MESSAGES messages at once: 80 pops of a
    fresh object make 2 GetRecentMessages calls, not one per pop."""
    calls: Counter[str] = Counter()

    def opener(_service: str, address: str) -> grpc.aio.Channel:
        interceptors = [_CountingUnary(calls), _CountingStreams(calls)]
        return grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS, interceptors=interceptors)

    async def run() -> list[Any]:
        await LedgerSession("pops", client=client).add_items(
            [{"role": "user", "content": f"m{n}"} for n in range(100)]
        )
        ledger = LedgerSession("pops", client=client)
        return [await ledger.pop_item() for _ in range(80)]

    with RolloutClient(
        writer_process.address, reader_process.address, retry=TEST_RETRY, channels=opener
    ) as client:
        popped = asyncio.run(run())
    assert popped == [{"role": "user", "content": f"m{n}"} for n in range(99, 19, -1)]
    assert calls["/rollout.v1.RolloutReader/GetRecentMessages"] == 2


def test_a_loop_whose_async_generators_were_shut_down_keeps_a_stream_without_a_warning(client) -> None:
    """Runner.run_sync leaves its loop open and calls ``shutdown_asyncgens()`` after each run: the
    stream a later run opens is still kept (and ended by the next shutdown) with no ResourceWarning,
    which a test suite that turns warnings into errors would raise from add_items."""
    ledger = LedgerSession("run-sync-loop", client=client)
    loop = asyncio.new_event_loop()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", ResourceWarning)
            for run in range(3):
                loop.run_until_complete(ledger.add_items([{"role": "user", "content": f"run {run}"}]))
                loop.run_until_complete(loop.shutdown_asyncgens())
        items = loop.run_until_complete(ledger.get_items())
    finally:
        loop.close()
    assert items == [{"role": "user", "content": f"run {run}"} for run in range(3)]


@pytest.mark.parametrize("then", ["attempt-times-out", "writer-killed"])
def test_a_stream_request_whose_round_stalls_is_settled_once(
    data_dir, tmp_path, reader_process, then
) -> None:
    """An add sent on the kept stream whose lines stall between the round's write and its sync (the
    writer stops itself: the committer's test hook). Either the stream attempt's timeout passes
    and the unary path sends the same request (then the writer resumes), or the writer is killed
    and restarted at the same address with the request in flight: the add returns once, the item
    is in the history and the file once, and the object goes on adding and popping."""
    address = f"127.0.0.1:{free_port()}"
    marker = f"stalled-on-the-stream-{then}"
    writer = start_service(
        "writer", data_dir, tmp_path / "writer.log", address=address, env={STOP_BEFORE_SYNC_ENV: marker}
    )
    calls: Counter[str] = Counter()

    def opener(_service: str, target: str) -> grpc.aio.Channel:
        return grpc.aio.insecure_channel(
            target, options=CHANNEL_OPTIONS, interceptors=[_CountingUnary(calls)]
        )

    retry = RetryPolicy(deadline=300.0, initial_backoff=0.02, max_backoff=0.5, attempt_timeout=2.0)

    async def run(client: RolloutClient) -> tuple[str, list[Any], Any]:
        nonlocal writer
        ledger = LedgerSession("stalled", client=client)
        await ledger.add_items([{"role": "user", "content": "one"}])
        unary_before = calls[APPEND]
        adding = asyncio.ensure_future(ledger.add_items([{"role": "user", "content": marker}]))
        await asyncio.to_thread(
            wait_until, lambda: stopped_by_signal(writer.process.pid), "the writer stopped in the round"
        )
        if then == "attempt-times-out":
            await asyncio.to_thread(
                wait_until, lambda: calls[APPEND] > unary_before, "the unary path sent it"
            )
            os.kill(writer.process.pid, signal.SIGCONT)
        else:
            await asyncio.to_thread(writer.stop, signal.SIGKILL)
            writer = await asyncio.to_thread(
                start_service, "writer", data_dir, tmp_path / "writer-2.log", address=address
            )
        await adding
        await ledger.add_items([{"role": "user", "content": "three"}])
        popped = await ledger.pop_item()
        assert ledger._attached is not None
        return ledger._attached.session.id, await ledger.get_items(), popped

    try:
        with RolloutClient(address, reader_process.address, retry=retry, channels=opener) as client:
            session_id, items, popped = asyncio.run(run(client))
    finally:
        writer.stop()
    assert popped == {"role": "user", "content": "three"}
    assert items == [{"role": "user", "content": "one"}, {"role": "user", "content": marker}]
    contents = [
        r["payload"].get("content") for r in file_records(data_dir, session_id) if r["type"] == "message"
    ]
    assert contents == ["one", marker, "three"]
