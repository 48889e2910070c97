"""LedgerSaver under a real LangGraph graph (issue 25): a StateGraph with ``add_messages`` and a
tool node runs three turns; a second process with a new saver resumes the thread and sees the
same state (and the first saver sees that process's turn); the history lists every checkpoint;
time travel and a copied thread work; the messages are ledger messages too (replay shows the
thread); and each step stores only what changed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import orjson
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver

from rollout_client.langgraph import LedgerSaver
from shared.records import LANGGRAPH_CHECKPOINT_EVENT
from tests.client.langgraph_chat import build, described, turn
from tests.conftest import run_rollout
from tests.processes import launch, reap

REPO = Path(__file__).resolve().parents[2]


def _checkpoint_bodies(client, thread_id: str) -> list[dict]:
    """The bodies of the thread's checkpoint records, read from its session (not through the saver)."""
    session_id, found = client.resolve_session(thread_id)
    assert found
    session = client.session(session_id)
    end = session.core.client  # the writer's next seq bounds the watch
    target = client.run(end.next_seq(session_id))
    bodies = []
    for record in session.watch():
        line = orjson.loads(record.line)
        if line["type"] == "event" and line["payload"]["kind"] == LANGGRAPH_CHECKPOINT_EVENT:
            bodies.append(line["payload"]["body"])
        if record.seq >= target - 1:
            break
    return bodies


def _second_process(writer_process, reader_process, thread_id: str, text: str = "") -> list:
    worker = launch(
        [
            sys.executable,
            "-m",
            "tests.client.langgraph_chat",
            writer_process.address,
            reader_process.address,
            thread_id,
            text,
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        out, _ = worker.communicate(timeout=240)
        assert worker.returncode == 0
        return json.loads(out)
    finally:
        reap(worker)


def test_three_turns_resume_in_another_process_history_time_travel_and_fork(
    client, writer_process, reader_process
) -> None:
    saver = LedgerSaver(client)
    graph = build(saver)
    config = {"configurable": {"thread_id": "chat-1"}}
    for text in ("1+2", "3+4", "5+6"):
        messages = turn(graph, "chat-1", text)
    assert [message.content for message in messages[3::4]] == [
        "the sum is 3",
        "the sum is 7",
        "the sum is 11",
    ]
    assert len(messages) == 12

    # A new process, a new client and saver: the same state; then it takes a fourth turn.
    assert _second_process(writer_process, reader_process, "chat-1") == json.loads(
        json.dumps(described(messages))
    )
    assert _second_process(writer_process, reader_process, "chat-1", "7+8")[-1][1] == "the sum is 15"
    state = graph.get_state(config)  # this saver reads the other process's records
    assert len(state.values["messages"]) == 16
    assert state.values["messages"][-1].content == "the sum is 15"

    # The history lists every checkpoint the session holds, newest first.
    history = list(graph.get_state_history(config))
    bodies = _checkpoint_bodies(client, "chat-1")
    assert [snapshot.config["configurable"]["checkpoint_id"] for snapshot in history] == [
        body["id"] for body in reversed(bodies)
    ]
    in_memory = build(InMemorySaver())  # LangGraph's own saver, the same four turns
    for text in ("1+2", "3+4", "5+6", "7+8"):
        turn(in_memory, "chat-1", text)
    assert len(history) == len(list(in_memory.get_state_history(config)))
    per_turn = len(history) // 4

    # Only what changed: after the first, each messages version is a delta of its new messages.
    message_blobs = [blob for body in bodies for blob in body["blobs"] if blob["channel"] == "messages"]
    assert "base" not in message_blobs[0]
    assert all("base" in blob and len(blob["items"]) == 1 for blob in message_blobs[1:])

    # Time travel: back to the end of the first turn, and on from there.
    first_turn_end = next(
        snapshot for snapshot in history if len(snapshot.values["messages"]) == 4 and not snapshot.next
    )
    assert first_turn_end.values["messages"][-1].content == "the sum is 3"
    branched = graph.invoke({"messages": [HumanMessage("10+20")]}, first_turn_end.config)["messages"]
    assert [message.content for message in branched[3::4]] == ["the sum is 3", "the sum is 30"]
    assert graph.get_state(config).values["messages"] == branched

    # The ledger's own replay shows the thread as it now stands (a compaction replaced the view).
    session_id, _ = client.resolve_session("chat-1")
    shown = client.session(session_id).replay().messages
    assert [(message["role"], message.get("content")) for message in shown] == [
        ({"human": "user", "ai": "assistant"}.get(message.type, message.type), message.content)
        for message in branched
    ]
    assert shown[1]["tool_calls"][0]["function"]["name"] == "add"
    printed = run_rollout("replay", session_id, "--reader", reader_process.address)
    assert printed.returncode == 0, printed.stderr
    assert "  the sum is 30" in printed.stdout.splitlines()
    assert '  call call_1: add({"a":1,"b":2})' in printed.stdout.splitlines()

    # A copy of the thread (a Fork) goes on apart from its source.
    saver.copy_thread("chat-1", "chat-1-copy")
    copy_config = {"configurable": {"thread_id": "chat-1-copy"}}
    assert graph.get_state(copy_config).values["messages"] == branched
    copied = turn(graph, "chat-1-copy", "2+2")
    assert copied[-1].content == "the sum is 4"
    assert graph.get_state(config).values["messages"] == branched
    assert (
        len(list(graph.get_state_history(copy_config)))
        == len(list(graph.get_state_history(config))) + per_turn
    )


def test_sync_methods_over_the_async_client_run_on_its_loop(writer_process, reader_process) -> None:
    """Over an AsyncRolloutClient, the sync methods run on the loop the saver lives on (from
    another thread) and refuse to block that loop itself."""
    import asyncio
    import threading

    from rollout_client import AsyncRolloutClient
    from tests.client.conftest import TEST_RETRY

    loop = asyncio.new_event_loop()
    runner = threading.Thread(target=loop.run_forever, daemon=True)
    runner.start()
    try:

        async def make() -> tuple[AsyncRolloutClient, LedgerSaver]:
            client = AsyncRolloutClient(writer_process.address, reader_process.address, retry=TEST_RETRY)
            return client, LedgerSaver(client)

        client, saver = asyncio.run_coroutine_threadsafe(make(), loop).result()
        graph = build(saver)
        assert turn(graph, "sync-over-async", "2+3")[-1].content == "the sum is 5"

        async def on_its_loop() -> str:
            try:
                saver.get_tuple({"configurable": {"thread_id": "sync-over-async"}})
            except RuntimeError as refused:
                return str(refused)
            return "not refused"

        assert "call the a* method" in asyncio.run_coroutine_threadsafe(on_its_loop(), loop).result()
        asyncio.run_coroutine_threadsafe(client.close(), loop).result()
    finally:
        loop.call_soon_threadsafe(loop.stop)
        runner.join()
        loop.close()


def test_two_savers_racing_on_a_new_thread_share_its_session(writer_process, reader_process) -> None:
    """Two savers (two clients) put the first checkpoints of one new thread at once: one session
    holds both, as a third saver sees."""
    import threading

    from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_config

    from rollout_client import RolloutClient
    from tests.client.conftest import TEST_RETRY

    clients = [
        RolloutClient(writer_process.address, reader_process.address, retry=TEST_RETRY) for _ in range(3)
    ]
    try:
        savers = [LedgerSaver(client) for client in clients]
        start = threading.Barrier(2)
        stored: list = []

        def put(saver: LedgerSaver) -> None:
            start.wait()
            stored.append(
                saver.put(
                    generate_config("raced"), generate_checkpoint(), {"source": "input", "step": -1}, {}
                )
            )

        racers = [threading.Thread(target=put, args=(saver,)) for saver in savers[:2]]
        for racer in racers:
            racer.start()
        for racer in racers:
            racer.join()
        assert len(stored) == 2
        listed = [
            found.config["configurable"]["checkpoint_id"]
            for found in savers[2].list(generate_config("raced"))
        ]
        assert sorted(listed) == sorted(config["configurable"]["checkpoint_id"] for config in stored)
        assert clients[2].resolve_session("raced")[1]
    finally:
        for client in clients:
            client.close()


def test_the_view_leaves_out_what_the_ledger_would_refuse() -> None:
    """A tool output answering no call the view holds, and an item that is no message, stay out
    of the ledger view; content JSON cannot hold is shown as its text."""
    from langchain_core.messages import AIMessage, ToolMessage

    from rollout_client.langgraph import ledger_message

    known: set[str] = set()
    assert ledger_message(ToolMessage("3", tool_call_id="call_9"), known) is None
    assert ledger_message({"role": "user", "content": "a dict"}, known) is None
    call = ledger_message(
        AIMessage("", tool_calls=[{"id": "call_9", "name": "add", "args": {"a": 1}}]), known
    )
    assert call == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "call_9", "type": "function", "function": {"name": "add", "arguments": '{"a":1}'}}
        ],
    }
    assert ledger_message(ToolMessage("3", tool_call_id="call_9", status="error"), known) == {
        "role": "tool",
        "content": "3",
        "tool_call_id": "call_9",
        "is_error": True,
    }
    odd = ledger_message(HumanMessage([{"type": "number", "value": float("nan")}]), known)
    assert odd == {"role": "user", "content": "[{'type': 'number', 'value': nan}]"}


def test_delete_thread_deletes_its_session_for_every_saver(client, writer_process, reader_process) -> None:
    """delete_thread deletes the thread's session: this saver and another that had read it find
    nothing, the session is gone from the ledger, its copy stays; writing the thread again starts
    it over in a new session (never the deleted id), from this saver and from the other one."""
    from rollout_client import RolloutClient
    from tests.client.conftest import TEST_RETRY

    saver = LedgerSaver(client)
    graph = build(saver)
    turn(graph, "doomed", "1+1")
    saver.copy_thread("doomed", "doomed-copy")
    session_id, _ = client.resolve_session("doomed")
    with RolloutClient(writer_process.address, reader_process.address, retry=TEST_RETRY) as other_client:
        other = LedgerSaver(other_client)
        assert other.get_tuple({"configurable": {"thread_id": "doomed"}}) is not None
        saver.delete_thread("doomed")
        assert other.get_tuple({"configurable": {"thread_id": "doomed"}}) is None
        assert list(other.list({"configurable": {"thread_id": "doomed"}})) == []
        assert saver.get_tuple({"configurable": {"thread_id": "doomed"}}) is None
        fresh_id, found = client.resolve_session("doomed")
        assert not found
        assert fresh_id != session_id
        assert graph.get_state({"configurable": {"thread_id": "doomed-copy"}}).values["messages"][
            -1
        ].content == ("the sum is 2")
        messages = turn(graph, "doomed", "2+2")  # starts over, as LangGraph's own savers do
        assert [message.content for message in messages][::3] == ["2+2", "the sum is 4"]
        assert client.resolve_session("doomed") == (fresh_id, True)
        # The other saver has the second session attached; deleted by this saver, a put of the
        # other one (no read first) goes to the thread's third session.
        assert other.get_tuple({"configurable": {"thread_id": "doomed"}}) is not None
        saver.delete_thread("doomed")
        written = other.put(
            {"configurable": {"thread_id": "doomed", "checkpoint_ns": ""}}, empty_checkpoint(), {}, {}
        )
        third_id, found = client.resolve_session("doomed")
        assert found
        assert third_id not in (session_id, fresh_id)
        assert other.get_tuple(written) is not None
    saver.delete_thread("never-written")  # nothing to delete: no error


def test_a_subgraph_keeps_its_checkpoints_in_its_namespace(client) -> None:
    """A graph whose node is a subgraph: its checkpoints land in the subgraph's namespace, listed
    with the root's when the config names no namespace and apart when it does, the same
    checkpoints as LangGraph's own saver keeps."""
    from langgraph.graph import END, START, StateGraph

    from tests.client.langgraph_chat import ChatState

    def nested(checkpointer):
        outer = StateGraph(ChatState)
        outer.add_node("inner", build(None))
        outer.add_edge(START, "inner")
        outer.add_edge("inner", END)
        return outer.compile(checkpointer=checkpointer)

    saver, reference = LedgerSaver(client), InMemorySaver()
    config = {"configurable": {"thread_id": "nested"}}
    for checkpointer in (saver, reference):
        assert nested(checkpointer).invoke({"messages": [HumanMessage("4+5")]}, config)["messages"][
            -1
        ].content == ("the sum is 9")

    def shape(checkpointer, configurable) -> list[tuple[str, str]]:
        listed = checkpointer.list({"configurable": configurable})
        return [
            (found.config["configurable"]["checkpoint_ns"].split(":")[0], found.metadata["source"])
            for found in listed
        ]

    # All namespaces: the same checkpoints, newest first across them (as PostgresSaver orders;
    # InMemorySaver lists namespace by namespace).
    assert sorted(shape(saver, {"thread_id": "nested"})) == sorted(shape(reference, {"thread_id": "nested"}))
    ids = [found.config["configurable"]["checkpoint_id"] for found in saver.list(config)]
    assert ids == sorted(ids, reverse=True)
    assert {ns for ns, _ in shape(saver, {"thread_id": "nested"})} == {"", "inner"}
    assert shape(saver, {"thread_id": "nested", "checkpoint_ns": ""}) == shape(
        reference, {"thread_id": "nested", "checkpoint_ns": ""}
    )
    assert {ns for ns, _ in shape(saver, {"thread_id": "nested", "checkpoint_ns": ""})} == {""}


def test_delete_for_runs_reaches_threads_another_saver_wrote(client, writer_process, reader_process) -> None:
    """delete_for_runs of a saver that never read the thread: the ledger's listing finds it."""
    from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_config

    from rollout_client import RolloutClient
    from tests.client.conftest import TEST_RETRY

    writer = LedgerSaver(client)
    first = writer.put(
        generate_config("runs"), generate_checkpoint(), {"source": "loop", "step": 0, "run_id": "r1"}, {}
    )
    config = generate_config("runs")
    config["configurable"]["checkpoint_id"] = first["configurable"]["checkpoint_id"]
    writer.put(config, generate_checkpoint(), {"source": "loop", "step": 1, "run_id": "r2"}, {})
    with RolloutClient(writer_process.address, reader_process.address, retry=TEST_RETRY) as other_client:
        LedgerSaver(other_client).delete_for_runs(["r1"])
    assert [found.metadata["run_id"] for found in writer.list(generate_config("runs"))] == ["r2"]


def test_an_async_saver_starts_a_deleted_thread_over(writer_process, reader_process) -> None:
    """The async methods over an AsyncRolloutClient: after adelete_thread the thread reads as
    empty, and the next turn starts it over in a new session."""
    import asyncio

    from rollout_client import AsyncRolloutClient
    from tests.client.conftest import TEST_RETRY

    async def run() -> None:
        async with AsyncRolloutClient(
            writer_process.address, reader_process.address, retry=TEST_RETRY
        ) as client:
            saver = LedgerSaver(client)
            graph = build(saver)
            config = {"configurable": {"thread_id": "async-doomed"}}
            await graph.ainvoke({"messages": [HumanMessage("1+1")]}, config)
            first, found = await client.resolve_session("async-doomed")
            assert found
            await saver.adelete_thread("async-doomed")
            assert await saver.aget_tuple(config) is None
            after = await graph.ainvoke({"messages": [HumanMessage("2+2")]}, config)
            assert [message.content for message in after["messages"]][::3] == ["2+2", "the sum is 4"]
            second, found = await client.resolve_session("async-doomed")
            assert found
            assert second != first

    asyncio.run(run())


def test_a_list_is_a_delta_only_of_the_same_items(client) -> None:
    """A messages list that keeps the stored items (the same objects) is stored as its new items;
    one whose earlier item was replaced by another object (add_messages replacing by id) is
    stored whole, and each reads back as it was put."""
    from langchain_core.messages import AIMessage
    from langgraph.checkpoint.base import empty_checkpoint

    saver = LedgerSaver(client)
    config = {"configurable": {"thread_id": "replaced", "checkpoint_ns": ""}}
    first = [HumanMessage("2+2", id="m1"), AIMessage("5", id="m2")]
    lists = [first, [*first, HumanMessage("sure?", id="m3")]]
    lists.append([lists[1][0], AIMessage("4", id="m2"), lists[1][2]])  # m2 replaced, same id
    lists.append([*lists[2], AIMessage("yes", id="m4")])
    version = None
    for messages in lists:
        version = saver.get_next_version(version, None)
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"messages": messages}
        checkpoint["channel_versions"] = {"messages": version}
        config = saver.put(config, checkpoint, {"source": "loop", "step": 0}, {"messages": version})
        stored = saver.get_tuple(config)
        assert stored is not None
        assert stored.checkpoint["channel_values"]["messages"] == messages
    blobs = [body["blobs"][0] for body in _checkpoint_bodies(client, "replaced")]
    assert ["base" in blob for blob in blobs] == [False, True, False, True]
    fresh = LedgerSaver(client).get_tuple(config)  # rebuilt from the records alone
    assert fresh is not None
    assert fresh.checkpoint["channel_values"]["messages"] == lists[-1]
