"""Records in and out: plain dicts in the ledger's chat shape, never protobuf.

A message is a dict in the OpenAI chat shape the ledger stores (docs/spec.md §1; the
payload of a ``message`` record, documented in ``shared/records.py``)::

    {"role": "assistant", "content": "On it.",
     "tool_calls": [{"id": "call_1", "type": "function",
                     "function": {"name": "grep", "arguments": "{\\"q\\": \\"x\\"}"}}],
     "reasoning": {"content": "look first", "encrypted": "..."}}

``reasoning`` is one block object, or a list of block objects when an assistant
turn has several (each becomes its own ``reasoning`` record, in order, written
just before the message; replay gives them back the same way). The other records
are typed: :class:`Event`, :class:`Compaction`, :class:`TurnContext`. The
helpers :func:`user`, :func:`assistant`, :func:`tool_call`, :func:`tool_result`,
:func:`system` and :func:`developer` build message dicts.

A message travels to the writer as its JSON (``AppendRecord.message_json``): numbers in
content parts stay as JSON has them (``1.0`` stays a float, integers up to 64 bits
exactly; a larger one is refused) and their keys keep their order. Replayed messages,
event bodies and turn contexts travel as ``google.protobuf.Struct``, whose numbers are
doubles: an integral number within ±2**53 comes back as an integer (``1.0`` as ``1``),
and a larger integer loses precision.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from rollout.v1 import records_pb2, writer_pb2
from shared.errors import RecordValidationError
from shared.records import attached_reasoning
from shared.titles import TITLE_EVENT, title_event_body
from shared.wire import message_from_payload, python_to_struct, split_reasoning

#: Keys a message dict may carry (``synthetic`` is written by the writer only: it refuses it).
MESSAGE_KEYS = frozenset(
    {
        "role",
        "content",
        "name",
        "tool_calls",
        "tool_call_id",
        "is_anchored",
        "truncation_marker",
        "reasoning",
        "synthetic",
        "is_error",
        "input_kind",
    }
)
_TOOL_CALL_KEYS = frozenset({"id", "type", "function"})
_FUNCTION_KEYS = frozenset({"name", "arguments"})
_REASONING_KEYS = frozenset({"content", "signature", "encrypted"})


@dataclass(frozen=True)
class Event:
    """An ``event`` record: not part of the message sequence (tool_start, token_count, ui, ...).
    ``body`` is an opaque JSON object."""

    kind: str
    body: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Compaction:
    """A ``compacted`` record (docs/spec.md §3): the model's view was replaced. Without
    ``replacement_history`` replay resets to one user message holding ``summary``; with it
    (even empty) replay resets to exactly those messages (message dicts)."""

    summary: str
    replacement_history: Sequence[Mapping[str, Any]] | None = None


@dataclass(frozen=True)
class TurnContext:
    """A ``turn_context`` record: an opaque object (model, cwd, policies, ...)."""

    context: Mapping[str, Any]


@dataclass(frozen=True)
class MessageRef:
    """Where a message of the rebuilt view came from: the ``seq`` of its message record, or of
    the compacted record whose replacement history holds it (``history_index``) or whose
    summary it is. :meth:`Session.recent_messages` gives each message's; a :class:`Retraction`
    names them."""

    seq: int
    history_index: int | None = None


@dataclass(frozen=True)
class Retraction:
    """A ``retraction`` record (docs/spec.md §3 addition): the named messages leave the model's view
    (an assistant message with its tool calls; a tool output leaves its call unanswered);
    nothing is rewritten. Send it with ``expected_next_seq`` (see :meth:`Session.append`) to
    apply it only to the view it was decided on."""

    messages: Sequence[MessageRef]
    reason: str = ""


@dataclass(frozen=True, slots=True)
class EncodedMessage:
    """A message given as the JSON ``AppendRecord.message_json`` carries (one object in the
    ledger's message shape, UTF-8), sent as is: the client neither parses nor checks it, the
    writer does (InvalidArgumentError naming ``records[i]``). For code that built the message
    itself, in a shape it knows the ledger stores (:func:`encoded_message`)."""

    json: bytes


#: Anything :meth:`Session.append` takes: a message dict or one of the typed records.
Record = Mapping[str, Any] | Event | Compaction | TurnContext | Retraction | EncodedMessage


def encoded_message(message: dict[str, Any]) -> EncodedMessage | dict[str, Any]:
    """``message`` (a dict this package built: string values, no reasoning, no number in its
    content) encoded once, as :class:`EncodedMessage`; the dict itself when orjson cannot encode
    it (a lone surrogate), so that :func:`message_json` refuses it naming the record."""
    try:
        return EncodedMessage(orjson.dumps(message))
    except TypeError:
        return message


def system(content: str) -> dict[str, Any]:
    """A system message dict."""
    return {"role": "system", "content": content}


def developer(content: str) -> dict[str, Any]:
    """A developer message dict."""
    return {"role": "developer", "content": content}


def title(text: str) -> Event:
    """A title record (shared.titles): the session's title is the last non-empty one appended;
    earlier ones stay in the session and stay searchable."""
    return Event(TITLE_EVENT, title_event_body(text))


def user(
    content: str | list[Any], *, name: str | None = None, input_kind: str | None = None
) -> dict[str, Any]:
    """A user message dict; ``content`` is text or a list of content parts (kept as given).
    ``input_kind`` places it in its round (shared.rounds): ``trigger``, ``question_answer``,
    ``supplement`` or ``timeout``; None lets the documented rule decide."""
    message: dict[str, Any] = {"role": "user", "content": content}
    if name is not None:
        message["name"] = name
    if input_kind is not None:
        message["input_kind"] = input_kind
    return message


def tool_call(call_id: str, name: str, arguments: str = "{}", *, type: str = "function") -> dict[str, Any]:
    """One tool call of an assistant message; ``arguments`` is kept byte for byte (usually JSON).
    ``type`` is ``function`` or ``custom`` (free-form input such as a patch)."""
    return {"id": call_id, "type": type, "function": {"name": name, "arguments": arguments}}


def assistant(
    content: str | list[Any] | None = None,
    *,
    tool_calls: Sequence[Mapping[str, Any]] = (),
    reasoning: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """An assistant message dict: text or parts, tool calls (see :func:`tool_call`) and
    reasoning (one block ``{"content", "signature"?, "encrypted"?}`` or a list of blocks)."""
    message: dict[str, Any] = {"role": "assistant"}
    if content is not None:
        message["content"] = content
    if tool_calls:
        message["tool_calls"] = [dict(call) for call in tool_calls]
    if reasoning is not None:
        message["reasoning"] = (
            dict(reasoning) if isinstance(reasoning, Mapping) else [dict(b) for b in reasoning]
        )
    return message


def tool_result(call_id: str, content: str | list[Any], *, is_error: bool = False) -> dict[str, Any]:
    """A tool message answering ``call_id``; ``is_error`` marks an output the tool reported as failed."""
    message: dict[str, Any] = {"role": "tool", "tool_call_id": call_id, "content": content}
    if is_error:
        message["is_error"] = True
    return message


def _check_keys(where: str, value: object, allowed: frozenset[str]) -> Mapping[str, Any]:
    if type(value) is not dict and not isinstance(value, Mapping):  # dict first: no ABC check
        raise TypeError(f"{where} must be a dict, not {type(value).__name__}")
    unknown = sorted(str(key) for key in value if key not in allowed)
    if unknown:
        raise ValueError(
            f"{where} has keys the ledger does not store: {unknown} (allowed: {sorted(allowed)})"
        )
    return value


def check_message(message: object, where: str) -> Mapping[str, Any]:
    """Refuse, before anything is sent, a message dict the conversion would change silently:
    unknown keys (they would be dropped), a role or content of the wrong type, malformed
    tool calls or reasoning blocks. Raises TypeError or ValueError naming ``where``."""
    checked = _check_keys(where, message, MESSAGE_KEYS)
    if not isinstance(checked.get("role"), str):
        raise TypeError(f"{where}.role must be a string such as 'user' or 'assistant'")
    content = checked.get("content")
    if content is not None and not isinstance(content, str | list):
        raise TypeError(f"{where}.content must be text or a list of parts, not {type(content).__name__}")
    for position, call in enumerate(checked.get("tool_calls") or ()):
        call = _check_keys(f"{where}.tool_calls[{position}]", call, _TOOL_CALL_KEYS)
        _check_keys(f"{where}.tool_calls[{position}].function", call.get("function", {}), _FUNCTION_KEYS)
    reasoning = checked.get("reasoning")
    blocks = [reasoning] if isinstance(reasoning, Mapping) else reasoning or []
    if not isinstance(blocks, list):
        raise TypeError(f"{where}.reasoning must be one block (a dict) or a list of blocks")
    for position, block in enumerate(blocks):
        _check_keys(f"{where}.reasoning[{position}]", block, _REASONING_KEYS)
    return checked


def _non_finite(value: Any) -> float | None:
    """A NaN or infinity inside ``value`` (JSON has none), or None."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is str:  # most values: no ABC check for them
            continue
        if type(item) is float and not math.isfinite(item):
            return item
        if kind is dict or isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return None


def message_json(message: Mapping[str, Any], index: int) -> bytes:
    """A message dict as the JSON ``AppendRecord.message_json`` carries (checked by
    :func:`check_message` first). Raises TypeError / ValueError naming ``records[index]``, and
    RecordValidationError (index and field) for what the writer would refuse: reasoning on a
    message that is not an assistant's, ``synthetic``, a NaN, a value JSON cannot hold."""
    checked = check_message(message, f"records[{index}]")
    if checked.get("reasoning") is not None and checked["role"] != "assistant":
        raise RecordValidationError(index, "message.reasoning", "only assistant messages carry reasoning")
    if "synthetic" in checked:
        raise RecordValidationError(
            index, "message.synthetic", "only the writer marks an output synthetic (on Resume)"
        )
    if type(checked.get("content")) is list:
        bad = _non_finite(checked["content"])
        if bad is not None:
            raise RecordValidationError(
                index, "message.content", f"{bad} cannot be stored: JSON has no NaN or infinity"
            )
    try:
        return orjson.dumps(checked)
    except TypeError as exc:  # a lone surrogate, an integer beyond 64 bits
        raise RecordValidationError(index, "message_json", f"cannot be stored as JSON: {exc}") from exc


def record_lines(record: Record) -> int:
    """How many lines (seqs) a record becomes, as the writer counts them: a message with N
    reasoning blocks is N + 1 (docs/spec.md §2.5), any other record 1."""
    if isinstance(record, EncodedMessage):
        # A message without reasoning is one line; "reasoning" in a JSON string is escaped.
        if b'"reasoning"' not in record.json:
            return 1
        try:
            message = orjson.loads(record.json)
        except orjson.JSONDecodeError:
            return 1  # the writer refuses it
        return record_lines(message) if type(message) is dict else 1
    if isinstance(record, Event | Compaction | TurnContext | Retraction):
        return 1
    reasoning = record.get("reasoning")
    if reasoning is None:
        return 1
    return 2 if isinstance(reasoning, Mapping) else len(reasoning) + 1


def message_to_proto(message: Mapping[str, Any], where: str = "message") -> records_pb2.ChatMessage:
    """A message dict as ``rollout.v1.ChatMessage`` (checked by :func:`check_message` first)."""
    return message_from_payload(dict(check_message(message, where)))


def append_record(record: Record, index: int) -> writer_pb2.AppendRecord:
    """One :data:`Record` as an ``AppendRecord``. Raises TypeError / ValueError naming ``records[index]``."""
    if isinstance(record, EncodedMessage):
        return writer_pb2.AppendRecord(message_json=record.json)
    where = f"records[{index}]"
    if isinstance(record, Event):
        if not record.kind:
            raise ValueError(f"{where}: an event needs a kind")
        proto = writer_pb2.AppendRecord()  # filled in place: a Struct copied into it costs as much again
        proto.event.kind = record.kind
        python_to_struct(record.body, into=proto.event.body)
        return proto
    if isinstance(record, Compaction):
        compacted = records_pb2.Compacted(summary=record.summary)
        if record.replacement_history is not None:
            compacted.replacement_history.SetInParent()  # present even when empty: reset to nothing
            for position, message in enumerate(record.replacement_history):
                compacted.replacement_history.messages.append(
                    message_to_proto(message, f"{where}.replacement_history[{position}]")
                )
        return writer_pb2.AppendRecord(compacted=compacted)
    if isinstance(record, TurnContext):
        proto = writer_pb2.AppendRecord()
        python_to_struct(record.context, into=proto.turn_context)
        return proto
    if isinstance(record, Retraction):
        if not record.messages:
            raise ValueError(f"{where}: a retraction names at least one message")
        references = [
            records_pb2.MessageRef(seq=reference.seq, history_index=reference.history_index)
            for reference in record.messages
        ]
        return writer_pb2.AppendRecord(
            retraction=records_pb2.Retraction(messages=references, reason=record.reason)
        )
    return writer_pb2.AppendRecord(message_json=message_json(record, index))


def message_to_dict(message: records_pb2.ChatMessage) -> dict[str, Any]:
    """A replayed ``ChatMessage`` as the ledger's message dict, reasoning attached
    (one block as an object, several as a list)."""
    blocks, payload = split_reasoning(message)
    if blocks:
        payload["reasoning"] = attached_reasoning(blocks)
    return payload
