"""The JSONL line format of a rollout file (docs/spec.md §1) and record validation.

A session file holds one record per line: UTF-8, ``\\n``-terminated, compact JSON
written by orjson, no BOM. Every line has these keys, in this order::

    {"v":1,"seq":17,"ts":"2026-11-30T10:15:30.123456Z","type":"message","payload":{...},"crc32c":2143289344}

(``crc32c``, the line check, is an addition to docs/spec.md §1; lines written before it have
the first five keys only, and stay readable: see "The line check" below. The first line
of a request sent with a request id also carries ``request_id`` and ``request_fp`` before
the check: see "Request marks" below.)

* ``seq`` starts at 0 (the ``session_meta`` line) and grows by one per record;
  the writer assigns it and never reuses one. A gap or repeat is corruption.
* ``ts`` is UTC, RFC 3339 with microseconds, assigned by the writer (a fork keeps
  the source's timestamps); an importer may give a record its source's time
  (``AppendRecord.ts``, a documented addition), so ``ts`` may go backwards where
  the source's clock did: the seq is the order.
* ``type`` is a :class:`RecordType`; ``payload`` its object:

  ==================  ==========================================================
  session_meta        session_id, agent_name?, parent_session_id?, delegation_id?,
                      role?, tenant, model?, cwd?, originator?, client_version?,
                      forked_from? {session_id, seq, digest}, created_at
                      (see shared.session_meta)
  message             role, content? (string or list of parts), name?,
                      tool_calls? [{id, type, function: {name, arguments}}],
                      tool_call_id?, is_anchored?, truncation_marker?,
                      synthetic? (true on an output written by Resume),
                      is_error? (true on a tool output that reported failure),
                      input_kind? (a user message's place in its round, shared.rounds)
  reasoning           content, signature?, encrypted?  (attaches to the next
                      assistant message; several in a row all attach to it)
  compacted           summary, replacement_history? [message payloads]
  turn_context        opaque object
  event               {"kind": str, "body": opaque object}
  agent_checkpoint    digest, message_count, covers_seq, stop_kind
  stop                stop_kind, reason, error? {message, category}, checkpoint_seq
  retraction          messages [{seq, index?}], reason?, call_ids (see below)
  ==================  ==========================================================

Documented additions to the docs/spec.md §1 table (readers must accept them):

* a tool call's ``type`` may be ``"custom"`` besides ``"function"``: a free-form
  tool input (e.g. a patch) kept verbatim in ``function.arguments``;
* an ``event`` keeps its opaque object under ``body`` so that it can never
  collide with ``kind``;
* a ``message`` may carry ``"synthetic": true``: a tool output the writer wrote on
  Resume for a call left without one (not part of the digest);
* ``session_meta.role`` says whether the session is a ``root``, a ``child`` or a
  ``child_without_coordinates`` (files without it keep the older reading);
* a tool ``message`` may carry ``"is_error": true``: the tool reported a failure
  (an Anthropic ``tool_result`` with ``is_error``); not part of the digest;
* an ``event`` of kind ``resumed`` / ``forked`` records a Resume / Fork, and one of kind
  ``round_interrupted`` (body ``{"round_id"}``) the round a crash left pending, written by
  the Resume that follows (shared.rounds);
* several ``reasoning`` records before one assistant message all attach to it,
  in file order (Responses-API agents write more than one per turn, each with
  its own encrypted content). In a rebuilt message, and inline in a
  ``compacted`` replacement history, ``"reasoning"`` is the block object when
  there is one (exactly the older shape, so older checkpoints still verify)
  and a list of block objects when there are two or more;
* a user ``message`` may carry ``"input_kind"``: ``trigger``, ``question_answer``,
  ``supplement`` or ``timeout`` (:class:`InputKind`; what shared.rounds reads; not part
  of the digest);
* optional fields are omitted when absent (never written as ``null``), and
  ``is_anchored`` / ``synthetic`` / ``is_error`` are written only when true.

A ``retraction`` (an addition to docs/spec.md §1 and §3) takes messages out of the model's view
by reference, without rewriting anything: each entry of ``messages`` names the line a
message of the view came from, ``{"seq": s}`` for a ``message`` record (or a
``compacted`` record without replacement history: its summary message) and
``{"seq": s, "index": i}`` for entry ``i`` of a ``compacted`` record's replacement
history. The rebuild removes the message that line put in the view (a tool output that
replaced an earlier one in place is referenced by its own seq); a reference to a message
no longer in the view is a note, not damage. An assistant message taken out takes its
tool calls with it (an output may not answer them afterwards), and a tool output taken
out leaves its call unanswered again. ``call_ids`` lists the tool call ids of the
retracted messages; the writer fills it in (a client never sets it), so that the
writer's view of open calls is kept from this line alone. Agent frameworks use it to
pop the last item of a conversation at a cost that does not grow with the history.

Unknown ``type`` values (a newer writer) are preserved by readers and reported as
degraded, never dropped and never a crash.

The line check (an addition to docs/spec.md §1, as etcd's WAL and Kafka check every record):
every line the writer writes ends with a ``crc32c`` key, the last of the object::

    {"v":1,"seq":0,...,"payload":{...},"crc32c":<unsigned 32-bit integer>}

Its value is the CRC32C (Castagnoli, as in iSCSI and ext4) of the line's bytes before
``,"crc32c":``, i.e. of the line without its last ``}`` and the check. A reader finds
the last ``,"crc32c":`` of the line (the key is the record's last, so any key of that
name inside the payload comes before it), computes the CRC32C of the bytes before it
and compares: a line whose check fails changed after it was written, and is reported
as damage with its line number and byte offset (:func:`line_check`). Nothing is
re-serialized, on either side: the writer splices the key in before the closing brace
(:func:`seal_line`). Lines without the key (written before the check existed, or by
another tool) are read as before and counted as unchecked, never as damage; a fork
copies its source's lines byte for byte, checks included.

Each ``agent_checkpoint`` written since also carries ``lines_digest``: the digest of
the lines between the first (the ``session_meta``, which a fork replaces) and it, each
taken by its line check (the CRC32C of an unchecked line
is computed over its whole bytes), see :mod:`shared.digest`. Readers compare it when
they meet the checkpoint, so a line changed, removed or added anywhere before a
checkpoint (a line without a check included, or a line whose check was recomputed)
makes that checkpoint fail, in every later reading. Older checkpoints have no
``lines_digest`` and are verified by their message digest alone (docs/spec.md §4).

LangGraph checkpoints (an addition, issue 25; written by ``rollout_client.langgraph``): a
LangGraph thread is one session (its ``session_key`` is the thread id), and its checkpoints,
pending writes and removals are ``event`` records of these kinds. Every serialized value is
what the serializer LangGraph hands the saver returned, ``{"type": t, "data": base64}``
(:func:`typed_value` / :func:`value_of_typed`: bytes kept exactly); a channel version is the
JSON text of LangGraph's version (``"1"``, ``"\"0000…0002.0.53\""``), so its type survives.

* ``langgraph.checkpoint``: ``{"ns", "id", "parent"?, "checkpoint": typed (the checkpoint
  without its channel values), "metadata": typed, "versions": {channel: version},
  "blobs": [blob]}``; each ``blob`` is a channel value new at this checkpoint, stored once
  per (ns, channel, version): ``{"channel", "version", "type", "data"}`` (the whole value),
  ``{"channel", "version", "empty": true}`` (the channel has no value), or a delta
  ``{"channel", "version", "base": version, "keep": n, "items": [typed]}``: the first ``n``
  items of the list stored at ``base`` (same ns and channel), then ``items``, each item
  serialized alone. A blob may carry ``"view": true``: its new messages were also written
  as ``message`` records (or, when the list is not an extension of the one shown, as a
  ``compacted`` record with the whole list as replacement history), so that replay shows
  the thread's conversation.
* ``langgraph.writes``: ``{"ns", "checkpoint_id", "task_id", "task_path", "writes":
  [{"idx", "channel", "type", "data"}]}``: pending writes of one task. A write whose
  ``(task_id, idx)`` the checkpoint already holds is ignored when ``idx >= 0``, replaces it
  when ``idx < 0`` (LangGraph's special channels: error, interrupt, ...).
* ``langgraph.removed``: ``{"checkpoints": [[ns, id]]}``: checkpoints (and their pending
  writes) taken out of the thread's listing (``prune``, ``delete_for_runs``); their blobs stay, so no delta loses
  its base. The bytes stay in the file until the session is deleted.

An ``event`` whose ``kind`` is in :data:`RESERVED_EVENT_KINDS` is the writer's own
record (Resume, Fork, a round's interruption); clients may not append one.

Request marks (an addition to docs/spec.md §1, for docs/spec.md §2.4): the first line an Append request
writes, when the request carried a ``request_id``, also holds that id and a fingerprint
of the request's records, between the payload and the line check::

    {"v":1,"seq":17,"ts":"…","type":"message","payload":{…},"request_id":"9f2c…","request_fp":"3b0e…","crc32c":…}

``request_fp`` is 32 hex digits (writer_service.idempotency.fingerprint). The mark lets
the writer answer "did request R land, and where" from the file itself, after a restart
or once its memory of recent ids has moved on, so a retry is never written twice. Readers
ignore both keys; a fork copies them with the lines (harmless: a request id is looked up
per session). Lines without a mark are the rule: every other line of a request, and
every line written by CreateSession, Stop, Resume, Fork or an import.
"""

from __future__ import annotations

import base64
import enum
import re
from collections.abc import Container, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import crc32c
import orjson

from shared.errors import QUOTE_CHARS as QUOTE_CHARS
from shared.errors import RecordValidationError
from shared.errors import clip as clip

LINE_FORMAT_VERSION = 1

#: The default largest stored line (bytes): real tool outputs (logs, base64 images) reach tens
#: of MB. A larger record is refused, never truncated; ``--max-record-bytes`` changes it.
DEFAULT_MAX_RECORD_BYTES = 64 * 1024 * 1024

#: Roles a ``message`` record may carry.
MESSAGE_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})

#: Tool call types a message may carry (``custom`` is a documented addition).
TOOL_CALL_TYPES = frozenset({"function", "custom"})


class InputKind(enum.StrEnum):
    """What a user message is to its round (``"input_kind"`` of its payload; shared.rounds)."""

    TRIGGER = "trigger"
    QUESTION_ANSWER = "question_answer"
    SUPPLEMENT = "supplement"
    TIMEOUT = "timeout"


#: Input kinds a user message may carry.
INPUT_KINDS = frozenset(kind.value for kind in InputKind)


class RecordType(enum.StrEnum):
    """The ``type`` of a record line (docs/spec.md §1)."""

    SESSION_META = "session_meta"
    MESSAGE = "message"
    REASONING = "reasoning"
    COMPACTED = "compacted"
    TURN_CONTEXT = "turn_context"
    EVENT = "event"
    AGENT_CHECKPOINT = "agent_checkpoint"
    STOP = "stop"
    RETRACTION = "retraction"


#: Event kind of the writer's Resume record (it may accept damage: the rebuild reads it).
RESUMED_EVENT = "resumed"
#: Event kind of the first record a Fork writes after the copied lines.
FORKED_EVENT = "forked"
#: Event kind of the writer's record that a crash left a round pending (shared.rounds): written by
#: Resume of a session without a stop record, before its ``resumed`` event.
ROUND_INTERRUPTED_EVENT = "round_interrupted"
#: Event kinds the writer uses for its own records; an Append or an import that names one is
#: refused (INVALID_ARGUMENT), so they cannot be forged.
RESERVED_EVENT_KINDS = frozenset({RESUMED_EVENT, FORKED_EVENT, ROUND_INTERRUPTED_EVENT})

#: Event kinds of LangGraph checkpoints, pending writes and removals (see the module doc).
LANGGRAPH_CHECKPOINT_EVENT = "langgraph.checkpoint"
LANGGRAPH_WRITES_EVENT = "langgraph.writes"
LANGGRAPH_REMOVED_EVENT = "langgraph.removed"
LANGGRAPH_EVENT_KINDS = frozenset(
    {LANGGRAPH_CHECKPOINT_EVENT, LANGGRAPH_WRITES_EVENT, LANGGRAPH_REMOVED_EVENT}
)


def typed_value(kind: str, data: bytes) -> dict[str, str]:
    """A serializer's ``(type, bytes)`` as a record keeps it: ``{"type", "data": base64}``."""
    return {"type": kind, "data": base64.b64encode(data).decode("ascii")}


def value_of_typed(stored: Mapping[str, Any]) -> tuple[str, bytes]:
    """The ``(type, bytes)`` a :func:`typed_value` object holds, bytes exactly as serialized.
    Raises ValueError (binascii.Error) for data that is not base64, KeyError for a missing key."""
    return str(stored["type"]), base64.b64decode(stored["data"], validate=True)


#: (request id, fingerprint of the request's records as hex): the mark on a request's first line.
RequestMark = tuple[str, str]
#: Keys of a request mark (see "Request marks" in the module doc).
REQUEST_ID_KEY = "request_id"
REQUEST_FINGERPRINT_KEY = "request_fp"

#: The key of the line check (the last key of every line the writer writes).
LINE_CHECK_KEY = "crc32c"
#: What precedes the check's value in a line: the check covers every byte before it.
LINE_CHECK_MARK = b',"crc32c":'

#: Record types a client may send through Append; the others are written by
#: CreateSession (session_meta) and Stop (agent_checkpoint, stop) only.
APPENDABLE_TYPES = frozenset(
    {
        RecordType.MESSAGE,
        RecordType.REASONING,
        RecordType.COMPACTED,
        RecordType.TURN_CONTEXT,
        RecordType.EVENT,
        RecordType.RETRACTION,
    }
)


def format_timestamp(moment: datetime) -> str:
    """Return ``moment`` as RFC 3339 UTC with microseconds: ``2026-11-30T10:15:30.123456Z``.

    A naive datetime is taken as UTC.
    """
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    # The year by hand: strftime's %Y does not zero-pad years before 1000.
    return f"{moment.year:04d}-" + moment.strftime("%m-%dT%H:%M:%S.%fZ")


#: RFC 3339 ``date-time`` (section 5.6), nothing else: no ISO week or ordinal dates, no basic
#: form, no missing offset. ``T``/``Z`` may be lowercase and ``T`` a space, as the RFC allows.
_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?(?:([Zz])|([+-])(\d{2}):(\d{2}))"
)


def _parse_rfc3339(text: str) -> tuple[datetime, bool]:
    """(the instant as an aware UTC datetime, whether it is a leap second); ValueError with a reason."""
    if not isinstance(text, str):
        raise ValueError(f"a timestamp must be text, not {type(text).__name__}")
    match = _RFC3339.fullmatch(text)
    if match is None:
        raise ValueError(
            f"{clip(text)!r} is not an RFC 3339 date-time (YYYY-MM-DDTHH:MM:SS[.fraction] then Z or ±HH:MM)"
        )
    year, month, day, hour, minute, second = (int(match[index]) for index in range(1, 7))
    fraction = (match[7] or ".0")[1:]
    microsecond = int(fraction[:6].ljust(6, "0"))
    leap = second == 60
    try:
        offset = timedelta(0)
        if match[8] is None:
            hours, minutes = int(match[10]), int(match[11])
            if hours > 23 or minutes > 59:
                raise ValueError(f"offset {match[9]}{match[10]}:{match[11]} is out of range")
            offset = timedelta(hours=hours, minutes=minutes) * (1 if match[9] == "+" else -1)
        local = datetime(year, month, day, hour, minute, 59 if leap else second, microsecond, UTC)
        moment = local - offset
    except (ValueError, OverflowError) as exc:
        raise ValueError(f"{clip(text)!r} is not a valid date-time: {exc}") from exc
    if leap and (moment.hour, moment.minute) != (23, 59):
        raise ValueError(f"{clip(text)!r}: a leap second can only be the last second of a UTC day")
    return moment, leap


def parse_timestamp(text: str) -> datetime:
    """Parse an RFC 3339 date-time (``Z`` or an offset) into an aware UTC datetime.

    A leap second (``…T23:59:60Z``) reads as the last microsecond before it
    (``datetime`` has no second 60; :func:`normalize_timestamp` keeps it).
    Raises ValueError naming what is wrong: not RFC 3339 (ISO week dates, the
    basic form and a missing offset are refused), or out of range.
    """
    moment, leap = _parse_rfc3339(text)
    return moment.replace(microsecond=999_999) if leap else moment


def normalize_timestamp(text: str) -> str:
    """An RFC 3339 date-time in the ledger's ``ts`` form: UTC, ``Z``, microseconds.

    ``2026-11-30T11:15:30.5+01:00`` -> ``2026-11-30T10:15:30.500000Z``; a leap second
    stays second 60. Digits past the microsecond are cut. Raises ValueError as
    :func:`parse_timestamp` does.
    """
    moment, leap = _parse_rfc3339(text)
    formatted = format_timestamp(moment)
    return formatted[:17] + "60" + formatted[19:] if leap else formatted


def now_timestamp() -> str:
    """The current UTC time in the record ``ts`` format."""
    return format_timestamp(datetime.now(UTC))


def encode_line(
    seq: int, ts: str, record_type: str, payload: dict[str, Any], request: RequestMark | None = None
) -> bytes:
    """Encode one record as its JSONL line, line check and ``\\n`` included (see the module doc).

    ``request`` marks the first line of an Append request that carried a request id:
    (request id, fingerprint of its records), written as ``request_id`` and
    ``request_fp`` after the payload (see "Request marks" in the module doc).
    Raises TypeError (from orjson) when the payload holds a string that is not
    valid UTF-8 (a lone surrogate) or a value JSON cannot hold.
    """
    record = {"v": LINE_FORMAT_VERSION, "seq": seq, "ts": ts, "type": record_type, "payload": payload}
    if request is not None:
        record[REQUEST_ID_KEY], record[REQUEST_FINGERPRINT_KEY] = request
    return seal_line(orjson.dumps(record))


def request_mark_of(record: Mapping[str, Any]) -> RequestMark | None:
    """The (request id, fingerprint) a parsed line carries as its request mark, or None
    (a line that is not the first of a request with an id, or a malformed mark)."""
    request_id, fingerprint = record.get(REQUEST_ID_KEY), record.get(REQUEST_FINGERPRINT_KEY)
    if type(request_id) is str and type(fingerprint) is str:
        return request_id, fingerprint
    return None


def seal_line(record: bytes) -> bytes:
    """The line of one compact JSON record object (bytes, no newline): the ``crc32c`` key
    spliced in before its closing brace, then ``\\n``. The record is not re-serialized:
    the check is the CRC32C of ``record`` without its last byte (measured fastest as a
    slice and one concatenation: ~0.4 µs for a 1 KB line, orjson's own dump is as much)."""
    covered = record[:-1]
    return covered + b',"crc32c":%d}\n' % crc32c.crc32c(covered)


def line_check(raw: bytes, record: Mapping[str, Any]) -> bool | None:
    """Whether the line ``raw`` (without its ``\\n``), parsed as ``record``, passes its check.

    None when the line carries no check (an older line: unchecked, not damaged);
    False when its bytes changed since the check was computed (or the check is not
    an unsigned integer, or not the last key). The rebuild's loop applies the same
    rule inline (shared.rebuild), at the same cost: one search from the line's end
    and one CRC32C (~0.2 µs for 1 KB with the CPU's instruction).
    """
    stored = record.get(LINE_CHECK_KEY)
    if stored is None:
        return None
    return type(stored) is int and crc32c.crc32c(raw[: raw.rfind(LINE_CHECK_MARK)]) == stored


#: The start of every line the writer writes, up to its seq.
_SEQ_PREFIX = re.compile(rb'\{"v":\d+,"seq":(\d+),')


def line_seq(raw: bytes) -> int | None:
    """The seq at the start of a line as the writer writes it (``{"v":1,"seq":17,...``), read
    without parsing the line; None for a line that does not start so (damaged, another tool's).
    For searches through a file (the writer's request and retraction lookups, the reader's
    watch bisection); :func:`record_of_line` decides what the line holds."""
    prefix = _SEQ_PREFIX.match(raw)
    return int(prefix.group(1)) if prefix is not None else None


def record_of_line(raw: bytes) -> dict[str, Any] | None:
    """The record one complete line holds (``raw`` without its ``\\n``), or None when it holds none.

    A record is a JSON object with an integer ``seq``, a string ``type`` and an object
    ``payload``; NUL bytes before it (space a crash left allocated) are skipped. Anything
    else (not JSON, ``{}``, a seq that is not an integer) is no record. Whether the line
    still passes its check is another question (:func:`line_check`): a record whose check
    fails is a damaged record, reported as such. Every reader of lines decides by this
    rule: the writer (reopening a session, forks) and the reader (tails, watches), and the
    rebuild's loop inline (shared.rebuild, its hot path; a test holds the two equal).
    """
    try:
        record = orjson.loads(raw)
    except orjson.JSONDecodeError:
        stripped = raw.lstrip(b"\x00")
        if len(stripped) == len(raw):
            return None
        try:
            record = orjson.loads(stripped)
        except orjson.JSONDecodeError:
            return None
    if (
        type(record) is not dict
        or type(record.get("seq")) is not int
        or type(record.get("type")) is not str
        or type(record.get("payload")) is not dict
    ):
        return None
    return record


def parse_record(raw: bytes) -> dict[str, Any] | None:
    """The record of a line exactly as the writer leaves it, or None: a record
    (:func:`record_of_line`) with no NUL bytes before it whose line check holds (or which
    has none: an older line). What makes a file's end clean (shared.tail.record_fits):
    tail repair moves any other last line aside.
    """
    if raw[:1] == b"\x00":
        return None
    record = record_of_line(raw)
    if record is None or line_check(raw, record) is False:
        return None
    return record


def non_object_part(content: list[Any]) -> int | None:
    """The position of the first content part of ``content`` that is not a JSON object, or None.

    Each part of a message's content is an object (protos/rollout/v1/records.proto,
    ``ChatMessage.parts``): the writer refuses a message with any other part
    (:func:`validate_message`) and importers keep such content as its JSON text.
    """
    for position, part in enumerate(content):
        if type(part) is not dict:
            return position
    return None


def _json_kind(value: object) -> str:
    """What a JSON value is, in words ("a string", "a list", "null", ...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


def validate_message(
    payload: dict[str, Any],
    index: int,
    known_call_ids: Container[str],
    field_prefix: str = "message",
) -> None:
    """Check a ``message`` payload before it is written (docs/spec.md §2.3).

    ``known_call_ids`` holds every tool call id already in the session or earlier
    in the same request. Raises :class:`RecordValidationError` naming ``index`` and
    the field: unknown role, a content part that is not an object, a tool message
    without ``tool_call_id`` or answering no known call, a tool call without id or
    name, an unknown tool call type.
    """
    role = payload.get("role")
    if role not in MESSAGE_ROLES:
        raise RecordValidationError(
            index, f"{field_prefix}.role", f"must be one of {sorted(MESSAGE_ROLES)}, got {clip(role)!r}"
        )
    content = payload.get("content")
    if type(content) is list:
        position = non_object_part(content)
        if position is not None:
            part = content[position]
            raise RecordValidationError(
                index,
                f"{field_prefix}.content[{position}]",
                f'a content part is an object (such as {{"type": "text", "text": ...}}),'
                f" not {_json_kind(part)} ({clip(part)!r}); send text as the message's text",
            )
    calls = payload.get("tool_calls")
    for position, call in enumerate(calls or ()):
        where = f"{field_prefix}.tool_calls[{position}]"
        if role != "assistant":
            raise RecordValidationError(
                index, where, f"only assistant messages carry tool calls, not {clip(role)!r}"
            )
        if not call.get("id"):
            raise RecordValidationError(index, f"{where}.id", "is empty")
        if call.get("type") not in TOOL_CALL_TYPES:
            raise RecordValidationError(
                index,
                f"{where}.type",
                f"must be one of {sorted(TOOL_CALL_TYPES)}, got {clip(call.get('type'))!r}",
            )
        if not call.get("function", {}).get("name"):
            raise RecordValidationError(index, f"{where}.function.name", "is empty")
    if payload.get("is_error") and role != "tool":
        raise RecordValidationError(
            index, f"{field_prefix}.is_error", f"only tool outputs carry is_error, not {clip(role)!r}"
        )
    input_kind = payload.get("input_kind")
    if input_kind is not None:
        if role != "user":
            raise RecordValidationError(
                index,
                f"{field_prefix}.input_kind",
                f"only user messages carry an input kind, not {clip(role)!r}",
            )
        if input_kind not in INPUT_KINDS:
            raise RecordValidationError(
                index,
                f"{field_prefix}.input_kind",
                f"must be one of {sorted(INPUT_KINDS)}, got {clip(input_kind)!r}",
            )
    if role == "tool":
        call_id = payload.get("tool_call_id")
        if not call_id:
            raise RecordValidationError(
                index, f"{field_prefix}.tool_call_id", "a tool message needs tool_call_id"
            )
        if call_id not in known_call_ids:
            raise RecordValidationError(
                index,
                f"{field_prefix}.tool_call_id",
                f"answers no tool call in this session's current view or earlier in this request ({clip(call_id)!r});"
                " an output with no call would poison every later replay",
            )


#: Bits of a message origin (:func:`message_origin`) that hold the replacement-history index.
ORIGIN_INDEX_BITS = 20
#: Largest replacement-history index a retraction may name.
MAX_HISTORY_INDEX = (1 << ORIGIN_INDEX_BITS) - 2


def message_origin(seq: int, index: int | None = None) -> int:
    """The line a message of the rebuilt view came from, as one integer: a ``message`` record
    (or a summary-only ``compacted`` record) at ``seq``, or entry ``index`` of the replacement
    history of the ``compacted`` record at ``seq``. What a retraction reference names."""
    return (seq << ORIGIN_INDEX_BITS) | (0 if index is None else index + 1)


def origin_reference(origin: int) -> dict[str, int]:
    """The retraction reference (``{"seq"}`` or ``{"seq", "index"}``) of a :func:`message_origin`."""
    seq, index = origin >> ORIGIN_INDEX_BITS, origin & ((1 << ORIGIN_INDEX_BITS) - 1)
    return {"seq": seq} if index == 0 else {"seq": seq, "index": index - 1}


def reference_origin(reference: Any) -> int | None:
    """The :func:`message_origin` a retraction reference names, or None for a malformed one."""
    if not isinstance(reference, dict):
        return None
    seq, index = reference.get("seq"), reference.get("index")
    if (
        type(seq) is not int
        or seq < 1
        or (index is not None and (type(index) is not int or not 0 <= index <= MAX_HISTORY_INDEX))
    ):
        return None
    return message_origin(seq, index)


def call_ids_of(payload: dict[str, Any]) -> list[str]:
    """The tool call ids an assistant ``message`` payload requests (empty for others)."""
    calls = payload.get("tool_calls")
    return [call["id"] for call in calls] if calls else []


def attached_reasoning(blocks: list[dict[str, Any]]) -> dict[str, Any] | list[dict[str, Any]]:
    """The ``"reasoning"`` value of a rebuilt message: the block itself when there is one
    (the shape, and so the digest, of a single reasoning never changes), else the list."""
    return blocks[0] if len(blocks) == 1 else blocks


def reasoning_blocks_of(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every reasoning block of a rebuilt message payload, in order ([] when it has none)."""
    reasoning = message.get("reasoning")
    if isinstance(reasoning, dict):
        return [reasoning]
    if isinstance(reasoning, list):
        return [block for block in reasoning if isinstance(block, dict)]
    return []
