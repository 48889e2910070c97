"""Conversions from the rollout.v1 protobuf messages to record payloads, and the stop-kind values.

The writer's half of the wire: an AppendRecord becomes the payloads written to
the file (:func:`append_payloads`). The reasoning duality of docs/spec.md §2.5 is one
half here (:func:`split_reasoning`: an assistant message carrying N reasoning
blocks becomes N ``reasoning`` payloads then the ``message`` payload) and the
other half in :func:`shared.rebuild.rebuild` (re-attach them all, in order, to
the next assistant message; :func:`attached_reasoning` is the shape both sides
use); the reader turns rebuilt payloads back into messages in
:mod:`reader_service.wire`, and tests/shared/test_wire.py pins the round trip.
The stop-kind <-> ``rollout.v1.StopKind`` mapping is used by both services and
the command line.

Opaque objects travel as ``google.protobuf.Struct`` / ``ListValue``, whose numbers
are doubles: an integral number within ±2**53 is stored as a JSON integer, so
``{"tokens": 12}`` stays ``12`` and never becomes ``12.0``.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from typing import Any

import orjson
from google.protobuf import struct_pb2

from rollout.v1 import reader_pb2, records_pb2, writer_pb2
from shared.errors import InvalidArgumentError, RecordValidationError
from shared.records import RESERVED_EVENT_KINDS, RecordType, attached_reasoning, clip, normalize_timestamp
from shared.rounds import InteractiveInput, Round, RoundStatus, Segment
from shared.session_meta import SessionRole, SessionSpec
from shared.stop_kinds import StopKind, stop_kind_named

_INTEGRAL_LIMIT = 2**53


class NonFiniteNumberError(ValueError):
    """An opaque object holds NaN or an infinity, which JSON (and so the line format) cannot."""


# Plain strings (not the StrEnum members) so that orjson encodes them on its fast path.
_MESSAGE: Any = RecordType.MESSAGE.value
_REASONING: Any = RecordType.REASONING.value
_COMPACTED: Any = RecordType.COMPACTED.value
_TURN_CONTEXT: Any = RecordType.TURN_CONTEXT.value
_EVENT: Any = RecordType.EVENT.value
_RETRACTION: Any = RecordType.RETRACTION.value


def value_to_python(value: struct_pb2.Value) -> Any:
    """A ``google.protobuf.Value`` as plain Python (dict, list, str, int/float, bool, None)."""
    kind = value.WhichOneof("kind")
    if kind == "string_value":
        return value.string_value
    if kind == "number_value":
        number = value.number_value
        if not math.isfinite(number):
            raise NonFiniteNumberError(f"{number} cannot be stored: JSON has no NaN or infinity")
        if (
            number.is_integer()
            and -_INTEGRAL_LIMIT <= number <= _INTEGRAL_LIMIT
            and math.copysign(1, number) > 0
        ):
            return int(number)
        return number
    if kind == "struct_value":
        return struct_to_python(value.struct_value)
    if kind == "list_value":
        return list_to_python(value.list_value)
    if kind == "bool_value":
        return value.bool_value
    return None


def struct_to_python(struct: struct_pb2.Struct) -> dict[str, Any]:
    """A ``google.protobuf.Struct`` as a plain dict."""
    return {key: value_to_python(value) for key, value in struct.fields.items()}


def list_to_python(values: struct_pb2.ListValue) -> list[Any]:
    """A ``google.protobuf.ListValue`` as a plain list."""
    return [value_to_python(value) for value in values.values]


def python_to_struct(obj: Mapping[str, Any], into: struct_pb2.Struct | None = None) -> struct_pb2.Struct:
    """A plain dict as ``google.protobuf.Struct`` (numbers become doubles): ``into`` (a field of
    the message being built, which is then not copied again) filled, or a new one."""
    struct = struct_pb2.Struct() if into is None else into
    struct.update(obj)
    return struct


def python_to_list(items: list[Any]) -> struct_pb2.ListValue:
    """A plain list as ``google.protobuf.ListValue``."""
    values = struct_pb2.ListValue()
    values.extend(items)
    return values


def reasoning_payload(reasoning: records_pb2.Reasoning) -> dict[str, Any]:
    """The ``reasoning`` record payload of a Reasoning message."""
    payload: dict[str, Any] = {"content": reasoning.content}
    if reasoning.HasField("signature"):
        payload["signature"] = reasoning.signature
    if reasoning.HasField("encrypted"):
        payload["encrypted"] = reasoning.encrypted
    return payload


def _tool_calls(calls: Any) -> list[dict[str, Any]]:
    return [
        {
            "id": call.id,
            "type": call.type or "function",
            "function": {"name": call.function.name, "arguments": call.function.arguments},
        }
        for call in calls
    ]


class BothReasoningFieldsError(ValueError):
    """A ChatMessage sets both ``reasoning`` and ``reasoning_blocks``."""


def _message_fields(message: records_pb2.ChatMessage) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(reasoning payloads in order, message payload) from the fields that are set.

    One ListFields() call visits only the set fields, in field-number order
    (role, content, name, tool_calls, tool_call_id, is_anchored,
    truncation_marker, reasoning, synthetic, reasoning_blocks, is_error, input_kind): the hot path of
    every Append. Raises BothReasoningFieldsError when both reasoning fields are set.
    """
    payload: dict[str, Any] = {"role": ""}
    reasoning: list[dict[str, Any]] = []
    for descriptor, value in message.ListFields():
        name = descriptor.name
        if name == "text":
            payload["content"] = value
        elif name == "parts":
            payload["content"] = list_to_python(value)
        elif name == "tool_calls":
            payload["tool_calls"] = _tool_calls(value)
        elif name == "reasoning":
            reasoning = [reasoning_payload(value)]
        elif name == "reasoning_blocks":
            if reasoning:
                raise BothReasoningFieldsError("set reasoning (one block) or reasoning_blocks, not both")
            reasoning = [reasoning_payload(block) for block in value]
        else:  # role, name, tool_call_id, is_anchored, truncation_marker, synthetic, is_error, input_kind
            payload[name] = value
    return reasoning, payload


def message_payload(message: records_pb2.ChatMessage) -> dict[str, Any]:
    """The ``message`` record payload of a ChatMessage (reasoning not included)."""
    return _message_fields(message)[1]


def split_reasoning(message: records_pb2.ChatMessage) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Writer half of the reasoning duality: (reasoning payloads in order, message payload).

    The list is empty without reasoning, one payload for ``reasoning``, every
    block of ``reasoning_blocks`` otherwise. Only an assistant message may carry
    reasoning; :func:`append_payloads` rejects it on any other role. Raises
    BothReasoningFieldsError when both fields are set.
    """
    return _message_fields(message)


_ChatMessage = records_pb2.ChatMessage


def _text(value: Any) -> str:
    return value if type(value) is str else str(value)


def _set_reasoning(target: records_pb2.Reasoning, block: Mapping[str, Any]) -> None:
    target.content = _text(block.get("content", ""))
    if "signature" in block:
        target.signature = _text(block["signature"])
    if "encrypted" in block:
        target.encrypted = _text(block["encrypted"])


def _set_parts(message: records_pb2.ChatMessage, content: list[Any]) -> None:
    message.parts.SetInParent()  # an empty list is still "parts", not "no content"
    try:
        message.parts.extend(content)
    except (TypeError, ValueError):  # a value a Struct cannot hold, from another writer
        message.parts.Clear()
        message.text = orjson.dumps(content).decode()


def _add_tool_call(message: records_pb2.ChatMessage, call: Mapping[str, Any]) -> None:
    added = message.tool_calls.add()
    added.id = _text(call.get("id", ""))
    added.type = _text(call.get("type", "function"))
    function = call.get("function")
    function = function if isinstance(function, dict) else {}
    added.function.SetInParent()
    added.function.name = _text(function.get("name", ""))
    added.function.arguments = _text(function.get("arguments", ""))


def fill_message(message: records_pb2.ChatMessage, payload: Mapping[str, Any]) -> None:
    """Set ``message`` (empty) from a rebuilt message payload, reasoning attached.

    One pass over the payload's keys (the hot path of every replay). Values of an
    unexpected type (another writer's) are kept as text; content parts a Struct
    cannot hold become the JSON text of the list.
    """
    for key, value in payload.items():
        if key == "content":
            if isinstance(value, str):
                message.text = value
            elif isinstance(value, list):
                _set_parts(message, value)
            elif value is not None:
                message.text = str(value)
        elif key == "role":
            message.role = _text(value)
        elif key == "tool_calls":
            if isinstance(value, list):
                for call in value:
                    if isinstance(call, dict):
                        _add_tool_call(message, call)
        elif key == "tool_call_id":
            message.tool_call_id = _text(value)
        elif key == "reasoning":
            if isinstance(value, dict):
                _set_reasoning(message.reasoning, value)
            elif isinstance(value, list):
                blocks = [block for block in value if isinstance(block, dict)]
                if len(blocks) == 1:
                    _set_reasoning(message.reasoning, blocks[0])
                else:
                    for block in blocks:
                        _set_reasoning(message.reasoning_blocks.add(), block)
        elif key == "name":
            message.name = _text(value)
        elif key == "truncation_marker":
            message.truncation_marker = _text(value)
        elif key == "is_anchored":
            if value:
                message.is_anchored = True
        elif key == "synthetic" and value:
            message.synthetic = True
        elif key == "is_error" and value:
            message.is_error = True


def message_from_payload(payload: Mapping[str, Any]) -> records_pb2.ChatMessage:
    """A rebuilt message payload (reasoning attached) as a ChatMessage (see :func:`fill_message`)."""
    message = _ChatMessage()
    fill_message(message, payload)
    return message


def append_payloads(record: writer_pb2.AppendRecord, index: int) -> list[tuple[RecordType, dict[str, Any]]]:
    """The record payloads one AppendRecord becomes, in file order.

    A message with N reasoning blocks becomes N ``reasoning`` records then the
    ``message`` (docs/spec.md §2.5 and its §1 addition). Raises RecordValidationError
    (naming ``index``) for an empty record, reasoning on a non-assistant message,
    both ``reasoning`` and ``reasoning_blocks`` set, an event without a kind or of
    a kind the writer reserves (shared.records.RESERVED_EVENT_KINDS), or a NaN / infinite number in an opaque object (content parts, turn context,
    event body).
    """
    try:
        return _append_payloads(record, index)
    except NonFiniteNumberError as exc:
        raise RecordValidationError(index, str(record.WhichOneof("record")), str(exc)) from exc
    except BothReasoningFieldsError as exc:
        where = "message" if record.HasField("message") else "compacted.replacement_history"
        raise RecordValidationError(index, f"{where}.reasoning_blocks", str(exc)) from exc


def _append_payloads(record: writer_pb2.AppendRecord, index: int) -> list[tuple[RecordType, dict[str, Any]]]:
    fields = record.ListFields()  # one call: the oneof's single set field (hot path)
    if not fields:
        raise RecordValidationError(
            index,
            "record",
            "is empty: set one of message, reasoning, compacted, turn_context, event, retraction",
        )
    descriptor, value = fields[0]
    kind = descriptor.name
    if kind == "message":
        reasoning, payload = _message_fields(value)
        if payload.get("synthetic"):
            raise RecordValidationError(
                index, "message.synthetic", "only the writer marks an output synthetic (on Resume)"
            )
        if not reasoning:
            return [(_MESSAGE, payload)]
        if payload["role"] != "assistant":
            raise RecordValidationError(index, "message.reasoning", "only assistant messages carry reasoning")
        return [*((_REASONING, block) for block in reasoning), (_MESSAGE, payload)]
    if kind == "reasoning":
        return [(_REASONING, reasoning_payload(record.reasoning))]
    if kind == "compacted":
        compacted: dict[str, Any] = {"summary": record.compacted.summary}
        if record.compacted.HasField("replacement_history"):
            history = []
            for message in record.compacted.replacement_history.messages:
                reasoning, payload = split_reasoning(message)
                if reasoning:  # inline: the replacement is the model's view as is
                    payload["reasoning"] = attached_reasoning(reasoning)
                history.append(payload)
            compacted["replacement_history"] = history
        return [(_COMPACTED, compacted)]
    if kind == "turn_context":
        return [(_TURN_CONTEXT, struct_to_python(record.turn_context))]
    if kind == "event":
        if not record.event.kind:
            raise RecordValidationError(index, "event.kind", "is empty")
        if record.event.kind in RESERVED_EVENT_KINDS:
            raise RecordValidationError(
                index,
                "event.kind",
                f"{record.event.kind!r} is reserved for the writer's own records"
                f" ({', '.join(sorted(RESERVED_EVENT_KINDS))}); name the event something else",
            )
        return [(_EVENT, {"kind": record.event.kind, "body": struct_to_python(record.event.body)})]
    if kind == "retraction":
        return [(_RETRACTION, retraction_payload(record.retraction))]
    if kind == "message_json":
        return message_json_payloads(value, index)
    raise RecordValidationError(index, "record", f"has an unknown kind {kind!r}")


#: Keys a message JSON object may carry (AppendRecord.message_json), in the order the payload is stored.
_JSON_MESSAGE_KEYS = (
    "role",
    "content",
    "name",
    "tool_calls",
    "tool_call_id",
    "is_anchored",
    "truncation_marker",
    "is_error",
    "input_kind",
)
_JSON_TEXT_KEYS = frozenset({"role", "name", "tool_call_id", "truncation_marker", "input_kind"})
_JSON_FLAG_KEYS = frozenset({"is_anchored", "is_error"})
_REASONING_KEYS = frozenset({"content", "signature", "encrypted"})
#: Floats from this magnitude on may be integers beyond 64 bits that orjson read as floats.
_HUGE = float(2**63)
_INT_RANGE = (-(2**63), 2**64 - 1)


def _has_huge_float(value: Any) -> bool:
    """Whether a parsed JSON value holds a float of magnitude 2**63 or more (what orjson makes of
    an integer beyond 64 bits, and of a few real floats)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if type(item) is float and abs(item) >= _HUGE:
            return True
        if type(item) is dict:
            stack.extend(item.values())
        elif type(item) is list:
            stack.extend(item)
    return False


def _json_value_error(value: Any) -> str | None:
    """Why a parsed JSON value cannot be stored exactly (an integer beyond 64 bits), or None."""
    stack = [value]
    while stack:
        item = stack.pop()
        if type(item) is int and not _INT_RANGE[0] <= item <= _INT_RANGE[1]:
            return f"the integer {clip(item, 30)} is beyond 64 bits and would not be stored exactly; send it as a string"
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None


def _json_text(payload: dict[str, Any], key: str, index: int) -> None:
    if key in payload and type(payload[key]) is not str:
        raise RecordValidationError(index, f"message.{key}", "must be a string")


def message_json_payloads(raw: bytes, index: int) -> list[tuple[RecordType, dict[str, Any]]]:
    """The payloads an AppendRecord's ``message_json`` becomes: what a ``message`` of the same
    content gives (reasoning records, then the message), from one JSON object in the ledger's
    message shape (shared.records), with JSON numbers kept as JSON has them (a float stays a
    float) and the key order of content parts kept.

    Raises RecordValidationError (naming ``index`` and ``message.<field>``): not one JSON
    object, a key the shape does not have (``synthetic`` is the writer's), a field of the
    wrong type, reasoning on a non-assistant message, an integer beyond 64 bits.
    """
    try:
        message = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise RecordValidationError(index, "message_json", f"is not valid JSON ({exc})") from exc
    if type(message) is not dict:
        raise RecordValidationError(index, "message_json", "must be one JSON object (a message)")
    if type(message.get("content")) is list and _has_huge_float(message["content"]):
        # orjson reads an integer beyond 64 bits as a float: read this one exactly to tell.
        problem = _json_value_error(json.loads(raw))
        if problem is not None:
            raise RecordValidationError(index, "message_json", problem)
    unknown = sorted(key for key in message if key not in _JSON_MESSAGE_KEYS and key != "reasoning")
    if "synthetic" in unknown:
        raise RecordValidationError(
            index, "message.synthetic", "only the writer marks an output synthetic (on Resume)"
        )
    if unknown:
        raise RecordValidationError(
            index,
            "message_json",
            f"has keys a message does not have: {clip(unknown)}; allowed:"
            f" {', '.join((*_JSON_MESSAGE_KEYS, 'reasoning'))}",
        )
    payload: dict[str, Any] = {}
    for key in _JSON_MESSAGE_KEYS:
        if key not in message:
            continue
        value = message[key]
        if key in _JSON_FLAG_KEYS:
            if type(value) is not bool:
                raise RecordValidationError(index, f"message.{key}", "must be true or false")
            if value:
                payload[key] = True
            continue
        payload[key] = value
        if key in _JSON_TEXT_KEYS:
            _json_text(payload, key, index)
    payload.setdefault("role", "")
    content = payload.get("content")
    if "content" in payload and type(content) is not str and type(content) is not list:
        raise RecordValidationError(index, "message.content", "must be a string or a list of parts")
    if "tool_calls" in payload:
        payload["tool_calls"] = _json_tool_calls(payload["tool_calls"], index)
        if not payload["tool_calls"]:
            del payload["tool_calls"]
    reasoning = _json_reasoning(message.get("reasoning"), index)
    if not reasoning:
        return [(_MESSAGE, payload)]
    if payload["role"] != "assistant":
        raise RecordValidationError(index, "message.reasoning", "only assistant messages carry reasoning")
    return [*((_REASONING, block) for block in reasoning), (_MESSAGE, payload)]


def _json_tool_calls(calls: Any, index: int) -> list[dict[str, Any]]:
    if type(calls) is not list:
        raise RecordValidationError(index, "message.tool_calls", "must be a list")
    normalized = []
    for position, call in enumerate(calls):
        where = f"message.tool_calls[{position}]"
        function = call.get("function", {}) if type(call) is dict else None
        if (
            type(call) is not dict
            or not call.keys() <= {"id", "type", "function"}
            or type(function) is not dict
            or not function.keys() <= {"name", "arguments"}
            or any(
                type(value) is not str
                for value in (call.get("id", ""), call.get("type", ""), *function.values())
            )
        ):
            raise RecordValidationError(
                index, where, 'must be {"id", "type", "function": {"name", "arguments"}} with string values'
            )
        normalized.append(
            {
                "id": call.get("id", ""),
                "type": call.get("type") or "function",
                "function": {"name": function.get("name", ""), "arguments": function.get("arguments", "")},
            }
        )
    return normalized


def _json_reasoning(reasoning: Any, index: int) -> list[dict[str, Any]]:
    if reasoning is None:
        return []
    blocks = [reasoning] if type(reasoning) is dict else reasoning
    if type(blocks) is not list:
        raise RecordValidationError(index, "message.reasoning", "must be one block or a list of blocks")
    normalized = []
    for position, block in enumerate(blocks):
        if (
            type(block) is not dict
            or not block.keys() <= _REASONING_KEYS
            or any(type(value) is not str for value in block.values())
        ):
            raise RecordValidationError(
                index,
                f"message.reasoning[{position}]",
                'must be {"content", "signature"?, "encrypted"?} with string values',
            )
        normalized.append(
            {
                "content": block.get("content", ""),
                **{k: block[k] for k in ("signature", "encrypted") if k in block},
            }
        )
    return normalized


def retraction_payload(retraction: records_pb2.Retraction) -> dict[str, Any]:
    """The ``retraction`` record payload of a Retraction (shared.records; ``call_ids`` is the
    writer's to add)."""
    references = []
    for reference in retraction.messages:
        named: dict[str, Any] = {"seq": reference.seq}
        if reference.HasField("history_index"):
            named["index"] = reference.history_index
        references.append(named)
    payload: dict[str, Any] = {"messages": references}
    if retraction.reason:
        payload["reason"] = retraction.reason
    return payload


def stop_kind_to_proto(kind: str) -> records_pb2.StopKind:
    """The ``rollout.v1.StopKind`` value of a stop kind ("paused" -> STOP_KIND_PAUSED).

    Raises ValueError listing the declared kinds (:func:`shared.stop_kinds.stop_kind_named`)."""
    value: records_pb2.StopKind = records_pb2.StopKind.Value(
        "STOP_KIND_" + stop_kind_named(kind).value.upper()
    )
    return value


#: The StopKind values a request may name, as a refusal lists them ("STOP_KIND_COMPLETED (1), ...").
_DECLARED_PROTO_KINDS = ", ".join(
    f"{records_pb2.StopKind.Name(number)} ({number})"
    for number in (stop_kind_to_proto(kind) for kind in StopKind)
)


def stop_kind_from_proto(value: int) -> StopKind:
    """The stop kind a request names (docs/spec.md §1 vocabulary).

    Raises InvalidArgumentError (field ``stop_kind``) for UNSPECIFIED or an
    undeclared number, listing the declared values.
    """
    if value == records_pb2.STOP_KIND_UNSPECIFIED:
        raise InvalidArgumentError(
            "stop_kind", f"is unspecified; name why the run stopped: one of {_DECLARED_PROTO_KINDS}"
        )
    if value not in records_pb2.StopKind.values():
        raise InvalidArgumentError(
            "stop_kind", f"{value} is not a declared StopKind value: use one of {_DECLARED_PROTO_KINDS}"
        )
    return StopKind(records_pb2.StopKind.Name(value).removeprefix("STOP_KIND_").lower())


_ROLES_FROM_PROTO = {
    writer_pb2.SESSION_ROLE_UNSPECIFIED: None,
    writer_pb2.SESSION_ROLE_ROOT: SessionRole.ROOT,
    writer_pb2.SESSION_ROLE_CHILD: SessionRole.CHILD,
    writer_pb2.SESSION_ROLE_CHILD_WITHOUT_COORDINATES: SessionRole.CHILD_WITHOUT_COORDINATES,
}
_ROLES_TO_PROTO = {role: value for value, role in _ROLES_FROM_PROTO.items()}
_SPEC_FIELDS = tuple(field.name for field in dataclasses.fields(SessionSpec) if field.name != "role")


def session_spec(request: writer_pb2.CreateSessionRequest) -> SessionSpec:
    """The SessionSpec a CreateSessionRequest asks for (every field of shared.session_meta.SessionSpec).

    Raises InvalidArgumentError (field ``role``) for an undeclared role number.
    """
    if request.role not in _ROLES_FROM_PROTO:
        raise InvalidArgumentError("role", f"{request.role} is not a declared SessionRole value")
    return SessionSpec(
        role=_ROLES_FROM_PROTO[request.role], **{name: getattr(request, name) for name in _SPEC_FIELDS}
    )


def create_request(spec: SessionSpec) -> writer_pb2.CreateSessionRequest:
    """The CreateSessionRequest of a SessionSpec (the mirror of :func:`session_spec`)."""
    return writer_pb2.CreateSessionRequest(
        role=_ROLES_TO_PROTO[spec.role], **{name: getattr(spec, name) for name in _SPEC_FIELDS}
    )


def record_time(value: str, index: int) -> str:
    """An AppendRecord's ``ts`` in the ledger's form ("" stays "": the writer's clock).

    Raises RecordValidationError (field ``ts``) when it is not RFC 3339.
    """
    if not value:
        return ""
    try:
        return normalize_timestamp(value)
    except ValueError as exc:
        raise RecordValidationError(index, "ts", str(exc)) from exc


def round_to_proto(found: Round) -> reader_pb2.Round:
    """A :class:`shared.rounds.Round` as its message (ListRounds, GetRound)."""
    return reader_pb2.Round(
        round_id=found.round_id,
        number=found.number,
        status=found.status.value,
        status_reason=found.status_reason,
        start_seq=found.start_seq,
        end_seq=found.end_seq,
        trigger_seqs=found.trigger_seqs,
        question=found.question,
        started_at=found.started_at,
        ended_at=found.ended_at,
        duration_s=found.duration_s,
        tool_calls=found.tool_calls,
        tool_failures=found.tool_failures,
        input_tokens=found.input_tokens,
        output_tokens=found.output_tokens,
        tokens_estimated=found.tokens_estimated,
        model=found.model,
        effort=found.effort,
        inputs=[
            reader_pb2.RoundInput(seq=i.seq, kind=i.kind, question=i.question, options=i.options)
            for i in found.inputs
        ],
        segments=[
            reader_pb2.RoundSegment(first_seq=s.first_seq, last_seq=s.last_seq, answer_seq=s.answer_seq)
            for s in found.segments
        ],
        answer_seq=found.answer_seq,
        message_count=found.message_count,
        turn_id=found.turn_id,
    )


def round_from_proto(message: reader_pb2.Round) -> Round:
    """A Round message as a :class:`shared.rounds.Round` (the SDK's; file offsets are not sent: 0)."""
    return Round(
        round_id=message.round_id,
        number=message.number,
        start_seq=message.start_seq,
        end_seq=message.end_seq,
        start_offset=0,
        end_offset=0,
        status=RoundStatus(message.status),
        trigger_seqs=tuple(message.trigger_seqs),
        question=message.question,
        started_at=message.started_at,
        ended_at=message.ended_at,
        duration_s=message.duration_s,
        tool_calls=message.tool_calls,
        tool_failures=message.tool_failures,
        input_tokens=message.input_tokens,
        output_tokens=message.output_tokens,
        tokens_estimated=message.tokens_estimated,
        model=message.model,
        effort=message.effort,
        inputs=tuple(InteractiveInput(i.seq, i.kind, i.question, tuple(i.options)) for i in message.inputs),
        segments=tuple(Segment(s.first_seq, s.last_seq, s.answer_seq) for s in message.segments),
        answer_seq=message.answer_seq,
        message_count=message.message_count,
        turn_id=message.turn_id,
        status_reason=message.status_reason,
    )
