"""The reader's conversions: rebuilt payloads as ChatMessages, replies assembled from bytes."""

from __future__ import annotations

import pytest
from google.protobuf import struct_pb2
from hypothesis import example, given, settings
from hypothesis import strategies as st

from reader_service import wire
from reader_service.wire import chunk_entry, message_entry
from rollout.v1 import reader_pb2, records_pb2
from shared.wire import message_from_payload

ChatMessage = records_pb2.ChatMessage


def _parts(*items):
    values = struct_pb2.ListValue()
    values.extend(items)
    return values


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        ({"role": "user", "content": "hi"}, ChatMessage(role="user", text="hi")),
        ({"role": "user", "content": []}, ChatMessage(role="user", parts=_parts())),
        (
            {"role": "user", "content": [{"type": "input_text", "text": "x"}]},
            ChatMessage(role="user", parts=_parts({"type": "input_text", "text": "x"})),
        ),
        (
            {"role": "tool", "tool_call_id": "c", "content": 42},
            ChatMessage(role="tool", tool_call_id="c", text="42"),
        ),
        ({"role": "assistant", "content": None}, ChatMessage(role="assistant")),
        ({"content": "no role"}, ChatMessage(text="no role")),
        (
            {"role": "assistant", "tool_calls": [{"id": "c1"}, "not a call"]},
            ChatMessage(
                role="assistant",
                tool_calls=[
                    records_pb2.ToolCall(id="c1", type="function", function=records_pb2.FunctionCall())
                ],
            ),
        ),
        (
            {"role": "assistant", "reasoning": [{"content": "only", "signature": "s"}, "junk"]},
            ChatMessage(role="assistant", reasoning=records_pb2.Reasoning(content="only", signature="s")),
        ),
        (
            {"role": "assistant", "reasoning": [{"content": "a"}, {"content": "b", "encrypted": "e"}]},
            ChatMessage(
                role="assistant",
                reasoning_blocks=[
                    records_pb2.Reasoning(content="a"),
                    records_pb2.Reasoning(content="b", encrypted="e"),
                ],
            ),
        ),
        (
            {
                "role": "tool",
                "tool_call_id": "c",
                "is_anchored": False,
                "synthetic": True,
                "truncation_marker": "m",
                "name": 7,
            },
            ChatMessage(role="tool", tool_call_id="c", synthetic=True, truncation_marker="m", name="7"),
        ),
    ],
)
def test_a_rebuilt_payload_becomes_the_chat_message_it_describes(payload, expected) -> None:
    """Each payload field lands in its ChatMessage field; values of another type are kept as text, and
    one reasoning block travels in ``reasoning``, several in ``reasoning_blocks``."""
    message = message_from_payload(payload)
    assert message == expected
    assert message.HasField("parts") == expected.HasField("parts")
    for call, wanted in zip(message.tool_calls, expected.tool_calls, strict=True):
        assert call.HasField("function") == wanted.HasField("function")


@pytest.mark.parametrize(
    "payload",
    [
        {"role": "user", "content": "hi"},
        {"role": "user", "content": [{"type": "input_text", "text": "x", "b": 1, "a": [True, None]}]},
        {
            "role": "assistant",
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        },
    ],
)
def test_a_message_entry_is_the_messages_field_of_a_reply(payload) -> None:
    """The entry bytes of one message are what the ``messages`` field of a ReplayResponse (field 2) or a
    ReplayChunk (field 3) holding it serializes to, so replies can be joined from entries."""
    message = message_from_payload(payload)
    assert message_entry(payload) == reader_pb2.ReplayResponse(messages=[message]).SerializeToString(
        deterministic=True
    )
    assert chunk_entry(payload) == reader_pb2.ReplayChunk(messages=[message]).SerializeToString(
        deterministic=True
    )


# Empty strings and falsy values come often: presence is where a written entry could differ.
TEXTS = st.sampled_from(["", "x", "é—東"]) | st.text(max_size=8)
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXTS,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=8,
)
TOOL_CALLS = st.lists(
    st.fixed_dictionaries(
        {},
        optional={
            "id": JSON_VALUES,
            "type": JSON_VALUES,
            "function": st.fixed_dictionaries({}, optional={"name": JSON_VALUES, "arguments": JSON_VALUES})
            | JSON_VALUES,
        },
    )
    | JSON_VALUES,
    max_size=3,
)
REASONING_BLOCK = st.fixed_dictionaries(
    {}, optional={"content": JSON_VALUES, "signature": JSON_VALUES, "encrypted": JSON_VALUES}
)
PAYLOADS = st.fixed_dictionaries(
    {},
    optional={
        "role": st.sampled_from(["user", "assistant", "tool", ""]) | JSON_VALUES,
        "content": TEXTS | JSON_VALUES,
        "name": JSON_VALUES,
        "tool_calls": TOOL_CALLS | JSON_VALUES,
        "tool_call_id": JSON_VALUES,
        "is_anchored": JSON_VALUES,
        "truncation_marker": JSON_VALUES,
        "reasoning": REASONING_BLOCK | st.lists(REASONING_BLOCK | JSON_VALUES, max_size=3) | JSON_VALUES,
        "synthetic": JSON_VALUES,
        "is_error": JSON_VALUES,
        "unknown": JSON_VALUES,
    },
)


@settings(max_examples=400, deadline=None)
@example(payload={"name": "", "tool_call_id": "", "truncation_marker": "", "content": ""})
@example(payload={"role": "", "reasoning": {"content": "", "signature": ""}, "synthetic": True})
@example(
    payload={"reasoning": [{}, {"encrypted": ""}], "synthetic": 1, "is_error": "yes", "is_anchored": [0]}
)
@example(payload={"tool_calls": [{}, {"function": "f", "type": ""}, None], "role": None, "content": None})
@example(payload={"role": "tool", "tool_call_id": "c", "content": "x" * 20_000})  # 3-byte lengths
@example(
    payload={"role": "assistant", "tool_calls": [{"id": "c", "function": {"arguments": "é" * 1_100_000}}]}
)
@given(payload=PAYLOADS)
def test_the_written_entries_are_the_bytes_protobuf_serializes(payload) -> None:
    """Entries written without filling a ChatMessage equal protobuf's serialization of the message
    fill_message makes (fields in number order, presence as protobuf keeps it, odd values as text);
    only content parts are left to protobuf."""
    message = message_from_payload(payload)
    assert message_entry(payload) == reader_pb2.ReplayResponse(messages=[message]).SerializeToString(
        deterministic=True
    )
    assert chunk_entry(payload) == reader_pb2.ReplayChunk(messages=[message]).SerializeToString(
        deterministic=True
    )
    written = wire._message_pieces(b"\x12", payload)
    assert (written is None) == isinstance(payload.get("content"), list)
