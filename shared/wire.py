"""Conversions from the rollout.v1 protobuf messages to record payloads, and the stop-kind values.

The writer's half of the wire: an AppendRecord becomes the payloads written to
the file (:func:`append_payloads`). The reasoning duality of SPEC §2.5 is one
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
import math
from collections.abc import Mapping
from typing import Any

import orjson
from google.protobuf import struct_pb2

from rollout.v1 import records_pb2, writer_pb2
from shared.errors import InvalidArgumentError, RecordValidationError
from shared.records import RESERVED_EVENT_KINDS, RecordType, attached_reasoning, normalize_timestamp
from shared.session_meta import SessionRole, SessionSpec
from shared.stop_kinds import StopKind

_INTEGRAL_LIMIT = 2**53


class NonFiniteNumberError(ValueError):
    """An opaque object holds NaN or an infinity, which JSON (and so the line format) cannot."""


# Plain strings (not the StrEnum members) so that orjson encodes them on its fast path.
_MESSAGE: Any = RecordType.MESSAGE.value
_REASONING: Any = RecordType.REASONING.value
_COMPACTED: Any = RecordType.COMPACTED.value
_TURN_CONTEXT: Any = RecordType.TURN_CONTEXT.value
_EVENT: Any = RecordType.EVENT.value


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


def python_to_struct(obj: dict[str, Any]) -> struct_pb2.Struct:
    """A plain dict as ``google.protobuf.Struct`` (numbers become doubles)."""
    struct = struct_pb2.Struct()
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
    truncation_marker, reasoning, synthetic, reasoning_blocks, is_error): the hot path of
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
        else:  # role, name, tool_call_id, is_anchored, truncation_marker, synthetic, is_error
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
    ``message`` (SPEC §2.5 and its §1 addition). Raises RecordValidationError
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
            index, "record", "is empty: set one of message, reasoning, compacted, turn_context, event"
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
    raise RecordValidationError(index, "record", f"has an unknown kind {kind!r}")


def stop_kind_to_proto(kind: str) -> records_pb2.StopKind:
    """The ``rollout.v1.StopKind`` value of a stop kind ("paused" -> STOP_KIND_PAUSED); ValueError if unknown."""
    value: records_pb2.StopKind = records_pb2.StopKind.Value("STOP_KIND_" + StopKind(kind).value.upper())
    return value


def stop_kind_from_proto(value: int) -> StopKind:
    """The stop kind a request names (SPEC §1 vocabulary).

    Raises InvalidArgumentError (field ``stop_kind``) for UNSPECIFIED or an
    undeclared number.
    """
    if value == records_pb2.STOP_KIND_UNSPECIFIED:
        raise InvalidArgumentError("stop_kind", "is unspecified; name why the run stopped")
    if value not in records_pb2.StopKind.values():
        raise InvalidArgumentError("stop_kind", f"{value} is not a declared StopKind value")
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
