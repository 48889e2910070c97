"""LedgerSession: the OpenAI Agents SDK Session protocol over the ledger, side by side with the
SDK's own SQLiteSession (a real agents.Runner, a scripted agents.Model, no network)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import json
import subprocess
import sys
import threading
from typing import Any

import grpc
import pytest
from agents import (
    Agent,
    Model,
    ModelResponse,
    Runner,
    SQLiteSession,
    Usage,
    function_tool,
    set_tracing_disabled,
)
from agents.memory import SessionSettings
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseReasoningItem,
)
from openai.types.responses.response_reasoning_item import Summary

from rollout_client import CHANNEL_OPTIONS, AsyncRolloutClient, InvalidArgumentError, RolloutClient
from rollout_client.agents import ITEM_PART, LedgerSession, item_to_message, messages_to_items
from tests.client.conftest import TEST_RETRY
from tests.conftest import REPO
from tests.data_roots import session_files

set_tracing_disabled(True)


def _message(text: str, item_id: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id=item_id,
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


def _script() -> list[list[Any]]:
    """Turn 1: reasoning + a tool call, then an answer; turn 2: an answer."""
    return [
        [
            ResponseReasoningItem(
                id="rs_1", type="reasoning", summary=[Summary(type="summary_text", text="look it up")]
            ),
            ResponseFunctionToolCall(
                type="function_call",
                call_id="call_1",
                name="lookup",
                arguments='{"city":"Oslo"}',
                id="fc_1",
                status="completed",
            ),
        ],
        [_message("It is 4 degrees in Oslo.", "msg_1")],
        [_message("You asked about Oslo.", "msg_2")],
    ]


class ScriptedModel(Model):
    """Answers each call with the next scripted output and keeps a copy of every input it got."""

    def __init__(self) -> None:
        self.outputs = _script()
        self.inputs: list[Any] = []

    async def get_response(
        self, system_instructions, input, model_settings, tools, output_schema, handoffs, tracing, **_
    ):
        self.inputs.append(copy.deepcopy(input))
        return ModelResponse(output=self.outputs.pop(0), usage=Usage(), response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError("the tests run Runner.run, not streaming")


@function_tool
def lookup(city: str) -> str:
    """The weather of a city."""
    return f"4 degrees in {city}"


async def _two_turns(session) -> ScriptedModel:
    model = ScriptedModel()
    agent = Agent(name="weather", instructions="Answer briefly.", model=model, tools=[lookup])
    await Runner.run(agent, "What is the weather in Oslo?", session=session)
    await Runner.run(agent, "What did I ask?", session=session)
    return model


async def _side_by_side(ledger: LedgerSession, sqlite: SQLiteSession) -> None:
    ledger_model = await _two_turns(ledger)
    sqlite_model = await _two_turns(sqlite)
    assert ledger_model.inputs == sqlite_model.inputs
    second_turn = ledger_model.inputs[2]
    assert {"content": "What is the weather in Oslo?", "role": "user"} in second_turn
    assert any(item.get("type") == "function_call_output" for item in second_turn)
    assert second_turn[-1] == {"content": "What did I ask?", "role": "user"}

    everything = await sqlite.get_items()
    assert len(everything) == 7
    assert await ledger.get_items() == everything
    for limit in (0, 1, 3, 7, 50, -1):
        assert await ledger.get_items(limit) == await sqlite.get_items(limit), limit
    assert await ledger.pop_item() == await sqlite.pop_item()
    assert await ledger.get_items() == await sqlite.get_items()
    popped = [await ledger.pop_item() for _ in range(2)]
    assert popped == [await sqlite.pop_item() for _ in range(2)]
    assert await ledger.get_items(2) == await sqlite.get_items(2)
    await ledger.clear_session()
    await sqlite.clear_session()
    assert await ledger.get_items() == await sqlite.get_items() == []
    assert await ledger.pop_item() is await sqlite.pop_item() is None
    again = [{"role": "user", "content": "start over"}]
    await ledger.add_items(copy.deepcopy(again))
    await sqlite.add_items(copy.deepcopy(again))
    assert await ledger.get_items() == await sqlite.get_items() == again


def test_runner_turns_and_every_call_match_sqlite_session_with_a_blocking_client(client, tmp_path) -> None:
    """Two Runner turns, get_items/limit/pop_item/clear_session answer as SQLiteSession's (blocking client)."""
    session = client.create_session()
    ledger = LedgerSession(session.id, client=client)
    asyncio.run(_side_by_side(ledger, SQLiteSession("side-by-side", tmp_path / "agents.db")))


def test_runner_turns_and_every_call_match_sqlite_session_with_an_async_client(
    writer_process, reader_process, tmp_path
) -> None:
    """The same side-by-side run through an AsyncRolloutClient on the runner's own loop."""

    async def run() -> None:
        async with AsyncRolloutClient(
            writer_process.address, reader_process.address, retry=TEST_RETRY
        ) as aclient:
            session = await aclient.create_session()
            await _side_by_side(
                LedgerSession(session.id, client=aclient), SQLiteSession("s", tmp_path / "a.db")
            )

    asyncio.run(run())


def test_a_blocking_client_never_blocks_the_event_loop(client) -> None:
    """While a LedgerSession call over a blocking client waits, other tasks of the loop keep running."""
    session = client.create_session()
    ledger = LedgerSession(session.id, client=client)
    original = session.core.client.call
    ticked = threading.Event()

    async def slow_call(*args, **kwargs):
        # Answers once the caller's loop has run another task ten times; were that loop blocked
        # by this call, it would answer after 60 s with the ticks still short.
        await asyncio.to_thread(ticked.wait, 60)
        return await original(*args, **kwargs)

    session.core.client.call = slow_call  # the replay behind get_items

    async def run() -> int:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1
                if ticks == 10:
                    ticked.set()

        task = asyncio.create_task(ticker())
        await ledger.get_items()
        task.cancel()
        return ticks

    assert asyncio.run(run()) >= 10


def test_pop_and_clear_are_appended_records_that_replay_reflects(client) -> None:
    """pop_item appends one retraction (nothing rewritten, whatever the history's length) and
    clear_session one empty compaction: the file keeps every record, replay shows the new view."""
    session = client.create_session()
    ledger = LedgerSession(session.id, client=client)
    items = [
        {"role": "user", "content": "one"},
        {"type": "message", "role": "assistant", "id": "msg_9", "status": "completed", "content": []},
        {"role": "user", "content": "two"},
    ]

    async def run() -> None:
        await ledger.add_items(copy.deepcopy(items))
        assert await ledger.pop_item() == items[-1]

    before = session.verify().records
    asyncio.run(run())
    replay = session.replay()
    assert messages_to_items(replay.messages) == items[:2]
    assert [entry.kind for entry in replay.degraded].count("retracted") == 1
    assert session.verify().records == before + len(items) + 1
    asyncio.run(ledger.clear_session())
    assert session.replay().messages == []
    assert session.verify().records == before + len(items) + 2  # append-only: nothing removed


def test_a_pop_costs_one_small_record_whatever_the_history(client, data_dir) -> None:
    """The bytes a pop appends do not grow with the history (a retraction names the message)."""
    session = client.create_session()
    ledger = LedgerSession(session.id, client=client)
    (path,) = session_files(data_dir)

    async def run(count: int) -> int:
        await ledger.add_items([{"role": "user", "content": "x" * 1000} for _ in range(count)])
        size = path.stat().st_size
        await ledger.pop_item()
        return path.stat().st_size - size

    small = asyncio.run(run(2))
    large = asyncio.run(run(300))
    assert small < 400
    assert abs(large - small) < 16  # only the seq's digits differ


def test_a_new_adapter_in_another_process_sees_the_same_history(
    client, writer_process, reader_process
) -> None:
    """A LedgerSession opened on the same id by another process reads the same items."""
    session = client.create_session()
    items = [
        {"role": "user", "content": "hello"},
        {
            "type": "function_call",
            "call_id": "c1",
            "name": "f",
            "arguments": "{}",
            "id": "fc_1",
            "status": "completed",
        },
        {"type": "function_call_output", "call_id": "c1", "output": "done"},
    ]
    asyncio.run(LedgerSession(session.id, client=client).add_items(copy.deepcopy(items)))
    program = (
        "import asyncio, json, sys\n"
        "from rollout_client import RolloutClient\n"
        "from rollout_client.agents import LedgerSession\n"
        "with RolloutClient(sys.argv[1], sys.argv[2]) as client:\n"
        "    print(json.dumps(asyncio.run(LedgerSession(sys.argv[3], client=client).get_items())))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", program, writer_process.address, reader_process.address, session.id],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == items


def test_session_settings_limit_is_the_default_limit(client) -> None:
    """get_items() without a limit uses session_settings.limit, as SQLiteSession does."""
    session = client.create_session()
    ledger = LedgerSession(session.id, client=client, session_settings=SessionSettings(limit=1))
    items = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    asyncio.run(ledger.add_items(items))
    assert asyncio.run(ledger.get_items()) == [items[1]]
    assert asyncio.run(ledger.get_items(2)) == items


@pytest.mark.parametrize(
    ("item", "native"),
    [
        ({"role": "user", "content": "hi"}, {"role": "user", "content": "hi"}),
        ({"content": "hi", "role": "user"}, None),  # another key order: kept by carrying it
        ({"role": "developer", "content": [{"type": "input_text", "text": "x"}]}, None),
        (
            {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
            {
                "role": "assistant",
                "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
            },
        ),
        (
            {"type": "function_call_output", "call_id": "c", "output": "ok"},
            {"role": "tool", "tool_call_id": "c", "content": "ok"},
        ),
        ({"type": "message", "role": "user", "content": "hi"}, None),
        (
            {
                "type": "function_call",
                "call_id": "c",
                "name": "f",
                "arguments": "{}",
                "id": "fc",
                "status": "completed",
            },
            None,
        ),
        ({"type": "custom_tool_call", "call_id": "c", "name": "patch", "input": "*** diff"}, None),
        ({"type": "reasoning", "id": "rs", "summary": [], "encrypted_content": "opaque"}, None),
        ({"type": "web_search_call", "id": "ws", "status": "completed"}, None),
        ({"type": "message", "content": [{"n": 3.0, "big": 2**70, "nan": float("inf")}]}, None),
        (
            {
                "role": "user",
                "content": [{"type": ITEM_PART, "item": {"role": "user", "content": "looks carried"}}],
            },
            None,
        ),
    ],
)
def test_every_item_round_trips_exactly_native_when_the_chat_shape_holds_it(item, native) -> None:
    """An item is stored natively only when that gives it back exactly, key order included;
    otherwise it is carried whole as JSON text, which gives back floats, big integers and order."""
    message = item_to_message(item)
    if native is not None:
        assert message == native
    else:
        (part,) = message["content"]
        assert part["type"] == ITEM_PART
        assert isinstance(part["json"], str)
    (back,) = messages_to_items([message])
    assert back == item
    assert json.dumps(back) == json.dumps(item)  # the same text: types and key order too


def test_items_written_by_earlier_versions_are_read() -> None:
    """A carried part of the older shape ({"type", "item": {...}}) still reads as its item."""
    old = {"role": "assistant", "content": [{"type": ITEM_PART, "item": {"type": "reasoning", "id": "r"}}]}
    assert messages_to_items([old]) == [{"type": "reasoning", "id": "r"}]


def test_carried_calls_and_outputs_keep_the_ledger_pairing() -> None:
    """A carried function call still carries tool_calls and its carried output tool_call_id."""
    call = item_to_message(
        {"type": "function_call", "call_id": "c9", "name": "f", "arguments": "{}", "id": "fc"}
    )
    output = item_to_message(
        {"type": "function_call_output", "call_id": "c9", "output": [{"type": "input_text"}]}
    )
    assert call["role"] == "assistant"
    assert call["tool_calls"][0]["id"] == "c9"
    assert (output["role"], output["tool_call_id"]) == ("tool", "c9")
    assert item_to_message({"type": "computer_call_output", "call_id": "x", "output": {}})["role"] == "user"


def test_messages_written_without_the_adapter_read_as_items() -> None:
    """Chat messages from other writers become role/content, call, output and reasoning items."""
    messages = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": "calling",
            "reasoning": {"content": "plan", "encrypted": "e"},
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                {"id": "b", "type": "custom", "function": {"name": "p", "arguments": "diff"}},
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": "fa", "synthetic": True},
        {"role": "tool", "tool_call_id": "b", "content": "fb"},
    ]
    assert messages_to_items(messages) == [
        {"role": "user", "content": "go"},
        {
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": "plan"}],
            "encrypted_content": "e",
        },
        {"role": "assistant", "content": "calling"},
        {"type": "function_call", "call_id": "a", "name": "f", "arguments": "{}"},
        {"type": "custom_tool_call", "call_id": "b", "name": "p", "input": "diff"},
        {"type": "function_call_output", "call_id": "a", "output": "fa"},
        {"type": "custom_tool_call_output", "call_id": "b", "output": "fb"},
    ]


def test_any_id_names_a_session_created_on_the_first_add(client) -> None:
    """LedgerSession("chat-session") reads an empty history, creates its session on add_items, and
    another object with the same id sees it; a ledger session's own id names that session."""
    first = LedgerSession("chat-session", client=client)
    assert asyncio.run(first.get_items()) == []
    assert asyncio.run(first.pop_item()) is None
    asyncio.run(first.add_items([{"role": "user", "content": "kept"}]))
    assert asyncio.run(LedgerSession("chat-session", client=client).get_items()) == [
        {"role": "user", "content": "kept"}
    ]
    ledger_id, found = client.resolve_session("chat-session")
    assert found
    assert asyncio.run(LedgerSession(ledger_id, client=client).get_items()) == [
        {"role": "user", "content": "kept"}
    ]


def test_settings_as_a_dict_are_normalized_and_unknown_keys_refused(client) -> None:
    """session_settings may be a dict (coerced as the SDK's sessions do); the default is SessionSettings()."""
    assert LedgerSession("s", client=client).session_settings == SessionSettings()
    assert LedgerSession(
        "s", client=client, session_settings={"limit": 2}
    ).session_settings == SessionSettings(limit=2)
    with pytest.raises(TypeError, match="colour"):
        LedgerSession("s", client=client, session_settings={"colour": "red"})


def test_a_closed_session_refuses_every_call(client) -> None:
    """close() is idempotent; afterwards each call raises RuntimeError naming the object's class."""

    class ChatStore(LedgerSession):
        pass

    for ledger, name in (
        (LedgerSession("to-close", client=client), "LedgerSession"),
        (ChatStore("x", client=client), "ChatStore"),
    ):
        ledger.close()
        ledger.close()
        calls = (
            ledger.get_items(),
            ledger.add_items([]),
            ledger.add_items([{"role": "user", "content": "x"}]),
            ledger.pop_item(),
        )
        for call in calls:
            with pytest.raises(RuntimeError, match=f"^{name} is closed$"):
                asyncio.run(call)


def test_objects_and_threads_adding_at_once_to_a_new_id_store_every_item(client) -> None:
    """The first add_items of many objects at once, and of one object from threads with their own
    loops, on an id no session has yet: one session is created and every item is in it (a call
    that met the session while another was creating it waits for the writer to accept appends)."""
    items = [{"role": "user", "content": f"item {index}"} for index in range(12)]

    async def objects() -> list:
        await asyncio.gather(
            *(LedgerSession("created-at-once", client=client).add_items([item]) for item in items)
        )
        return await LedgerSession("created-at-once", client=client).get_items()

    assert sorted(item["content"] for item in asyncio.run(objects())) == sorted(
        item["content"] for item in items
    )

    shared = LedgerSession("created-from-threads", client=client)
    with concurrent.futures.ThreadPoolExecutor(max_workers=6) as pool:
        list(pool.map(lambda item: asyncio.run(shared.add_items([item])), items))  # raises what a call raised
    stored = asyncio.run(shared.get_items())
    assert sorted(item["content"] for item in stored) == sorted(item["content"] for item in items)


def test_an_output_whose_call_the_session_lacks_is_kept_as_sqlite_keeps_it(client) -> None:
    """An output item with no call in the history is stored (unpaired) and read back as given."""
    ledger = LedgerSession("orphan-output", client=client)
    item = {"type": "function_call_output", "call_id": "never-called", "output": "x"}
    asyncio.run(ledger.add_items([item]))
    assert asyncio.run(ledger.get_items()) == [item]


def test_the_blocking_client_type_is_accepted_as_is() -> None:
    """LedgerSession takes either client kind (RolloutClient needs no event loop of the caller's)."""
    with RolloutClient("127.0.0.1:1", "127.0.0.1:1") as blocking:
        assert LedgerSession("x", client=blocking).session_id == "x"


def test_a_blocking_client_serves_the_session_on_the_callers_own_loop(writer_process, reader_process) -> None:
    """Over a blocking client, LedgerSession's calls run on the caller's event loop (the client's
    asyncio core opens its channels there), not on the client's thread and back: no thread hop."""
    openers: list[str] = []

    def opener(_service: str, address: str) -> grpc.aio.Channel:
        openers.append(threading.current_thread().name)
        return grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)

    async def run() -> list[Any]:
        ledger = LedgerSession("own-loop", client=blocking)
        await ledger.add_items([{"role": "user", "content": "hi"}])
        return await ledger.get_items()

    with RolloutClient(
        writer_process.address, reader_process.address, retry=TEST_RETRY, channels=opener
    ) as blocking:
        caller = threading.current_thread().name
        assert asyncio.run(run()) == [{"role": "user", "content": "hi"}]
    assert openers
    assert set(openers) == {caller}


def test_an_item_json_cannot_hold_is_refused_naming_it_and_nothing_is_written(client) -> None:
    """Items are sent encoded once; one that JSON cannot hold (a lone surrogate) is still refused
    before anything is sent, as InvalidArgumentError naming the record, with either shape."""
    ledger = LedgerSession("surrogate", client=client)

    async def run() -> list[Any]:
        await ledger.add_items([{"role": "user", "content": "kept"}])
        for item in ({"role": "user", "content": "\ud800"}, {"type": "note", "text": "\ud800"}):
            with pytest.raises(InvalidArgumentError) as refused:
                await ledger.add_items([{"role": "user", "content": "fine"}, item])
            assert [v.field for v in refused.value.field_violations] == ["records[1].message_json"]
        return await ledger.get_items()

    assert asyncio.run(run()) == [{"role": "user", "content": "kept"}]


def test_a_reply_is_parsed_with_the_collector_paused_and_left_as_it_was(monkeypatch) -> None:
    """canonical_items parses with the cyclic collector off (each collection would walk every item
    parsed so far) and leaves it as it found it, on or off; the items come back as written."""
    import gc

    import orjson

    import rollout_client.agents as agents_module
    from shared.digest import canonical_message

    written = [{"type": "message", "id": "m", "n": 3.0, "big": 2**60}, {"z": 1, "a": [True, None]}]
    replies = [canonical_message(item_to_message(item)) for item in written]
    seen: list[bool] = []
    carried = agents_module.carried_agents_item_text

    def watched(part: Any) -> Any:
        seen.append(gc.isenabled())
        return carried(part)

    monkeypatch.setattr(agents_module, "carried_agents_item_text", watched)
    was = gc.isenabled()
    try:
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            parsed = agents_module.canonical_items(replies)
            assert gc.isenabled() is enabled
            items, kept = parsed
            assert [item for message in items for item in message] == written
            assert [agents_module.fresh_item(held) for message in kept for held in message] == written
            assert orjson.dumps(items[0][0]) == orjson.dumps(written[0])  # 3.0 stays a float
    finally:
        (gc.enable if was else gc.disable)()
    assert seen == [False] * 4
