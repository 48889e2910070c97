"""The reasoning duality (docs/spec.md §2.5): what the writer splits, rebuild re-attaches, exactly."""

from __future__ import annotations

import pytest
from google.protobuf import struct_pb2
from hypothesis import given, settings
from hypothesis import strategies as st

from rollout.v1 import records_pb2, writer_pb2
from shared.errors import InvalidArgumentError, RecordValidationError
from shared.rebuild import rebuild
from shared.records import RecordType, encode_line
from shared.stop_kinds import StopKind
from shared.wire import append_payloads, message_from_payload, stop_kind_from_proto, stop_kind_to_proto

TS = "2026-11-30T10:15:30.123456Z"
META = {"session_id": "01a22c15-89a6-7d3d-b5b7-165622bd350c", "tenant": "default", "created_at": TS}


def replay(messages):
    """Write ``messages`` as the writer does (append_payloads, encode_line), rebuild, convert back."""
    payloads = [(RecordType.SESSION_META, META)]
    for index, chat in enumerate(messages):
        payloads += append_payloads(writer_pb2.AppendRecord(message=chat), index)
    data = b"".join(
        encode_line(seq, TS, record_type, payload) for seq, (record_type, payload) in enumerate(payloads)
    )
    result = rebuild(data)
    return [message_from_payload(payload) for payload in result.messages], result


_texts = st.text(max_size=16)
_numbers = st.integers(-(2**53), 2**53) | st.floats(allow_nan=False, allow_infinity=False)
_json = st.recursive(
    st.none() | st.booleans() | _numbers | _texts,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(_texts, children, max_size=3),
    max_leaves=8,
)


def _list_value(items):
    """``items`` as a google.protobuf.ListValue."""
    values = struct_pb2.ListValue()
    values.extend(items)
    return values


_parts = st.lists(_json, max_size=3).map(_list_value)


@st.composite
def chat_messages(draw, role, *, reasoning=False, tool_call_id=None):
    """One ChatMessage of ``role`` with random content, name, marker and (if asked) reasoning."""
    chat = records_pb2.ChatMessage(role=role)
    content = draw(st.sampled_from(["none", "text", "parts"]))
    if content == "text":
        chat.text = draw(_texts)
    elif content == "parts":
        chat.parts.CopyFrom(draw(_parts))
    if draw(st.booleans()):
        chat.name = draw(_texts)
    if tool_call_id is not None:
        chat.tool_call_id = tool_call_id
    chat.is_anchored = draw(st.booleans())
    if draw(st.booleans()):
        chat.truncation_marker = draw(_texts)
    blocks = draw(st.integers(min_value=0, max_value=3)) if reasoning else 0
    for _ in range(blocks):  # one block travels in reasoning, several in reasoning_blocks
        block = chat.reasoning if blocks == 1 else chat.reasoning_blocks.add()
        block.content = draw(_texts)
        if draw(st.booleans()):
            block.signature = draw(_texts)
        if draw(st.booleans()):
            block.encrypted = draw(_texts)
    return chat


@st.composite
def conversations(draw):
    """Turns of: an optional system/developer/user message, an assistant message, its tool outputs."""
    messages = []
    for turn in range(draw(st.integers(min_value=1, max_value=4))):
        if draw(st.booleans()):
            messages.append(draw(chat_messages(draw(st.sampled_from(["system", "developer", "user"])))))
        assistant = draw(chat_messages("assistant", reasoning=True))
        call_ids = [f"call_{turn}_{index}" for index in range(draw(st.integers(min_value=0, max_value=2)))]
        for call_id in call_ids:
            assistant.tool_calls.add(
                id=call_id,
                type=draw(st.sampled_from(["function", "custom"])),
                function=records_pb2.FunctionCall(
                    name=draw(st.text(min_size=1, max_size=8)), arguments=draw(_texts)
                ),
            )
        messages.append(assistant)
        messages += [draw(chat_messages("tool", tool_call_id=call_id)) for call_id in call_ids]
    return messages


@settings(deadline=None, max_examples=200)
@given(messages=conversations())
def test_appended_messages_replay_exactly(messages):
    """Messages written through append_payloads and encode_line rebuild to equal ChatMessages."""
    replayed, result = replay(messages)
    assert replayed == messages
    assert result.degraded == []
    assert result.superseded_outputs == 0


def test_reasoning_is_written_as_its_own_record_before_the_message():
    """An assistant message with reasoning becomes a reasoning record then a message record."""
    chat = records_pb2.ChatMessage(
        role="assistant", text="a", reasoning=records_pb2.Reasoning(content="r", signature="s")
    )
    assert append_payloads(writer_pb2.AppendRecord(message=chat), 0) == [
        (RecordType.REASONING, {"content": "r", "signature": "s"}),
        (RecordType.MESSAGE, {"role": "assistant", "content": "a"}),
    ]


def test_several_reasoning_blocks_are_written_in_order_and_replay_as_reasoning_blocks():
    """reasoning_blocks become one reasoning record each, in order, and replay as the same list."""
    blocks = [
        records_pb2.Reasoning(content="one", encrypted="enc-1"),
        records_pb2.Reasoning(content="two", signature="sig-2"),
    ]
    chat = records_pb2.ChatMessage(role="assistant", text="a", reasoning_blocks=blocks)
    assert append_payloads(writer_pb2.AppendRecord(message=chat), 0) == [
        (RecordType.REASONING, {"content": "one", "encrypted": "enc-1"}),
        (RecordType.REASONING, {"content": "two", "signature": "sig-2"}),
        (RecordType.MESSAGE, {"role": "assistant", "content": "a"}),
    ]
    replayed, result = replay([chat])
    assert replayed == [chat]
    assert not replayed[0].HasField("reasoning")
    assert result.degraded == []


def test_one_reasoning_block_is_stored_and_replayed_as_plain_reasoning():
    """A one-item reasoning_blocks list is the same record as reasoning, and replays in that field."""
    block = records_pb2.Reasoning(content="only", encrypted="e")
    as_list = records_pb2.ChatMessage(role="assistant", text="a", reasoning_blocks=[block])
    as_field = records_pb2.ChatMessage(role="assistant", text="a", reasoning=block)
    written = append_payloads(writer_pb2.AppendRecord(message=as_list), 0)
    assert written == append_payloads(writer_pb2.AppendRecord(message=as_field), 0)
    replayed, _ = replay([as_list])
    assert replayed == [as_field]


def test_reasoning_and_reasoning_blocks_together_are_rejected():
    """A message setting both reasoning fields is refused, naming reasoning_blocks."""
    chat = records_pb2.ChatMessage(
        role="assistant",
        reasoning=records_pb2.Reasoning(content="a"),
        reasoning_blocks=[records_pb2.Reasoning(content="b")],
    )
    with pytest.raises(RecordValidationError) as caught:
        append_payloads(writer_pb2.AppendRecord(message=chat), 5)
    assert (caught.value.index, caught.value.field) == (5, "message.reasoning_blocks")


def test_a_replacement_history_keeps_several_reasoning_blocks_inline():
    """A compaction's replacement message with two blocks rebuilds with both, in order."""
    compacted = records_pb2.Compacted(summary="s")
    compacted.replacement_history.messages.add(
        role="assistant",
        text="kept",
        reasoning_blocks=[records_pb2.Reasoning(content="x"), records_pb2.Reasoning(content="y")],
    )
    [(record_type, payload)] = append_payloads(writer_pb2.AppendRecord(compacted=compacted), 0)
    assert record_type == RecordType.COMPACTED
    assert payload["replacement_history"][0]["reasoning"] == [{"content": "x"}, {"content": "y"}]
    data = encode_line(0, TS, "session_meta", META) + encode_line(1, TS, record_type, payload)
    [message] = rebuild(data).messages
    assert message_from_payload(message) == compacted.replacement_history.messages[0]


@pytest.mark.parametrize("role", ["system", "developer", "user", "tool"])
def test_reasoning_on_a_non_assistant_message_is_rejected(role):
    """Reasoning on any role but assistant is refused, naming the record index and field."""
    chat = records_pb2.ChatMessage(role=role, text="x", reasoning=records_pb2.Reasoning(content="r"))
    with pytest.raises(RecordValidationError) as caught:
        append_payloads(writer_pb2.AppendRecord(message=chat), 3)
    assert (caught.value.index, caught.value.field) == (3, "message.reasoning")


def test_empty_parts_list_replays_as_parts():
    """A message whose content is an empty parts list replays with an empty parts list, not no content."""
    chat = records_pb2.ChatMessage(role="user", parts=struct_pb2.ListValue())
    replayed, _ = replay([chat])
    assert replayed == [chat]


@pytest.mark.parametrize("number", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_numbers_in_content_parts_are_rejected(number):
    """NaN and infinities cannot be stored in JSON: the record is refused, naming its index."""
    parts = struct_pb2.ListValue()
    parts.append({"type": "score", "value": number})
    chat = records_pb2.ChatMessage(role="user", parts=parts)
    with pytest.raises(RecordValidationError) as caught:
        append_payloads(writer_pb2.AppendRecord(message=chat), 4)
    assert caught.value.index == 4


def test_clients_cannot_mark_their_own_outputs_synthetic():
    """Only the writer marks an output synthetic (on Resume): an Append carrying it is refused."""
    chat = records_pb2.ChatMessage(role="tool", tool_call_id="c", text="x", synthetic=True)
    with pytest.raises(RecordValidationError) as caught:
        append_payloads(writer_pb2.AppendRecord(message=chat), 2)
    assert (caught.value.index, caught.value.field) == (2, "message.synthetic")


@pytest.mark.parametrize("kind", list(StopKind), ids=str)
def test_every_stop_kind_round_trips_through_its_proto_value(kind: StopKind) -> None:
    """The docs/spec.md §1 stop-kind vocabulary and rollout.v1.StopKind name the same kinds, both ways."""
    value = stop_kind_to_proto(kind)
    assert records_pb2.StopKind.Name(value) == f"STOP_KIND_{kind.value.upper()}"
    assert stop_kind_from_proto(value) is kind


@pytest.mark.parametrize("value", [records_pb2.STOP_KIND_UNSPECIFIED, 999])
def test_an_unspecified_or_undeclared_stop_kind_is_refused(value: int) -> None:
    """UNSPECIFIED or a number the proto does not declare is an INVALID_ARGUMENT on field stop_kind
    (a request field, not a record's: never reported as records[0].stop_kind)."""
    with pytest.raises(InvalidArgumentError) as caught:
        stop_kind_from_proto(value)
    assert caught.value.field == "stop_kind"
