"""LedgerSaver's appends go over the kept AppendStream of each thread's session
(rollout_client/_kept_stream.py), each durable when ``put`` or ``put_writes`` returns, and exactly
once when the stream loses an answer (the same request is then settled by the unary path)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import Checkpoint
from langgraph.checkpoint.base.id import uuid6

from rollout_client import CHANNEL_OPTIONS, AsyncRolloutClient, Event, InvalidArgumentError, RolloutClient
from rollout_client.langgraph import LedgerSaver
from shared.records import LANGGRAPH_CHECKPOINT_EVENT, LANGGRAPH_WRITES_EVENT
from tests.client.conftest import TEST_RETRY
from tests.client.test_exactly_once import APPEND, file_records
from tests.client.test_kept_stream import APPEND_STREAM, StreamLosingProxy, _CountingStreams, _CountingUnary


def _steps(saver: LedgerSaver, thread_id: str, count: int) -> dict[str, Any]:
    """A thread's first checkpoint then ``count`` steps as LangGraph's loop sends them (the
    node's writes, then the next checkpoint); the last checkpoint's config."""
    messages: list[Any] = [HumanMessage("hello", id=f"{thread_id}-0")]
    version = saver.get_next_version(None, None)
    config: dict[str, Any] = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    for step in range(count + 1):
        if step:
            new = AIMessage(f"answer {step}", id=f"{thread_id}-{step}")
            saver.put_writes(config, [("messages", [new])], f"task-{step}")  # type: ignore[arg-type]
            messages = [*messages, new]
            version = saver.get_next_version(version, None)
        checkpoint = _checkpoint(messages, version)
        config = saver.put(config, checkpoint, {"source": "loop", "step": step}, {"messages": version})  # type: ignore[arg-type]
    return config


def test_steps_go_over_one_kept_stream_per_thread(writer_process, reader_process) -> None:
    """Three steps of each of two threads: one AppendStream per thread's session, no unary Append
    (a read's next-seq probe, a unary Append that writes nothing, comes after)."""
    calls: Counter[str] = Counter()

    def opener(_service: str, address: str) -> grpc.aio.Channel:
        interceptors = [_CountingUnary(calls), _CountingStreams(calls)]
        return grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS, interceptors=interceptors)

    with RolloutClient(
        writer_process.address, reader_process.address, retry=TEST_RETRY, channels=opener
    ) as client:
        saver = LedgerSaver(client)
        for thread_id in ("kept-a", "kept-b"):
            _steps(saver, thread_id, 3)
        sent = calls.copy()
        latest = saver.get_tuple({"configurable": {"thread_id": "kept-b", "checkpoint_ns": ""}})
    assert latest is not None
    assert [message.content for message in latest.checkpoint["channel_values"]["messages"]] == [
        "hello",
        "answer 1",
        "answer 2",
        "answer 3",
    ]
    assert sent[APPEND_STREAM] == 2
    assert sent[APPEND] == 0


RESOLVE = "/rollout.v1.RolloutReader/ResolveSession"


def test_the_state_a_saver_keeps_of_its_own_appends_is_the_state_its_records_give(client) -> None:
    """The saver holds what it appended from the values it serialized, not by decoding the records
    it sent: every checkpoint (all channels: a list as a delta, a whole value, one emptied), its
    metadata, parent and pending writes (special ones too) read the same from it as from a new
    saver that reads the records; and its next step still extends the ledger view."""
    saver = LedgerSaver(client)
    config = _steps(saver, "own", 2)
    saver.put_writes(config, [("count", 3), ("__interrupt__", {"why": "ask"})], "task-x", "path-x")  # type: ignore[arg-type]
    head = saver.get_tuple(config)
    assert head is not None
    messages = head.checkpoint["channel_values"]["messages"]
    version = saver.get_next_version(head.checkpoint["channel_versions"]["messages"], None)
    versions = {"messages": version, "count": version, "scratch": version}
    checkpoint = Checkpoint(
        v=1,
        id=str(uuid6(clock_seq=-1)),
        ts=datetime.now(UTC).isoformat(),
        channel_values={"messages": [*messages, AIMessage("more", id="own-more")], "count": 3},
        channel_versions=versions,
        versions_seen={"agent": {"messages": version}},
        updated_channels=["messages", "count", "scratch"],
    )
    last = saver.put(config, checkpoint, {"source": "loop", "step": 3}, versions)  # type: ignore[arg-type]
    thread: Any = {"configurable": {"thread_id": "own"}}
    kept = list(saver.list(thread))
    read = list(LedgerSaver(client).list(thread))
    assert len(kept) == 4
    assert kept == read
    assert kept[0].config == last
    assert kept[0].checkpoint["channel_values"]["count"] == 3
    assert "scratch" not in kept[0].checkpoint["channel_values"]
    assert {(task, channel) for task, channel, _ in kept[1].pending_writes} >= {
        ("task-x", "count"),
        ("task-x", "__interrupt__"),
    }
    shown = [
        message["content"] for message in client.session(client.resolve_session("own")[0]).replay().messages
    ]
    assert shown == ["hello", "answer 1", "answer 2", "more"]


@pytest.mark.parametrize("read", ["get_tuple", "list"])
def test_a_threads_first_read_probes_its_next_seq_once(client, writer_process, reader_process, read) -> None:
    """A saver that never saw the thread reads it: one ResolveSession and one next-seq probe (a
    unary Append that writes nothing), as every later read; the attach's whole read is that
    read's probe, not one more."""
    _steps(LedgerSaver(client), f"first-{read}", 2)
    calls: Counter[str] = Counter()

    def opener(_service: str, address: str) -> grpc.aio.Channel:
        interceptors = [_CountingUnary(calls), _CountingStreams(calls)]
        return grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS, interceptors=interceptors)

    config: Any = {"configurable": {"thread_id": f"first-{read}", "checkpoint_ns": ""}}
    with RolloutClient(
        writer_process.address, reader_process.address, retry=TEST_RETRY, channels=opener
    ) as counted:
        saver = LedgerSaver(counted)
        found = [saver.get_tuple(config)] if read == "get_tuple" else list(saver.list(config))
        first = calls.copy()
        again = [saver.get_tuple(config)] if read == "get_tuple" else list(saver.list(config))
    assert found[0] is not None
    assert [message.content for message in found[0].checkpoint["channel_values"]["messages"]] == [
        "hello",
        "answer 1",
        "answer 2",
    ]
    assert again == found
    assert first[RESOLVE] == 1
    assert first[APPEND] == 1
    assert calls[RESOLVE] == 1
    assert calls[APPEND] == 2


@pytest.fixture
def losing_proxy(data_dir: Path) -> Iterator[StreamLosingProxy]:
    running = StreamLosingProxy(data_dir)
    yield running
    running.close()


def test_a_put_whose_stream_answer_is_lost_lands_once(losing_proxy, reader_process, data_dir) -> None:
    """The stream's answer to a put_writes and to a put is lost after they landed: each returns
    once the unary path has settled it by its request id, each record is in the file once, and a
    new saver reads the thread whole."""
    # The first checkpoint, then step 1's writes (answer lost), its checkpoint, step 2's writes,
    # its checkpoint (answer lost).
    losing_proxy.stream_plans = ["forward", "lose_answer", "forward", "forward", "lose_answer"]
    with RolloutClient(losing_proxy.address, reader_process.address, retry=TEST_RETRY) as client:
        last = _steps(LedgerSaver(client), "lost", 2)
        settled_unary = losing_proxy.appends_seen  # before the read's next-seq probes
        session_id, found = client.resolve_session("lost")
        assert found
        read = LedgerSaver(client).get_tuple({"configurable": {"thread_id": "lost", "checkpoint_ns": ""}})
    assert read is not None
    assert read.config == last
    assert [message.content for message in read.checkpoint["channel_values"]["messages"]] == [
        "hello",
        "answer 1",
        "answer 2",
    ]
    kinds = [
        record["payload"]["kind"]
        for record in file_records(data_dir, session_id)
        if record["type"] == "event"
    ]
    assert kinds.count(LANGGRAPH_CHECKPOINT_EVENT) == 3
    assert kinds.count(LANGGRAPH_WRITES_EVENT) == 2
    assert losing_proxy.stream_requests == 5
    assert settled_unary == 2  # the two lost answers' requests


def _checkpoint(messages: list[Any], version: str) -> Checkpoint:
    return Checkpoint(
        v=1,
        id=str(uuid6(clock_seq=-1)),
        ts=datetime.now(UTC).isoformat(),
        channel_values={"messages": messages},
        channel_versions={"messages": version},
        versions_seen={},
        updated_channels=["messages"],
    )


async def _concurrent_step(
    writer_process, reader_process, thread_id: str, refuse: str = ""
) -> tuple[list, Any]:
    """A thread's first checkpoint, then two put_writes and a put at once (as LangGraph's loop
    sends a step's writes and its checkpoint in the background): the requests the saver sent
    (each a list of the event kinds in it, and the ledger messages as "message"), and each
    call's outcome. A request holding the writes of task ``refuse`` is refused as the writer
    refuses a bad record (InvalidArgumentError, nothing written)."""
    async with AsyncRolloutClient(writer_process.address, reader_process.address, retry=TEST_RETRY) as client:
        saver = LedgerSaver(client)
        first = [HumanMessage("hello", id=f"{thread_id}-0")]
        version = saver.get_next_version(None, None)
        root: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        config = await saver.aput(root, _checkpoint(first, version), {"step": 0}, {"messages": version})
        session = saver._threads[thread_id].session
        requests: list[list[str]] = []
        sent = session.append

        async def counted(*records: Any, **options: Any) -> Any:
            kinds = [record.kind if isinstance(record, Event) else "message" for record in records]
            requests.append(kinds)
            if any(isinstance(record, Event) and record.body.get("task_id") == refuse for record in records):
                raise InvalidArgumentError("refused", field_violations=())
            return await sent(*records, **options)

        session.append = counted  # type: ignore[method-assign]
        new = AIMessage("answer", id=f"{thread_id}-1")
        next_version = saver.get_next_version(version, None)
        outcomes = await asyncio.gather(
            saver.aput_writes(config, [("messages", [new])], "task-a"),
            saver.aput_writes(config, [("other", 1)], "task-b"),
            saver.aput(
                config, _checkpoint([*first, new], next_version), {"step": 1}, {"messages": next_version}
            ),
            return_exceptions=True,
        )
        thread: Any = {"configurable": {"thread_id": thread_id}}
        kept = [found async for found in saver.alist(thread)]
        read = [found async for found in LedgerSaver(client).alist(thread)]
        assert kept == read
        return requests, outcomes, kept


def test_calls_made_while_a_request_is_in_flight_share_the_next_one(writer_process, reader_process) -> None:
    """put_writes, put_writes, put at once: the thread's sender takes every call waiting when it
    runs, so the three go together in one request; each returns once durable, and the state the
    saver keeps is the state its records give."""
    requests, outcomes, kept = asyncio.run(_concurrent_step(writer_process, reader_process, "shared"))
    assert requests == [
        [LANGGRAPH_WRITES_EVENT, LANGGRAPH_WRITES_EVENT, LANGGRAPH_CHECKPOINT_EVENT, "message"]
    ]
    assert outcomes[:2] == [None, None]
    assert [message.content for message in kept[0].checkpoint["channel_values"]["messages"]] == [
        "hello",
        "answer",
    ]
    assert {task for task, _, _ in kept[1].pending_writes} == {"task-a", "task-b"}


def test_a_shared_request_refused_is_sent_again_call_by_call(writer_process, reader_process) -> None:
    """The request shared by a refused put_writes and a put is refused whole (nothing written):
    each is sent again alone, the put lands and only the put_writes fails."""
    requests, outcomes, kept = asyncio.run(
        _concurrent_step(writer_process, reader_process, "refused", "task-b")
    )
    assert requests == [
        [LANGGRAPH_WRITES_EVENT, LANGGRAPH_WRITES_EVENT, LANGGRAPH_CHECKPOINT_EVENT, "message"],  # refused
        [LANGGRAPH_WRITES_EVENT],
        [LANGGRAPH_WRITES_EVENT],  # refused
        [LANGGRAPH_CHECKPOINT_EVENT, "message"],
    ]
    assert outcomes[0] is None
    assert isinstance(outcomes[1], InvalidArgumentError)
    assert [message.content for message in kept[0].checkpoint["channel_values"]["messages"]] == [
        "hello",
        "answer",
    ]
    assert {task for task, _, _ in kept[1].pending_writes} == {"task-a"}


def test_a_caller_cancelled_while_its_request_is_in_flight_leaves_the_others_theirs() -> None:
    """Calls of one thread share the next request while one is in flight; the caller whose request
    is in flight is cancelled (a deadline, a dropped run): the request goes on, the calls waiting
    behind it are sent and answered, and every call that landed changes the saver's state."""
    from rollout_client._results import AppendResult
    from rollout_client.langgraph import _Thread

    class HeldSession:
        """Answers each append once the test releases it."""

        def __init__(self) -> None:
            self.release = asyncio.Event()
            self.requests: list[int] = []
            self.next = 1

        async def append(self, *records: object) -> AppendResult:
            self.requests.append(len(records))
            await self.release.wait()
            first, self.next = self.next, self.next + len(records)
            return AppendResult(tuple(range(first, self.next)), self.next)

    async def scenario() -> tuple[list[str], list[int], int, str]:
        session = HeldSession()
        thread = _Thread(session, next_seq=1)  # type: ignore[arg-type]
        taken: list[str] = []
        first = asyncio.ensure_future(thread.append(lambda: taken.append("first"), "a"))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        second = asyncio.ensure_future(thread.append(lambda: taken.append("second"), "b"))
        await asyncio.sleep(0)
        first.cancel()
        await asyncio.sleep(0)
        session.release.set()
        await second
        outcome = "cancelled" if first.cancelled() else "finished"
        return taken, session.requests, thread.next_seq, outcome

    taken, requests, next_seq, outcome = asyncio.run(scenario())
    assert outcome == "cancelled"
    assert taken == ["first", "second"]
    assert requests == [1, 1]
    assert next_seq == 3
