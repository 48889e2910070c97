"""AppendRecord.message_json: a message as JSON, stored as a ChatMessage would be, and exact where a
Struct is not (shared.wire.message_json_payloads)."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollout.v1 import writer_pb2
from shared.errors import RecordValidationError
from shared.wire import append_payloads, message_from_payload

TEXT = st.text(max_size=12)
CALL = st.fixed_dictionaries(
    {"id": TEXT.filter(bool), "type": st.sampled_from(["function", "custom"])},
).flatmap(
    lambda call: st.fixed_dictionaries({"name": TEXT, "arguments": TEXT}).map(
        lambda function: {**call, "function": function}
    )
)
BLOCK = st.fixed_dictionaries({"content": TEXT}, optional={"signature": TEXT, "encrypted": TEXT})
PART = st.dictionaries(TEXT, st.one_of(TEXT, st.integers(-(2**53), 2**53), st.booleans()), max_size=3)
MESSAGE = st.one_of(
    st.fixed_dictionaries(
        {
            "role": st.sampled_from(["user", "system", "developer"]),
            "content": st.one_of(TEXT, st.lists(PART, max_size=3)),
        },
        optional={"name": TEXT},
    ),
    st.fixed_dictionaries(
        {"role": st.just("assistant")},
        optional={
            "content": TEXT,
            "tool_calls": st.lists(CALL, min_size=1, max_size=2),
            "reasoning": st.one_of(BLOCK, st.lists(BLOCK, min_size=2, max_size=3)),
            "is_anchored": st.booleans(),
            "truncation_marker": TEXT,
        },
    ),
    st.fixed_dictionaries(
        {"role": st.just("tool"), "tool_call_id": TEXT.filter(bool), "content": TEXT},
        optional={"is_error": st.booleans()},
    ),
)


def through_json(message: dict) -> list:
    return append_payloads(writer_pb2.AppendRecord(message_json=orjson.dumps(message)), 0)


def through_proto(message: dict) -> list:
    return append_payloads(writer_pb2.AppendRecord(message=message_from_payload(message)), 0)


@settings(max_examples=300, deadline=None)
@given(message=MESSAGE)
def test_a_message_as_json_is_stored_as_the_same_message_as_a_chat_message(message) -> None:
    """The same records, payloads and key order, whichever form the message travelled in."""
    json_form, proto_form = through_json(message), through_proto(message)
    assert json_form == proto_form
    assert [list(payload) for _, payload in json_form] == [list(payload) for _, payload in proto_form]


def test_numbers_and_key_order_in_parts_are_kept_where_a_struct_changes_them() -> None:
    """1.0 stays a float, 2**60 stays exact, part keys keep their order (a Struct gives 1, 2**60 rounded, sorted)."""
    parts = [{"z": 1.0, "a": 2**60, "m": [3.5, -0.0]}]
    ((_, payload),) = through_json({"role": "user", "content": parts})
    assert orjson.dumps(payload["content"]) == b'[{"z":1.0,"a":1152921504606846976,"m":[3.5,-0.0]}]'
    ((_, struct_payload),) = through_proto({"role": "user", "content": parts})
    assert type(struct_payload["content"][0]["z"]) is int  # what a Struct does to 1.0


@pytest.mark.parametrize(
    ("raw", "field", "says"),
    [
        (b"[1]", "message_json", "one JSON object"),
        (b"{", "message_json", "not valid JSON"),
        (b'{"role":"tool","synthetic":true}', "message.synthetic", "only the writer"),
        (b'{"role":"user","colour":"red"}', "message_json", "keys a message does not have"),
        (b'{"role":"user","content":7}', "message.content", "string or a list"),
        (b'{"role":"user","name":7}', "message.name", "must be a string"),
        (b'{"role":"user","is_error":"yes"}', "message.is_error", "true or false"),
        (b'{"role":"user","content":"x","reasoning":{"content":"r"}}', "message.reasoning", "only assistant"),
        (
            b'{"role":"assistant","tool_calls":[{"id":"c","function":{"name":1}}]}',
            "message.tool_calls[0]",
            "string values",
        ),
        (
            b'{"role":"assistant","reasoning":[{"content":"r","extra":"x"}]}',
            "message.reasoning[0]",
            "string values",
        ),
        (
            b'{"role":"user","content":[{"n":123456789012345678901234567890}]}',
            "message_json",
            "beyond 64 bits",
        ),
    ],
)
def test_a_message_json_the_shape_does_not_allow_is_refused_by_field(raw, field, says) -> None:
    """Each refusal names records[i] and the field, and says why."""
    with pytest.raises(RecordValidationError, match=says) as caught:
        append_payloads(writer_pb2.AppendRecord(message_json=raw), 3)
    assert (caught.value.index, caught.value.field) == (3, field)


def test_a_real_huge_float_is_kept_and_an_integer_of_64_bits_is_exact() -> None:
    """1e300 is a float, not an integer beyond 64 bits; 2**64 - 1 fits and is kept exactly."""
    ((_, payload),) = through_json({"role": "user", "content": [{"f": 1e300, "n": 2**64 - 1}]})
    assert payload["content"] == [{"f": 1e300, "n": 2**64 - 1}]
