"""Heavy reads within a memory budget; unary reads that cannot fit refused before any read (docs/spec.md §5)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import grpc.aio
import pytest
from google.rpc import error_details_pb2, status_pb2

import reader_service.replies
from reader_service.admission import ReadBudget
from reader_service.replay_cache import ReplayCache
from reader_service.server import ReaderConfig, start_reader
from rollout.v1 import reader_pb2, reader_pb2_grpc
from shared import rebuild_index
from shared.naming import build_file_name
from shared.rebuild import Rebuilder
from shared.records import encode_line, parse_timestamp
from tests.conftest import start_service
from tests.data_roots import session_path

TS = "2026-11-30T10:00:00.000000Z"
SID = "01a22c15-89a6-7d3d-b5b7-165622bd350c"


def write_session(data_dir: Path, texts: list[str]) -> Path:
    data = encode_line(0, TS, "session_meta", {"session_id": SID, "tenant": "t", "created_at": TS})
    for seq, text in enumerate(texts, start=1):
        role = "system" if seq == 1 else "user"
        data += encode_line(seq, TS, "message", {"role": role, "content": text})
    path = session_path(data_dir, SID, build_file_name(parse_timestamp(TS), SID))
    path.write_bytes(data)
    return path


def run(coroutine_function, config: ReaderConfig):
    """Start an in-process reader on ``config``, give ``coroutine_function`` a stub, stop the reader."""

    async def main():
        running = await start_reader(config)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
                return await coroutine_function(reader_pb2_grpc.RolloutReaderStub(channel), running)
        finally:
            await running.stop(0)

    return asyncio.run(main())


def test_a_unary_read_of_a_file_over_the_reply_limit_is_refused_before_it_is_read(tmp_path, monkeypatch):
    """GetReplay and GetMemoryView of a session file larger than the reply limit answer
    RESOURCE_EXHAUSTED naming the streaming RPC, and nothing reads the file (every read path raises)."""
    write_session(tmp_path, ["s", "x" * 3000])

    def forbidden(*_args, **_kwargs):
        raise AssertionError("the file must not be read")

    monkeypatch.setattr(ReplayCache, "rendered", forbidden)
    monkeypatch.setattr(Rebuilder, "run", forbidden)
    monkeypatch.setattr(rebuild_index, "index_rebuild", forbidden)
    monkeypatch.setattr(reader_service.replies, "stream_replay", forbidden)
    monkeypatch.setattr(reader_service.replies, "stream_memory_view", forbidden)

    async def calls(stub, _running):
        answers = []
        for call, request in (
            (stub.GetReplay, reader_pb2.ReplayRequest(session_id=SID)),
            (stub.GetMemoryView, reader_pb2.MemoryViewRequest(session_id=SID)),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await call(request)
            reasons = []
            for key, value in caught.value.trailing_metadata() or ():
                if key == "grpc-status-details-bin":
                    for detail in status_pb2.Status.FromString(value).details:
                        info = error_details_pb2.ErrorInfo()
                        if detail.Unpack(info):
                            reasons.append(info.reason)
            answers.append((caught.value.code(), caught.value.details(), reasons))
        return answers

    (replay, view) = run(calls, ReaderConfig(data_dir=tmp_path, max_reply_bytes=2048))
    # The reason tells clients not to retry: the same request meets the limit every time.
    assert replay[2] == view[2] == ["REPLY_TOO_LARGE"]
    assert replay[0] == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "over the 2048-byte unary reply limit" in replay[1]
    assert "use StreamReplay" in replay[1]
    assert view[0] == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "use StreamMemoryView" in view[1]


def test_streams_and_capped_replays_serve_what_a_unary_call_cannot(tmp_path):
    """Over the reply limit, StreamReplay and StreamMemoryView return every message; GetReplay with a
    message cap that fits answers, and one whose messages outgrow the limit is refused."""
    texts = ["rules", *(f"{n} " + "y" * 900 for n in range(6))]
    write_session(tmp_path, texts)
    service = start_service("reader", tmp_path, "--max-reply-bytes", "4096")
    try:
        with grpc.insecure_channel(service.address) as channel:
            stub = reader_pb2_grpc.RolloutReaderStub(channel)
            streamed = [
                m.text
                for c in stub.StreamReplay(reader_pb2.ReplayRequest(session_id=SID))
                for m in c.messages
            ]
            assert streamed == texts
            chunks = list(stub.StreamMemoryView(reader_pb2.MemoryViewRequest(session_id=SID)))
            assert [m.text for c in chunks for m in c.messages] == texts[1:]
            assert chunks[-1].summary.dropped_system_messages == 1
            assert chunks[-1].summary.message_count == len(texts) - 1
            capped = stub.GetReplay(reader_pb2.ReplayRequest(session_id=SID, max_messages=2))
            assert [m.text for m in capped.messages] == texts[:2]
            with pytest.raises(grpc.RpcError) as caught:
                stub.GetReplay(reader_pb2.ReplayRequest(session_id=SID, max_messages=6))
            assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "use StreamReplay" in caught.value.details()
    finally:
        service.stop()


def test_get_memory_view_and_its_stream_give_the_same_view(tmp_path):
    """StreamMemoryView's chunks hold the messages and counters GetMemoryView answers."""
    texts = ["rules", *(f"{n} " + "z" * 600_000 for n in range(4))]
    write_session(tmp_path, texts)

    async def both(stub, _running):
        request = reader_pb2.MemoryViewRequest(session_id=SID, max_tool_output_chars=10)
        unary = await stub.GetMemoryView(request)
        chunks = [chunk async for chunk in stub.StreamMemoryView(request)]
        return unary, chunks

    unary, chunks = run(both, ReaderConfig(data_dir=tmp_path))
    assert len(chunks) > 1, "the stream is cut into chunks of about 1 MiB"
    assert [m for c in chunks for m in c.messages] == list(unary.messages)
    assert [c.first_index for c in chunks] == [
        0,
        *[sum(len(c.messages) for c in chunks[:n]) for n in range(1, len(chunks))],
    ]
    summary = chunks[-1].summary
    assert (summary.dropped_system_messages, summary.message_count) == (unary.dropped_system_messages, 4)


def test_heavy_reads_wait_for_the_budget_and_cheap_reads_never_do(tmp_path):
    """With the whole read budget taken, GetReplay waits (here until its deadline), while GetStopFacts
    and ListSessions answer at once; once the budget is back, GetReplay answers."""
    write_session(tmp_path, ["rules", "hello"])

    async def calls(stub, running):
        budget = running.servicer.budget
        charge = await budget.acquire(budget.budget_bytes)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.GetReplay(reader_pb2.ReplayRequest(session_id=SID), timeout=0.5)
        facts = await stub.GetStopFacts(reader_pb2.StopFactsRequest(session_id=SID), timeout=5)
        page = await stub.ListSessions(reader_pb2.ListSessionsRequest(), timeout=5)
        waiting = budget.waiting
        budget.release(charge)
        replay = await stub.GetReplay(reader_pb2.ReplayRequest(session_id=SID), timeout=5)
        for _ in range(500):  # the charge comes back when the server has finished the call
            if budget.free_bytes == budget.budget_bytes:
                break
            await asyncio.sleep(0.01)
        return caught.value.code(), facts, page, waiting, replay, budget.free_bytes

    code, facts, page, waiting, replay, free = run(calls, ReaderConfig(data_dir=tmp_path))
    assert code == grpc.StatusCode.DEADLINE_EXCEEDED
    assert facts.session_id == SID
    assert not facts.found
    assert [s.session_id for s in page.sessions] == [SID]
    assert waiting == 0, "a call that gave up waiting leaves the line"
    assert [m.text for m in replay.messages] == ["rules", "hello"]
    assert free == 512 * 1024 * 1024, "every charge comes back once its call is done"


async def _settle() -> None:
    """Let every task woken so far run on (a hundred turns of the loop, whatever the clock says:
    a timed sleep may end first on a loaded machine)."""
    for _ in range(100):
        await asyncio.sleep(0)


def test_the_budget_admits_in_arrival_order_and_a_call_over_it_alone():
    """Calls are admitted first come, first served (a small one never passes a big one waiting), a
    call costing more than the whole budget runs alone, and a cancelled wait gives nothing away."""

    async def scenario():
        budget = ReadBudget(100)
        order: list[str] = []

        async def call(name: str, cost: int, hold: asyncio.Event) -> None:
            charge = await budget.acquire(cost)
            order.append(name)
            await hold.wait()
            budget.release(charge)

        first_done, big_done, small_done, giant_done = (asyncio.Event() for _ in range(4))
        first = asyncio.create_task(call("first", 60, first_done))
        await asyncio.sleep(0)
        big = asyncio.create_task(call("big", 60, big_done))
        small = asyncio.create_task(call("small", 10, small_done))
        await asyncio.sleep(0)
        assert order == ["first"], "the small call waits behind the big one"
        gone = asyncio.create_task(budget.acquire(30))
        await asyncio.sleep(0)
        gone.cancel()
        first_done.set()
        await _settle()
        assert order == ["first", "big", "small"]
        giant = asyncio.create_task(call("giant", 1000, giant_done))
        await _settle()
        assert order == ["first", "big", "small"], "the giant waits until nothing holds the budget"
        big_done.set()
        small_done.set()
        await _settle()
        assert order[-1] == "giant"
        assert budget.free_bytes == 0
        giant_done.set()
        await asyncio.gather(first, big, small, giant, return_exceptions=True)
        return budget.free_bytes

    assert asyncio.run(scenario()) == 100
