"""Rounds: a session seen as question-and-answer rounds (issue 24; the round store of the design notes).

A **round** is one external trigger and everything until its final answer: the unit a
user sees, a UI redraws and a memory cites. Rounds are derived state: these pure rules
over a session's records (seq order) decide them, and every side (the reader's
ListRounds and GetRound, tests, tools) calls :class:`RoundTracker`; nothing about a
round is stored except the writer's interruption record.

Boundaries (in this order):

1. **An explicit input kind** on a user message (``"input_kind"`` in its payload,
   ``ChatMessage.input_kind`` on Append) decides: ``trigger`` starts a round (a round
   still pending is then interrupted: the next trigger cut it off); ``question_answer``
   (the answer to the model's own question, with that question and its options kept),
   ``supplement`` (a mid-round addition) and ``timeout`` (an unanswered question's
   timeout) belong to the current round and never split it (with no round yet, such
   an input starts one). An input reopens a round that had answered until its next answer.
2. **Turn events** of agents that record their own turns (Codex's ``task_started``,
   ``task_complete``, ``turn_aborted``, kept by the importer as event kinds): a start
   opens a round (a round already open with no output yet adopts it: the context
   messages an agent writes before its turn starts belong to that turn), a
   completion completes it, an abort interrupts it. Inside a turn, user messages
   never split it.
3. **Without either**, a user message starts a round when there is no round, or the
   current one is settled (:func:`is_settled`) or was closed by a turn event; while
   the current round has produced no output yet it is part of the trigger (agents
   write injected context before the typed prompt: the question is the last of
   them); otherwise (the round has no final answer yet) it is a ``supplement``.

Status: ``pending`` (no final answer yet), ``complete`` (a final assistant message
with no open tool call, or the turn's completion event), ``interrupted`` (aborted, cut
off by the next trigger, stopped by the user (a user message starting with
:data:`USER_INTERRUPTION_MARK`, which belongs to the round it stops and starts none),
recorded by the writer (:data:`ROUND_INTERRUPTED_EVENT`), or
pending while its session is stopped: a Resume after a pause makes it pending again,
and it stays one round). ``error`` is reserved and never written. :func:`is_settled`
is the one "is this round over" rule.

A round spanning a pause and a resume stays one round: its assistant output is kept
as **segments** (a new one after each interactive input and each Resume), in order,
the last segment's last assistant text being the answer.

Metrics per round: start and end times (the ``ts`` of its first and last records),
duration in seconds, tool calls and tool failures (``is_error`` outputs), input and
output tokens as per-round deltas of usage events: Codex ``token_count`` events carry
cumulative counters (``info.total_token_usage``: deltas against the last counters seen
in the session, a counter that goes down counts from 0), a ``usage`` event
(``{"input_tokens", "output_tokens"}``) adds per call, and Claude Code's per-message
usage (``claude.record`` events: ``message.usage`` of each API message ``message.id``,
repeated on every record of that message with its output growing: the last one seen
counts, once per message; input is ``input_tokens`` plus both cache counters, what the
model read); a round with none of these gets the bytes/4 estimate of its lines
(``tokens_estimated``). Model and effort are
those of the last ``turn_context`` in effect in the round.

Round ids (:func:`round_id`) are UUIDv8 from BLAKE2b of the session that first wrote
the trigger and its seq: global, stable, and a fork (``session_meta.forked_from``)
keeps its source's ids for the rounds whose trigger is at or before its point, through
sources live or deleted (shared.lineage: the one walk of a fork's lineage).

Reading a file: :func:`track_file` feeds a tracker a session file's committed lines in
chunks (the reader's round cache and the writer's Resume both read through it), and
:func:`pending_round_of` is the writer's whole read for :func:`round_to_close`.
"""

from __future__ import annotations

import enum
import hashlib
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from shared.committed_lines import CommittedLines
from shared.lineage import Lineage as Lineage
from shared.lineage import forked_from
from shared.rebuild import collector_paused
from shared.records import (
    FORKED_EVENT,
    RESUMED_EVENT,
    ROUND_INTERRUPTED_EVENT,
    InputKind,
    RecordType,
    parse_timestamp,
)
from shared.records import INPUT_KINDS as INPUT_KINDS


class RoundStatus(enum.StrEnum):
    """A round's status (see the module doc). ``ERROR`` is reserved: no rule produces it."""

    PENDING = "pending"
    COMPLETE = "complete"
    INTERRUPTED = "interrupted"
    ERROR = "error"


def is_settled(status: RoundStatus | str) -> bool:
    """Whether a round is over: complete or interrupted. The one rule every reader of a round's
    status uses ("is it part of the history", "may a host close it"); never compare to
    ``complete`` alone (an interrupted round is a stopped turn, not a draft)."""
    return status in (RoundStatus.COMPLETE, RoundStatus.INTERRUPTED)


#: Turn events of agents that record their own turns (Codex's kinds, kept by its importer).
TURN_STARTED_EVENTS = frozenset({"task_started"})
TURN_COMPLETE_EVENTS = frozenset({"task_complete"})
TURN_ABORTED_EVENTS = frozenset({"turn_aborted"})
#: Cumulative usage counters (Codex: ``body.info.total_token_usage``).
CUMULATIVE_USAGE_EVENT = "token_count"
#: Per-call usage (``body.input_tokens``, ``body.output_tokens``), added up per round.
USAGE_EVENT = "usage"
#: Claude Code's fields without a mapping, kept by its importer before each record: an
#: assistant record's ``body.message`` holds the API message's ``id`` and ``usage``.
CLAUDE_RECORD_EVENT = "claude.record"
#: Claude Code's text for a turn the user stopped (``[Request interrupted by user]``, and
#: ``... for tool use]``): a user message that starts with it interrupts the current round.
USER_INTERRUPTION_MARK = "[Request interrupted by user"
#: The writer's record that a round was interrupted (Resume of a crashed session with a
#: pending round; shared.records reserves the kind); ``body.round_id`` and ``body.start_seq``
#: name it. Re-exported here, where the rules that read it live.
ROUND_INTERRUPTED_EVENT = ROUND_INTERRUPTED_EVENT
_ROUND_DOMAIN = b"rollout.round.v1"
#: The input counters of a Claude API usage object, added up: what the model read.
_CLAUDE_INPUT_COUNTERS = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


def round_id(session_id: str, seq: int) -> str:
    """The id of the round whose trigger ``session_id`` first wrote at ``seq``: a lowercase UUID
    (version 8, from a BLAKE2b hash of both), the same in every service, client and fork."""
    digest = hashlib.blake2b(
        session_id.encode("utf-8", "surrogatepass") + b"\x00" + str(seq).encode(),
        digest_size=16,
        person=_ROUND_DOMAIN,
    ).digest()
    raw = bytearray(digest)
    raw[6] = (raw[6] & 0x0F) | 0x80  # version 8
    raw[8] = (raw[8] & 0x3F) | 0x80  # RFC 9562 variant
    return str(uuid.UUID(bytes=bytes(raw)))


@dataclass(frozen=True, slots=True)
class InteractiveInput:
    """A user message that belongs to a round without splitting it."""

    seq: int
    kind: str
    question: str = ""
    options: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Segment:
    """A run of assistant output between interactive inputs or Resumes: first and last seq of its
    assistant messages, and the seq of its last one with text (-1: none)."""

    first_seq: int
    last_seq: int
    answer_seq: int = -1


@dataclass(frozen=True, slots=True)
class Round:
    """One round as the rules see it now (a snapshot; see the module doc for each field's rule).

    Seqs are the session's; ``end_seq`` the last record attributed to it; offsets are bytes of
    the session file (``end_offset`` exclusive) when the records came with them. Times are
    the records' ``ts`` (RFC 3339); ``duration_s`` seconds (0 when a ts is unreadable).
    """

    round_id: str
    number: int
    start_seq: int
    end_seq: int
    start_offset: int
    end_offset: int
    status: RoundStatus
    trigger_seqs: tuple[int, ...]
    question: str
    started_at: str
    ended_at: str
    duration_s: float
    tool_calls: int
    tool_failures: int
    input_tokens: int
    output_tokens: int
    tokens_estimated: bool
    model: str
    effort: str
    inputs: tuple[InteractiveInput, ...]
    segments: tuple[Segment, ...]
    answer_seq: int
    message_count: int
    turn_id: str = ""
    status_reason: str = ""


def message_text(payload: Mapping[str, Any]) -> str:
    """A message payload's text: its string content, or the ``text`` of its parts joined."""
    content = payload.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(part.get("text", "")) for part in content if isinstance(part, dict) and part.get("text")
        )
    return ""


def _duration(start: str, end: str) -> float:
    try:
        return max(0.0, (parse_timestamp(end) - parse_timestamp(start)).total_seconds())
    except ValueError:
        return 0.0


def _cumulative(body: Any) -> tuple[int, int] | None:
    info = body.get("info") if isinstance(body, dict) else None
    total = info.get("total_token_usage") if isinstance(info, dict) else None
    if not isinstance(total, dict):
        return None
    used_in, used_out = total.get("input_tokens"), total.get("output_tokens")
    return (used_in, used_out) if type(used_in) is int and type(used_out) is int else None


@dataclass(slots=True)
class _Open:
    """The mutable state of the current round."""

    round_id: str
    number: int
    start_seq: int
    start_offset: int
    started_at: str
    trigger_seqs: list[int] = field(default_factory=list)
    question: str = ""
    end_seq: int = 0
    end_offset: int = 0
    ended_at: str = ""
    status: RoundStatus = RoundStatus.PENDING
    status_reason: str = ""
    by_turn: bool = False
    turn_closed: bool = False
    turn_id: str = ""
    output: bool = False
    answered: bool = False
    open_calls: set[str] = field(default_factory=set)
    tool_calls: int = 0
    tool_failures: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    usage_seen: bool = False
    message_usage: dict[str, tuple[int, int]] = field(default_factory=dict)
    estimated_in: int = 0
    estimated_out: int = 0
    model: str = ""
    effort: str = ""
    inputs: list[InteractiveInput] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)
    segment_open: bool = False
    message_count: int = 0

    def freeze(self, status: RoundStatus, reason: str) -> Round:
        estimated = not self.usage_seen
        return Round(
            self.round_id,
            self.number,
            self.start_seq,
            self.end_seq,
            self.start_offset,
            self.end_offset,
            status,
            tuple(self.trigger_seqs),
            self.question,
            self.started_at,
            self.ended_at,
            _duration(self.started_at, self.ended_at),
            self.tool_calls,
            self.tool_failures,
            self.estimated_in if estimated else self.input_tokens,
            self.estimated_out if estimated else self.output_tokens,
            estimated,
            self.model,
            self.effort,
            tuple(self.inputs),
            tuple(self.segments),
            next((segment.answer_seq for segment in reversed(self.segments) if segment.answer_seq >= 0), -1),
            self.message_count,
            self.turn_id,
            reason,
        )


_MESSAGE = RecordType.MESSAGE.value
_REASONING = RecordType.REASONING.value
_EVENT = RecordType.EVENT.value
_TURN_CONTEXT = RecordType.TURN_CONTEXT.value
_STOP = RecordType.STOP.value
_SESSION_META = RecordType.SESSION_META.value
_CHECKPOINT = RecordType.AGENT_CHECKPOINT.value


class RoundTracker:
    """The round rules applied record by record (seq order); :meth:`rounds` answers at any point
    and :meth:`add` may go on after it (the reader extends one tracker as a file grows).

    ``lineage`` names who first wrote each seq (round ids); when None, the session's own
    ``session_meta`` record (its id and ``forked_from``) sets a one-level lineage. With
    ``keep_done`` False the settled rounds are counted, not kept (memory that does not grow
    with the session): :meth:`rounds` then holds the current round only, enough for
    :func:`round_to_close`.
    """

    def __init__(self, lineage: Lineage | None = None, keep_done: bool = True) -> None:
        self.lineage = lineage
        self.keep_done = keep_done
        self.settled = 0
        self.done: list[Round] = []
        self.current: _Open | None = None
        self.stopped = False
        self.last_seq = -1
        self.cumulative: tuple[int, int] | None = None
        self.model = ""
        self.effort = ""

    # -- boundaries --------------------------------------------------------------------------

    def _start(self, seq: int, ts: str, offset: int, reason: str) -> _Open:
        self._close_current(RoundStatus.INTERRUPTED, reason)
        lineage = self.lineage or Lineage("")
        opened = _Open(
            round_id(lineage.owner(seq), seq),
            self.settled + 1,
            seq,
            offset,
            ts,
            end_seq=seq,
            end_offset=offset,
            ended_at=ts,
            model=self.model,
            effort=self.effort,
        )
        self.current = opened
        return opened

    def _close_current(self, pending_becomes: RoundStatus, reason: str) -> None:
        current = self.current
        if current is None:
            return
        status, why = self._status_of(current, stopped=False)
        if status is RoundStatus.PENDING:
            status, why = pending_becomes, reason
        self.settled += 1
        if self.keep_done:
            self.done.append(current.freeze(status, why))
        self.current = None

    @staticmethod
    def _status_of(current: _Open, stopped: bool) -> tuple[RoundStatus, str]:
        if current.status is not RoundStatus.PENDING:
            return current.status, current.status_reason
        if current.answered and not current.open_calls and not current.by_turn:
            return RoundStatus.COMPLETE, "a final assistant message with no open tool call"
        if stopped:
            return RoundStatus.INTERRUPTED, "pending when its session stopped"
        return RoundStatus.PENDING, ""

    def _input(self, seq: int, kind: str, payload: Mapping[str, Any]) -> None:
        current = self.current
        assert current is not None
        options = payload.get("options")
        current.inputs.append(
            InteractiveInput(
                seq,
                kind,
                str(payload.get("question") or ""),
                tuple(str(option) for option in options) if isinstance(options, list) else (),
            )
        )
        current.segment_open = False
        current.answered = False

    def _user(self, seq: int, ts: str, offset: int, payload: Mapping[str, Any]) -> None:
        kind = payload.get("input_kind")
        current = self.current
        if current is not None and message_text(payload).lstrip().startswith(USER_INTERRUPTION_MARK):
            if self._status_of(current, stopped=False)[0] is RoundStatus.PENDING:
                current.status, current.status_reason = RoundStatus.INTERRUPTED, "stopped by the user"
            current.turn_closed = True
            return
        if kind == InputKind.TRIGGER or (kind in INPUT_KINDS and current is None):
            self._trigger(self._start(seq, ts, offset, "cut off by the next trigger"), seq, payload)
            return
        if kind in INPUT_KINDS:
            assert current is not None
            self._input(seq, str(kind), payload)
            return
        # No explicit kind: rule 2 (inside a turn), then rule 3.
        if current is None or current.turn_closed:
            self._trigger(self._start(seq, ts, offset, "cut off by the next trigger"), seq, payload)
        elif not current.output:
            self._trigger(current, seq, payload)
        elif current.by_turn:
            self._input(seq, InputKind.SUPPLEMENT, payload)
        elif is_settled(self._status_of(current, stopped=False)[0]):
            self._trigger(self._start(seq, ts, offset, "cut off by the next trigger"), seq, payload)
        else:
            self._input(seq, InputKind.SUPPLEMENT, payload)

    @staticmethod
    def _trigger(current: _Open, seq: int, payload: Mapping[str, Any]) -> None:
        current.trigger_seqs.append(seq)
        text = message_text(payload).strip()
        if text:
            current.question = text

    def _turn_event(self, seq: int, ts: str, offset: int, kind: str, body: Any) -> None:
        turn_id = body.get("turn_id") if isinstance(body, dict) else None
        turn_id = turn_id if isinstance(turn_id, str) else ""
        current = self.current
        if kind in TURN_STARTED_EVENTS:
            if current is not None and not current.output and not current.by_turn and not current.turn_closed:
                opened = current  # context written before the turn started belongs to it
            else:
                opened = self._start(seq, ts, offset, "cut off by the next turn")
            opened.by_turn, opened.turn_id = True, turn_id
            return
        if current is None or current.turn_closed:
            return
        current.turn_closed = True
        if kind in TURN_COMPLETE_EVENTS:
            current.status, current.status_reason = RoundStatus.COMPLETE, f"the agent's {kind} event"
        else:
            current.status, current.status_reason = RoundStatus.INTERRUPTED, f"the agent's {kind} event"

    # -- records -----------------------------------------------------------------------------

    def add(
        self, seq: int, ts: str, record_type: str, payload: Mapping[str, Any], offset: int = 0, size: int = 0
    ) -> None:
        """Apply one record: its seq, ``ts``, type and payload, and where its line starts in the
        file and how many bytes it has (offsets and estimates; 0 when unknown)."""
        self.last_seq = seq
        if record_type == _SESSION_META:
            if self.lineage is None and isinstance(payload.get("session_id"), str):
                source = forked_from(payload)
                self.lineage = Lineage(payload["session_id"], (source,) if source else ())
            return
        if record_type in (_STOP, _CHECKPOINT):
            # A Stop writes its checkpoint, then its stop record: a trailing checkpoint is a
            # stopped session too (shared.tail.stop_of_tail reads it so).
            self.stopped = True
            return
        if record_type == _MESSAGE and payload.get("role") == "user":
            self.stopped = False
            self._user(seq, ts, offset, payload)
        elif record_type == _EVENT:
            kind = payload.get("kind")
            body = payload.get("body")
            if kind == RESUMED_EVENT:
                self.stopped = False
                if self.current is not None:
                    self.current.segment_open = False
                return  # bookkeeping of the session, no work of a round: it ends no round later
            if kind == FORKED_EVENT:
                return  # a fork's own first event: the source's rounds it copied end where they did
            elif kind in TURN_STARTED_EVENTS or kind in TURN_COMPLETE_EVENTS or kind in TURN_ABORTED_EVENTS:
                self._turn_event(seq, ts, offset, str(kind), body)
            elif kind == ROUND_INTERRUPTED_EVENT:
                current = self.current
                if current is not None and current.status is RoundStatus.PENDING:
                    current.status = RoundStatus.INTERRUPTED
                    current.status_reason = "recorded interrupted on Resume after a crash"
                    current.turn_closed = True
            elif kind == CUMULATIVE_USAGE_EVENT:
                counters = _cumulative(body)
                if counters is not None:
                    before = self.cumulative or (0, 0)
                    self.cumulative = counters
                    if self.current is not None:
                        delta_in = counters[0] - before[0] if counters[0] >= before[0] else counters[0]
                        delta_out = counters[1] - before[1] if counters[1] >= before[1] else counters[1]
                        self.current.input_tokens += delta_in
                        self.current.output_tokens += delta_out
                        self.current.usage_seen = True
            elif kind == CLAUDE_RECORD_EVENT and self.current is not None:
                self._message_usage(self.current, body)
            elif kind == USAGE_EVENT and self.current is not None and isinstance(body, dict):
                used_in, used_out = body.get("input_tokens", 0), body.get("output_tokens", 0)
                self.current.input_tokens += used_in if type(used_in) is int else 0
                self.current.output_tokens += used_out if type(used_out) is int else 0
                self.current.usage_seen = True
        elif record_type == _TURN_CONTEXT:
            model, effort = payload.get("model"), payload.get("effort")
            self.model = model if isinstance(model, str) else self.model
            self.effort = effort if isinstance(effort, str) else self.effort
            if self.current is not None:
                self.current.model, self.current.effort = self.model, self.effort
        current = self.current
        if current is None:
            return
        current.end_seq, current.end_offset = seq, offset + size
        if ts:
            current.ended_at = ts
        if record_type == _MESSAGE:
            current.message_count += 1
            role = payload.get("role")
            if role == "assistant":
                self._assistant(current, seq, payload, size)
            elif role == "tool":
                current.output = True
                call_id = payload.get("tool_call_id")
                current.open_calls.discard(call_id if isinstance(call_id, str) else "")
                current.answered = False
                if payload.get("is_error"):
                    current.tool_failures += 1
                current.estimated_in += size // 4
            else:
                current.estimated_in += size // 4
        elif record_type == _REASONING:
            current.output = True
            current.estimated_out += size // 4

    @staticmethod
    def _message_usage(current: _Open, body: Any) -> None:
        """Claude Code's usage of one API message (a ``claude.record`` body): the last one seen
        for its id counts, once."""
        message = body.get("message") if isinstance(body, dict) else None
        usage = message.get("usage") if isinstance(message, dict) else None
        if not isinstance(usage, dict):
            return
        message_id = message.get("id") if isinstance(message, dict) else None
        counts = [usage.get(name, 0) for name in _CLAUDE_INPUT_COUNTERS]
        used_out = usage.get("output_tokens", 0)
        used_in = sum(count for count in counts if type(count) is int)
        used_out = used_out if type(used_out) is int else 0
        key = message_id if isinstance(message_id, str) else f"#{len(current.message_usage)}"
        before_in, before_out = current.message_usage.get(key, (0, 0))
        current.message_usage[key] = (used_in, used_out)
        current.input_tokens += used_in - before_in
        current.output_tokens += used_out - before_out
        current.usage_seen = True

    @staticmethod
    def _assistant(current: _Open, seq: int, payload: Mapping[str, Any], size: int) -> None:
        current.output = True
        current.estimated_out += size // 4
        calls = payload.get("tool_calls")
        call_ids = (
            [call.get("id") for call in calls if isinstance(call, dict)] if isinstance(calls, list) else []
        )
        current.tool_calls += len(call_ids)
        current.open_calls.update(call_id for call_id in call_ids if isinstance(call_id, str))
        current.answered = not call_ids
        has_text = bool(message_text(payload).strip())
        if current.segment_open and current.segments:
            last = current.segments[-1]
            current.segments[-1] = replace(
                last, last_seq=seq, answer_seq=seq if has_text else last.answer_seq
            )
        else:
            current.segments.append(Segment(seq, seq, seq if has_text else -1))
            current.segment_open = True

    def add_lines(self, lines: Iterable[bytes], offset: int = 0) -> int:
        """Apply complete lines of a session file (without their ``\\n``) starting at byte
        ``offset``; returns the offset after them. A line that holds no record (damage, which
        the rebuild reports) is skipped."""
        loads, decode_error = orjson.loads, orjson.JSONDecodeError
        for raw in lines:
            start = offset
            offset += len(raw) + 1
            try:
                record = loads(raw)
            except decode_error:
                continue
            if type(record) is not dict:
                continue
            seq, record_type, payload, ts = (
                record.get("seq"),
                record.get("type"),
                record.get("payload"),
                record.get("ts"),
            )
            if type(seq) is int and type(record_type) is str and type(payload) is dict:
                self.add(seq, ts if type(ts) is str else "", record_type, payload, start, len(raw) + 1)
        return offset

    def rounds(self) -> list[Round]:
        """Every round so far, in order; the last one's status as of now (a stopped session's
        pending round reads interrupted; a Resume makes it pending again)."""
        if self.current is None:
            return list(self.done)
        status, reason = self._status_of(self.current, self.stopped)
        return [*self.done, self.current.freeze(status, reason)]


def round_to_close(tracker: RoundTracker) -> Round | None:
    """The round a session's tail leaves pending with no one to finish it, once its writer or host
    crashed: the last round when it is pending, which it never is with a stop record after it
    (:meth:`RoundTracker.rounds` reads a stopped session's pending round interrupted, and a
    Resume after a Stop continues it as one round). The one rule for "a crash left this round open": the writer's
    Resume records it interrupted (:data:`ROUND_INTERRUPTED_EVENT`), the reader's
    ListPendingRounds lists it. None when there is nothing to close."""
    found = tracker.rounds()
    if not found or found[-1].status is not RoundStatus.PENDING:
        return None
    return found[-1]


#: Bytes read at a time when a session file is read for its rounds.
READ_BYTES = 1 << 20


def track_file(
    tracker: RoundTracker, fd: int, start: int, end: int, read_bytes: int = READ_BYTES
) -> Iterator[tuple[int, bytes]]:
    """Feed ``tracker`` the complete lines of the session file open at ``fd`` from byte ``start``
    (a line start) up to ``end``, a chunk of about ``read_bytes`` at a time (the cyclic garbage
    collector paused); after each chunk, yields the offset after it and its last line (without
    its ``\\n``), so that a caller that keeps the tracker keeps its own offset in step with it.
    Raises OSError when the file cannot be read."""
    offset = start
    with collector_paused():
        for lines in CommittedLines(fd, start, end, read_bytes):
            offset = tracker.add_lines(lines, offset)
            yield offset, lines[-1]


def pending_round_of(fd: int, end: int, lineage: Lineage, read_bytes: int = READ_BYTES) -> Round | None:
    """The round the first ``end`` bytes of the session file open at ``fd`` leave pending
    (:func:`round_to_close`), its id named through ``lineage``; None when there is none. Reads
    in chunks, in memory that does not grow with the session (settled rounds are counted, not
    kept). Raises OSError when the file cannot be read."""
    tracker = RoundTracker(lineage, keep_done=False)
    for _ in track_file(tracker, fd, 0, end, read_bytes):
        pass
    return round_to_close(tracker)


def rounds_of(
    records: Iterable[tuple[int, str, str, Mapping[str, Any]]], lineage: Lineage | None = None
) -> list[Round]:
    """The rounds of a session's records, each (seq, ts, type, payload) in seq order (see the
    module doc). Never raises on odd payloads: what a rule cannot read it ignores."""
    tracker = RoundTracker(lineage)
    for seq, ts, record_type, payload in records:
        tracker.add(seq, ts, record_type, payload)
    return tracker.rounds()


def round_at(rounds: Sequence[Round], round_id_: str) -> Round | None:
    """The round of ``rounds`` with id ``round_id_``, or None."""
    return next((found for found in rounds if found.round_id == round_id_), None)
