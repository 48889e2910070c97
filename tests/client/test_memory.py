"""ConversationMemory (seed rule 3): copies out, methods in, thread-safe, the JSON wire shape kept."""

from __future__ import annotations

import re
import threading

import orjson
import pytest

from rollout_client import ConversationMemory, assistant, tool_call, user


def _append_from_eight_threads(memory: ConversationMemory) -> list[str]:
    """8 threads each add_user "<thread>:<index>" for index 0..499, all at once; the texts kept."""
    start = threading.Barrier(8)

    def work(thread: int) -> None:
        start.wait()
        for index in range(500):
            memory.add_user(f"{thread}:{index}")

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [message["content"] for message in memory.snapshot()]


def test_reads_are_deep_copies() -> None:
    """Changing what snapshot() or last_message() returned never changes the memory."""
    memory = ConversationMemory()
    memory.add_user([{"type": "input_text", "text": "hi"}])
    snapshot = memory.snapshot()
    snapshot[0]["content"][0]["text"] = "changed"
    snapshot.append(user("injected"))
    last = memory.last_message()
    assert last is not None
    last["content"].clear()
    assert memory.snapshot() == [user([{"type": "input_text", "text": "hi"}])]


def test_appends_keep_a_copy_of_the_callers_dict() -> None:
    """A message dict changed by its caller after append() stays as appended in the memory."""
    memory = ConversationMemory()
    message = user("original")
    memory.append(message)
    message["content"] = "changed later"
    assert memory.snapshot() == [user("original")]


def test_no_attribute_reaches_the_list() -> None:
    """The list lives in a slot with no public name; no method or property returns it itself."""
    memory = ConversationMemory()
    memory.add_user("x")
    assert not hasattr(memory, "__dict__")
    public = [name for name in dir(memory) if not name.startswith("_")]
    assert sorted(public) == [
        "add_assistant",
        "add_tool_result",
        "add_user",
        "append",
        "from_json",
        "from_replay",
        "last_message",
        "max_size",
        "replace",
        "snapshot",
        "to_json",
    ]
    assert memory.snapshot() is not memory.snapshot()


def test_concurrent_appends_from_eight_threads_are_all_kept() -> None:
    """8 threads x 500 appends: 4,000 messages, each once, each thread's in its own order."""
    texts = _append_from_eight_threads(ConversationMemory())
    assert len(texts) == len(set(texts)) == 4000
    for thread in range(8):
        mine = [int(text.split(":")[1]) for text in texts if text.startswith(f"{thread}:")]
        assert mine == list(range(500))


def test_max_size_trims_appends_but_not_replace() -> None:
    """append() keeps the newest max_size messages; replace() loads everything as given."""
    memory = ConversationMemory(max_size=2)
    for text in ("a", "b", "c"):
        memory.add_user(text)
    assert memory.snapshot() == [user("b"), user("c")]
    memory.replace([user("1"), user("2"), user("3")])
    assert len(memory) == 3
    memory.add_assistant("4")
    assert memory.snapshot() == [user("3"), assistant("4")]


def test_typed_adds_build_ledger_messages() -> None:
    """add_user / add_assistant / add_tool_result append the ledger's message dicts."""
    memory = ConversationMemory()
    memory.add_user("q")
    memory.add_assistant(tool_calls=[tool_call("c1", "f")], reasoning={"content": "r"})
    memory.add_tool_result("c1", "out", is_error=True)
    assert memory.snapshot() == [
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
            "reasoning": {"content": "r"},
        },
        {"role": "tool", "tool_call_id": "c1", "content": "out", "is_error": True},
    ]


def test_the_wire_shape_is_byte_compatible_both_ways() -> None:
    """to_json gives {"messages":[...],"max_size":n} exactly; compact input round-trips byte for byte."""
    wire = (
        '{"messages":[{"role":"user","content":"héllo <b>"},'
        '{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function",'
        '"function":{"name":"f","arguments":"{\\"a\\":1}"}}]}],"max_size":5}'
    )
    memory = ConversationMemory.from_json(wire)
    assert memory.max_size == 5
    assert memory.to_json() == wire
    assert ConversationMemory.from_json(memory.to_json().encode()).to_json() == wire
    unbounded = ConversationMemory()
    unbounded.add_user("x")
    assert unbounded.to_json() == '{"messages":[{"role":"user","content":"x"}],"max_size":0}'
    assert ConversationMemory.from_json(unbounded.to_json()).max_size is None
    assert list(orjson.loads(unbounded.to_json())) == ["messages", "max_size"]


@pytest.mark.parametrize(
    ("document", "reason"),
    [
        ('{"messages":[]}', "is {"),
        ('{"messages":[],"max_size":1,"extra":true}', "is {"),
        ('{"messages":[],"max_size":-1}', "non-negative integer"),
        ('{"messages":[],"max_size":"3"}', "non-negative integer"),
        ('{"messages":{},"max_size":0}', "a list of message objects"),
        ('{"messages":[{"role":"user","content":"x","foo":1}],"max_size":0}', "foo"),
    ],
)
def test_other_documents_are_refused(document, reason) -> None:
    """Missing or extra keys, a bad max_size or a message with unknown keys raise ValueError."""
    with pytest.raises(ValueError, match=re.escape(reason)):
        ConversationMemory.from_json(document)


def test_from_replay_loads_a_session_as_is(client) -> None:
    """from_replay(session) holds the replayed messages, even beyond max_size."""
    session = client.create_session()
    session.append(user("a"), assistant("b", reasoning=[{"content": "1"}, {"content": "2"}]), user("c"))
    memory = ConversationMemory.from_replay(session, max_size=2)
    assert memory.snapshot() == session.replay().messages
    assert len(memory) == 3
    assert ConversationMemory.from_replay(session.replay()).snapshot() == memory.snapshot()


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.add_user("x"),
        lambda m: m.append(user("x")),
        lambda m: m.replace([user("x")]),
        lambda m: m.snapshot(),
        lambda m: m.last_message(),
        lambda m: m.to_json(),
        len,
    ],
)
def test_every_method_takes_the_lock(call) -> None:
    """While the memory's lock is held elsewhere, each read and write waits for it."""
    memory = ConversationMemory(max_size=3)
    memory._lock.acquire()
    worker = threading.Thread(target=call, args=(memory,))
    worker.start()
    worker.join(0.2)
    assert worker.is_alive()
    memory._lock.release()
    worker.join(5)
    assert not worker.is_alive()


def test_concurrent_appends_with_max_size_keep_exactly_max_size() -> None:
    """8 threads appending past max_size leave exactly max_size messages, each thread's in order."""
    texts = _append_from_eight_threads(ConversationMemory(max_size=100))
    assert len(texts) == 100
    for thread in range(8):
        mine = [int(text.split(":")[1]) for text in texts if text.startswith(f"{thread}:")]
        assert mine == sorted(mine)
        assert not mine or mine[-1] == 499
