"""Rebuild the model-visible message sequence from a rollout file (docs/spec.md §3).

One function, :func:`rebuild`, used by the writer's checkpoint (docs/spec.md §2.6) and by
every reader path (replay, verify). It reads every line once:

* ``message`` records append in order; the ``reasoning`` records before an
  assistant message all attach to it under ``"reasoning"``, in order (one block:
  the object; several: a list, :func:`shared.records.attached_reasoning`; the
  mirror of the writer's split, :func:`shared.wire.split_reasoning`); a
  reasoning left without one (a compaction or the end of the file comes first)
  is degraded, one entry per record.
* ``compacted`` resets the sequence to its ``replacement_history`` (or to one user
  message holding the summary) and adds a ``compacted_rebuild`` entry.
* Tool pairing, last wins in place: an output answers the most recent preceding
  assistant call with its ``tool_call_id``; a second output for the same pairing
  replaces the first at the first one's position (``superseded_outputs`` counts
  it); a reused id in a later turn opens a new pairing. Unanswered calls and
  outputs with no call are degraded entries, kept in the sequence, never invented.
* Unparseable lines, NUL runs, seq gaps and repeats, unknown record types, a
  missing ``session_meta``, a message cap and an uncommitted last line (no
  ``\\n``) are one degraded entry each, with the 1-based line number and byte
  offset. A bad line never hides the good lines after it.
* Integrity (the line format's additions, shared.records): a line whose check
  (``crc32c``) fails, a checkpoint whose ``lines_digest`` no longer matches the lines
  before it, and a Resume forced over damage are damage entries too. A checkpoint
  is ``sound`` only when nothing before it is damaged and its lines digest (if it has
  one) matches: a later checkpoint never makes earlier damage verify. Lines without
  a check are counted (``unchecked_lines``), never reported.

The memory view (a lossy model-facing summary) is a different function and is
never used here.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import gc
import threading
import time
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import orjson
from crc32c import crc32c

from shared.digest import LINE_CHECKS_TYPECODE, LinesDigest, single_reasoning_digest
from shared.records import (
    LINE_CHECK_KEY,
    LINE_CHECK_MARK,
    MAX_HISTORY_INDEX,
    RESUMED_EVENT,
    RecordType,
    attached_reasoning,
    clip,
    message_origin,
    reference_origin,
)


class DegradedKind(enum.StrEnum):
    """Why a rebuild is not a complete, exact restoration."""

    UNPARSEABLE_LINE = "unparseable_line"
    NUL_RUN = "nul_run"
    MALFORMED_RECORD = "malformed_record"
    SEQ_GAP = "seq_gap"
    SEQ_REPEAT = "seq_repeat"
    MISSING_SESSION_META = "missing_session_meta"
    UNKNOWN_RECORD_TYPE = "unknown_record_type"
    COMPACTED_REBUILD = "compacted_rebuild"
    DANGLING_REASONING = "dangling_reasoning"
    UNANSWERED_TOOL_CALL = "unanswered_tool_call"
    ORPHAN_TOOL_OUTPUT = "orphan_tool_output"
    MESSAGE_CAP = "message_cap"
    UNCOMMITTED_TAIL = "uncommitted_tail"
    NO_CHECKPOINT = "no_checkpoint"
    SINGLE_REASONING_CHECKPOINT = "single_reasoning_checkpoint"
    #: A line's ``crc32c`` does not match its bytes: it changed after it was written.
    LINE_CHECK_FAILED = "line_check_failed"
    #: A checkpoint's ``lines_digest`` does not match the lines before it (changed, removed, added).
    LINES_DIGEST_MISMATCH = "lines_digest_mismatch"
    #: A checkpoint without a lines digest (an older one) whose message digest does not match
    #: (reported by the writer's Stop, Resume and Fork; replies report it as the digest status).
    CHECKPOINT_MISMATCH = "checkpoint_mismatch"
    #: A Resume an operator forced over damage (its ``resumed`` event records what it found).
    RESUMED_OVER_DAMAGE = "resumed_over_damage"
    #: A ``retraction`` took messages out of the view (the rollout keeps their records).
    RETRACTED = "retracted"
    #: A ``retraction`` named a message that is not in the view (already retracted, or replaced by
    #: a compaction since): nothing was taken out for it.
    RETRACTION_MISSED = "retraction_missed"


#: Degraded kinds that mean the file itself is damaged (not merely a compaction or
#: an unanswered call): a checkpoint is never written over them (unless a forced
#: Resume accepted them: :attr:`Rebuild.unaccepted_damage`).
DAMAGE_KINDS = frozenset(
    {
        DegradedKind.UNPARSEABLE_LINE,
        DegradedKind.NUL_RUN,
        DegradedKind.MALFORMED_RECORD,
        DegradedKind.SEQ_GAP,
        DegradedKind.SEQ_REPEAT,
        DegradedKind.MISSING_SESSION_META,
        DegradedKind.LINE_CHECK_FAILED,
        DegradedKind.LINES_DIGEST_MISMATCH,
        DegradedKind.CHECKPOINT_MISMATCH,
        DegradedKind.RESUMED_OVER_DAMAGE,
    }
)


@dataclass(frozen=True, slots=True)
class DegradedEntry:
    """One incomplete restoration: ``line`` is 1-based (0: not tied to a line)."""

    kind: DegradedKind
    line: int
    offset: int
    detail: str


@dataclass(frozen=True, slots=True)
class CheckpointRecord:
    """An ``agent_checkpoint`` line as found in the file (``offset``: its first byte, 0 when unknown).

    ``lines_digest`` is its pin of the lines before it ("" on older checkpoints);
    ``sound`` is False when a line before it is damaged or its lines digest does
    not match them: such a checkpoint never verifies, whatever its message digest.
    """

    seq: int
    line: int
    digest: str
    message_count: int
    covers_seq: int
    stop_kind: str
    offset: int = 0
    lines_digest: str = ""
    sound: bool = True


def checkpoint_record(
    seq: int, payload: dict[str, Any], line: int = 0, offset: int = 0, sound: bool = True
) -> CheckpointRecord | None:
    """The :class:`CheckpointRecord` of the ``agent_checkpoint`` payload at ``seq`` (its line
    number and byte offset where known, 0 otherwise), or None when it lacks a digest, message
    count or covered seq (a malformed checkpoint). A kind or lines digest that is absent or
    null reads as "". The rebuild (replays, the writer's Resume and Stop) and the reader's
    stop facts read checkpoints with it."""
    try:
        return CheckpointRecord(
            seq,
            line,
            str(payload["digest"]),
            int(payload["message_count"]),
            int(payload["covers_seq"]),
            str(payload.get("stop_kind") or ""),
            offset,
            str(payload.get("lines_digest") or ""),
            sound,
        )
    except (KeyError, TypeError, ValueError):
        return None


class CheckpointReading(enum.StrEnum):
    """How a checkpoint's message digest reads against the sequence it covers (:func:`read_checkpoint`)."""

    EXACT = "exact"
    SINGLE_REASONING = "single_reasoning"
    MISMATCH = "mismatch"


def read_checkpoint(
    checkpoint: CheckpointRecord,
    count: int,
    computed: str,
    payloads: Callable[[], Iterable[Mapping[str, Any]]],
) -> CheckpointReading:
    """How ``checkpoint`` reads against the ``count`` messages it covers, which digest to ``computed``.

    EXACT: the checkpoint is sound and its digest and message count are the
    sequence's. SINGLE_REASONING: sound, the same count, and its digest is the one
    versions that attached only the last of several reasoning blocks computed
    (:func:`shared.digest.single_reasoning_digest` over ``payloads()``, called only
    then, once). MISMATCH otherwise. docs/spec.md §4 and §5 Replay: the writer (an older
    checkpoint met at reopen) and the reader (a replay's digest status) both decide by
    this one rule, so a file one calls sound the other never calls damaged.
    """
    if not checkpoint.sound or checkpoint.message_count != count:
        return CheckpointReading.MISMATCH
    if computed == checkpoint.digest:
        return CheckpointReading.EXACT
    if single_reasoning_digest(payloads(), count) == checkpoint.digest:
        return CheckpointReading.SINGLE_REASONING
    return CheckpointReading.MISMATCH


@dataclass(frozen=True, slots=True)
class UnknownRecord:
    """A record whose ``type`` this version does not know; kept, never dropped."""

    seq: int
    line: int
    record_type: str
    payload: Any


@dataclass(slots=True)
class Rebuild:
    """What :func:`rebuild` found in one file.

    ``messages`` are message payloads (dicts, reasoning attached), or handles
    when built by :func:`shared.rebuild_index.index_rebuild`; ``checkpoint_messages``
    is the sequence as it stood at the last checkpoint, for verification.
    ``committed_bytes`` is the length of the file up to its last ``\\n``;
    ``call_ids`` the tool calls an output may still answer (the current view's:
    a compaction resets them to its replacement history's); ``unanswered_call_ids``
    those of them still without an output, in call order. ``lines_digest`` pins every
    committed line (what a checkpoint written now carries); ``unchecked_lines``
    counts lines without a line check (older lines); ``accepted_damage_offset`` is
    the offset of the last ``resumed`` event an operator forced over damage (-1: none).
    """

    messages: list[Any] = field(default_factory=list)
    degraded: list[DegradedEntry] = field(default_factory=list)
    superseded_outputs: int = 0
    session_meta: dict[str, Any] | None = None
    last_checkpoint: CheckpointRecord | None = None
    checkpoint_messages: list[Any] | None = None
    last_stop: dict[str, Any] | None = None
    last_record_type: str | None = None
    unknown_records: list[UnknownRecord] = field(default_factory=list)
    call_ids: set[str] = field(default_factory=set)
    unanswered_call_ids: list[str] = field(default_factory=list)
    last_seq: int = -1
    records: int = 0
    committed_bytes: int = 0
    lines_digest: str = ""
    unchecked_lines: int = 0
    accepted_damage_offset: int = -1

    @property
    def damage(self) -> DegradedEntry | None:
        """The first entry of :data:`DAMAGE_KINDS`, or None when the file is sound."""
        return next((entry for entry in self.degraded if entry.kind in DAMAGE_KINDS), None)

    def unaccepted_damage(self) -> list[DegradedEntry]:
        """The damage entries after the last Resume forced over damage (that Resume recorded
        what it accepted), in order: what the writer's Stop and Resume refuse."""
        accepted = self.accepted_damage_offset
        return [entry for entry in self.degraded if entry.kind in DAMAGE_KINDS and entry.offset > accepted]


# Plain str constants for the per-line dispatch: comparing a str to a StrEnum member
# takes the slow path (~180 ns against ~25 ns), and rebuild compares on every line.
_MESSAGE = RecordType.MESSAGE.value
_REASONING = RecordType.REASONING.value
_TURN_CONTEXT = RecordType.TURN_CONTEXT.value
_EVENT = RecordType.EVENT.value
_COMPACTED = RecordType.COMPACTED.value
_AGENT_CHECKPOINT = RecordType.AGENT_CHECKPOINT.value
_STOP = RecordType.STOP.value
_SESSION_META = RecordType.SESSION_META.value
_RETRACTION = RecordType.RETRACTION.value

#: message_origin(seq) is seq shifted by this (inline in the per-line loop).
_ORIGIN_SHIFT = message_origin(1).bit_length() - 1

#: Bytes of a file that :func:`rebuild` splits into lines at a time (cut after a newline):
#: the copies of a large file's lines never all exist at once.
SPLIT_BYTES = 1024 * 1024

#: Longest the cyclic collector stays paused (seconds) before a watchdog thread runs one
#: full collection, and again every as long while the pause lasts; see :func:`collector_paused`.
MAX_COLLECTOR_PAUSE_S = 10.0
#: How often that watchdog looks (seconds).
_WATCH_INTERVAL_S = 0.5


class _CollectorPause:
    """Process-wide state of :func:`collector_paused` (guarded by ``lock``)."""

    lock = threading.Lock()
    depth = 0
    resume = False  # was the collector enabled when the outermost pause began
    since = 0.0  # time.monotonic() of the pause's start or of the watchdog's last collection
    watchdog: threading.Thread | None = None


def _watch_collector_pause() -> None:
    """Daemon thread: while a pause has kept the collector off too long, collect (never returns)."""
    pause = _CollectorPause
    while True:
        time.sleep(_WATCH_INTERVAL_S)
        with pause.lock:
            overdue = (
                pause.depth > 0 and pause.resume and time.monotonic() - pause.since > MAX_COLLECTOR_PAUSE_S
            )
            if overdue:
                pause.since = time.monotonic()
        if overdue:
            gc.collect()


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause CPython's cyclic garbage collector for a rebuild and the use of its result.

    A rebuild keeps hundreds of thousands of parsed payloads, none in a reference
    cycle. With the collector running, each collection during the rebuild re-walks
    all of them, and the first one after it walks them all once more: that last
    walk alone is 5-10 % of a 100 MB rebuild's CPU time (bench/rebuild.py prints
    both). Callers therefore hold the pause over the rebuild, over everything that
    reads its result, and over the release of that result, so the collector never
    sees those objects. Hold it in straight-line code only, never across a
    ``yield`` or an ``await``.

    Thread-safe and nestable: the collector comes back, if it was enabled when the
    outermost pause began (the state is sampled then), when the last pause ends.
    One long pause, or pauses of several threads overlapping without a gap, could
    keep it off indefinitely; a watchdog thread (started with the first pause) then
    runs one full collection once the collector has been paused for
    :data:`MAX_COLLECTOR_PAUSE_S` seconds, and again every as long, so garbage in
    reference cycles waits at most that long plus half a second. The pause changes
    speed only, never a result.
    """
    pause = _CollectorPause
    with pause.lock:
        if pause.depth == 0:
            pause.resume = gc.isenabled()
            pause.since = time.monotonic()
            gc.disable()
        pause.depth += 1
        if pause.watchdog is None:
            pause.watchdog = threading.Thread(
                target=_watch_collector_pause, name="rollout-collector-watchdog", daemon=True
            )
            pause.watchdog.start()
    try:
        yield
    finally:
        with pause.lock:
            pause.depth -= 1
            if pause.depth == 0 and pause.resume:
                gc.enable()


#: (payload, line, offset) of each reasoning block attached to one message, in file order.
PendingReasoning = Sequence[tuple[dict[str, Any], int, int]]


class _Pairing:
    """One tool call, the message it came from (its origin) and where its output sits in the sequence."""

    __slots__ = ("call_line", "call_offset", "origin", "output_index")

    def __init__(self, call_line: int, call_offset: int, origin: int) -> None:
        self.call_line = call_line
        self.call_offset = call_offset
        self.origin = origin
        self.output_index = -1


class Rebuilder:
    """The mutable state of one rebuild pass: the rules of :func:`rebuild`, applied line by line.

    What the sequence holds is chosen by two hooks that subclasses override
    (:meth:`keep`, :meth:`keep_summary`): payloads here, offsets in
    :mod:`shared.rebuild_index`, rendered replies in the reader's replay cache. The
    rules themselves are never overridden. A pass may be fed by several :meth:`run`
    calls (line numbers and offsets continue), and :meth:`finished_copy` answers
    what :meth:`finish` would without ending the pass, so bytes appended to the
    file later extend it: the result is the same as one pass over the whole file.
    """

    #: The sequence holds the payloads themselves (so :meth:`keep` is called only to attach reasoning).
    keeps_payloads = True

    def __init__(self) -> None:
        self.result = Rebuild()
        self.messages = self.result.messages
        #: Beside each message of the sequence, the line it came from (shared.records.message_origin):
        #: what a retraction names.
        self.origins: array[int] = array("q")
        self.pairings: dict[str, _Pairing] = {}
        #: (payload, line, offset) of the reasoning records waiting for their assistant message.
        self.pending_reasoning: list[tuple[dict[str, Any], int, int]] = []
        #: The lines digest of the lines read after the first, and the checks of lines not yet
        #: added to it (the first line's, the session_meta a fork replaces, is left out once).
        self.lines_digest = LinesDigest()
        self.checks: array[int] = array(LINE_CHECKS_TYPECODE)
        self.first_line_left_out = False
        #: Whether a damage entry has been found (a checkpoint after it is not sound).
        self.damaged = False
        #: The seq of the last record that took out or changed a message already in the view (a
        #: retraction, a compaction, an output replacing another in place); -1: none. Read by
        #: :func:`view_continues`; no rule reads it.
        self.rewritten_seq = -1

    def degrade(self, kind: DegradedKind, line: int, offset: int, detail: str) -> None:
        if kind in DAMAGE_KINDS:
            self.damaged = True
        self.result.degraded.append(DegradedEntry(kind, line, offset, detail))

    def odd_line_check(self, raw: bytes, check: Any, line: int, offset: int) -> int:
        """The lines digest's check of a line whose ``crc32c`` is absent or wrong (the slow path
        of :meth:`run`): an absent check is counted (the line's own CRC32C stands in for it);
        a wrong one is damage (the stored value stands in, so that a line whose check was
        recomputed after an edit changes every later lines digest)."""
        if check is None:
            self.result.unchecked_lines += 1
            return crc32c(raw)
        self.degrade(
            DegradedKind.LINE_CHECK_FAILED,
            line,
            offset,
            f"the line's crc32c is {clip(check, 20)} but its bytes give {crc32c(raw[: raw.rfind(LINE_CHECK_MARK)])}:"
            " it changed after it was written",
        )
        return check & 0xFFFFFFFF if type(check) is int else crc32c(raw)

    def keep(self, payload: dict[str, Any], offset: int, index: int, reasoning: PendingReasoning) -> Any:
        """What the sequence holds for a message: the payload, its reasoning blocks attached in
        order (the reader half of docs/spec.md §2.5); a handle in index mode, rendered bytes in the replay cache.

        ``index`` is -1 for a message line, or the position in a compaction's
        replacement history (``offset`` is then the compacted line's); ``reasoning``
        holds (payload, line, offset) of each block attached, often none.
        """
        if not reasoning:
            return payload
        return {**payload, "reasoning": attached_reasoning([block for block, _, _ in reasoning])}

    def keep_summary(self, summary: str, offset: int) -> Any:
        """The one user message a compaction without replacement history resets to."""
        return {"role": "user", "content": summary}

    def add_message(
        self, payload: dict[str, Any], line: int, offset: int, index: int = -1, origin: int = 0
    ) -> None:
        """Append one message payload, applying reasoning and tool pairing rules; ``origin`` is the
        line it came from (shared.records.message_origin)."""
        role = payload.get("role")
        if role == "assistant" and self.pending_reasoning:
            kept = self.keep(payload, offset, index, self.pending_reasoning)
            self.pending_reasoning = []
        else:
            kept = payload if self.keeps_payloads else self.keep(payload, offset, index, ())
        if role == "assistant":
            calls = payload.get("tool_calls")
            if isinstance(calls, list):
                for call in calls:
                    call_id = call.get("id") if isinstance(call, dict) else None
                    if isinstance(call_id, str):
                        self.pairings[call_id] = _Pairing(line, offset, origin)
        elif role == "tool":
            call_id = payload.get("tool_call_id")
            pairing = self.pairings.get(call_id) if isinstance(call_id, str) else None
            if pairing is None:
                self.degrade(
                    DegradedKind.ORPHAN_TOOL_OUTPUT,
                    line,
                    offset,
                    f"tool output for {call_id!r} answers no preceding call; kept in place",
                )
            elif pairing.output_index >= 0:
                self.messages[pairing.output_index] = kept
                self.origins[pairing.output_index] = origin
                self.rewritten_seq = origin >> _ORIGIN_SHIFT
                self.result.superseded_outputs += 1
                return
            else:
                pairing.output_index = len(self.messages)
        self.messages.append(kept)
        self.origins.append(origin)

    def compact(self, payload: dict[str, Any], line: int, offset: int, seq: int = 0) -> None:
        """Reset the sequence to the compaction's replacement history (or its summary)."""
        self.flush_dangling_reasoning()
        self.messages.clear()
        del self.origins[:]
        self.pairings.clear()
        history = payload.get("replacement_history")
        if isinstance(history, list):
            for index, message in enumerate(history):
                if isinstance(message, dict):
                    self.add_message(
                        message, line, offset, index, message_origin(seq, min(index, MAX_HISTORY_INDEX))
                    )
                else:
                    self.degrade(
                        DegradedKind.MALFORMED_RECORD,
                        line,
                        offset,
                        "replacement_history holds a non-object; skipped",
                    )
            detail = f"model view replaced by {len(history)} replacement messages"
        else:
            self.messages.append(self.keep_summary(str(payload.get("summary", "")), offset))
            self.origins.append(message_origin(seq))
            detail = "model view replaced by the compaction summary"
        self.degrade(DegradedKind.COMPACTED_REBUILD, line, offset, detail)

    def retract(self, payload: dict[str, Any], line: int, offset: int) -> None:
        """Take the messages a ``retraction`` names out of the sequence (shared.records): each
        reference removes the message its line put in the view; its tool calls go with it, and a
        retracted output leaves its call unanswered."""
        references = payload.get("messages")
        taken = 0
        for reference in references if isinstance(references, list) else ():
            origin = reference_origin(reference)
            position = self._position_of(origin) if origin is not None else -1
            if position < 0:
                self.degrade(
                    DegradedKind.RETRACTION_MISSED,
                    line,
                    offset,
                    f"the retraction names {clip(reference, 60)}, which is not a message of the view; nothing taken out for it",
                )
                continue
            del self.messages[position]
            del self.origins[position]
            for call_id, pairing in list(self.pairings.items()):
                if pairing.origin == origin:
                    del self.pairings[call_id]
                elif pairing.output_index == position:
                    pairing.output_index = -1
                elif pairing.output_index > position:
                    pairing.output_index -= 1
            taken += 1
        reason = payload.get("reason")
        self.degrade(
            DegradedKind.RETRACTED,
            line,
            offset,
            f"{taken} message(s) taken out of the view" + (f" ({clip(reason, 80)})" if reason else ""),
        )

    def _position_of(self, origin: int) -> int:
        """Where the message from ``origin`` sits in the sequence (searched from the end), or -1."""
        origins = self.origins
        for position in range(len(origins) - 1, -1, -1):
            if origins[position] == origin:
                return position
        return -1

    def flush_dangling_reasoning(self) -> None:
        for _, line, offset in self.pending_reasoning:
            self.degrade(
                DegradedKind.DANGLING_REASONING, line, offset, "reasoning with no assistant message after it"
            )
        self.pending_reasoning = []

    def record(self, seq: int, record_type: str, payload: Any, line: int, offset: int) -> None:
        """Apply one parsed record."""
        result = self.result
        if record_type == _MESSAGE:
            self.add_message(payload, line, offset, -1, message_origin(seq))
        elif record_type == _REASONING:
            self.pending_reasoning.append((payload, line, offset))
        elif record_type == _EVENT:
            if payload.get("kind") == RESUMED_EVENT:
                self.resumed(payload.get("body"), line, offset)
        elif record_type == _TURN_CONTEXT:
            pass
        elif record_type == _COMPACTED:
            self.rewritten_seq = seq
            self.compact(payload, line, offset, seq)
        elif record_type == _RETRACTION:
            self.rewritten_seq = seq
            self.retract(payload, line, offset)
        elif record_type == _AGENT_CHECKPOINT:
            self.checkpoint(seq, payload, line, offset)
        elif record_type == _STOP:
            result.last_stop = payload
        elif record_type == _SESSION_META:
            if line != 1 or result.session_meta is not None:
                self.degrade(
                    DegradedKind.MALFORMED_RECORD,
                    line,
                    offset,
                    "session_meta is allowed only as the first line",
                )
            else:
                result.session_meta = payload
        else:
            result.unknown_records.append(UnknownRecord(seq, line, record_type, payload))
            self.degrade(
                DegradedKind.UNKNOWN_RECORD_TYPE,
                line,
                offset,
                f"record type {record_type!r} is unknown to this reader; kept, not replayed",
            )

    def add_checks(self) -> None:
        """Add the checks collected so far to the lines digest (the first line's left out)."""
        checks = self.checks
        if not self.first_line_left_out and checks:
            del checks[0]
            self.first_line_left_out = True
        self.lines_digest.add(checks)
        del checks[:]

    def checkpoint(self, seq: int, payload: dict[str, Any], line: int, offset: int) -> None:
        """Take an ``agent_checkpoint``: check its lines digest against the lines before it."""
        pinned = payload.get("lines_digest")
        sound = not self.damaged
        if pinned is not None and not self.lines_match(pinned, line, offset):
            sound = False
        record = checkpoint_record(seq, payload, line, offset, sound)
        if record is None:
            self.degrade(
                DegradedKind.MALFORMED_RECORD,
                line,
                offset,
                "agent_checkpoint lacks digest, message_count or covers_seq",
            )
            return
        self.result.last_checkpoint = record
        self.result.checkpoint_messages = list(self.messages)

    def lines_match(self, pinned: Any, line: int, offset: int) -> bool:
        """Whether the lines before the checkpoint at ``line`` still give the lines digest it pins
        (``pinned``); a mismatch is damage (``lines_digest_mismatch``)."""
        self.add_checks()
        found = self.lines_digest.result()
        if pinned == found:
            return True
        self.degrade(
            DegradedKind.LINES_DIGEST_MISMATCH,
            line,
            offset,
            f"the checkpoint pins the {line - 2} lines between the first and it as {clip(pinned, 80)!r}, they now"
            f" give {found!r}: a line before it was changed, removed or added",
        )
        return False

    def resumed(self, body: Any, line: int, offset: int) -> None:
        """A ``resumed`` event: when an operator forced it over damage, that stays damage."""
        if not isinstance(body, dict) or not body.get("forced") or not body.get("damage"):
            return
        damage = body["damage"]
        first = damage[0] if isinstance(damage, list) and isinstance(damage[0], dict) else {}
        self.degrade(
            DegradedKind.RESUMED_OVER_DAMAGE,
            line,
            offset,
            f"Resume was forced over damage ({clip(first.get('kind', ''), 40)} at line"
            f" {clip(first.get('line', '?'), 20)}, byte {clip(first.get('offset', '?'), 20)}); the damage"
            " stays reported",
        )
        self.result.accepted_damage_offset = offset

    def finish(self, max_messages: int) -> Rebuild:
        result = self.result
        result.lines_digest = self.lines_digest.result()  # run() added every check it collected
        self.flush_dangling_reasoning()
        result.call_ids = set(self.pairings)
        for call_id, pairing in self.pairings.items():
            if pairing.output_index < 0:
                result.unanswered_call_ids.append(call_id)
                self.degrade(
                    DegradedKind.UNANSWERED_TOOL_CALL,
                    pairing.call_line,
                    pairing.call_offset,
                    f"tool call {call_id!r} has no output",
                )
        if result.session_meta is None and result.records:
            self.degrade(DegradedKind.MISSING_SESSION_META, 1, 0, "the first record is not session_meta")
        if max_messages and len(self.messages) > max_messages:
            self.degrade(
                DegradedKind.MESSAGE_CAP,
                0,
                0,
                f"{len(self.messages)} messages, cap {max_messages}: later ones not returned",
            )
            del self.messages[max_messages:]
        return result

    def finished_copy(self, tail: bytes, line_no: int, offset: int, max_messages: int) -> Rebuild:
        """What :func:`rebuild` returns for the lines run so far followed by ``tail``, the bytes
        after the last newline (uncommitted), leaving this pass open for more :meth:`run` calls.

        ``line_no`` and ``offset`` are what the last :meth:`run` returned. Costs one copy of
        the sequence and the degraded list (O(messages)); the kept items are shared, not
        copied, and the copy's pairings are this pass's (:meth:`finish` only reads them).
        """
        twin = copy.copy(self)
        result = self.result
        twin.result = dataclasses.replace(
            result,
            messages=list(result.messages),
            degraded=list(result.degraded),
            call_ids=set(),
            unanswered_call_ids=[],
        )
        twin.messages = twin.result.messages
        twin.pending_reasoning = list(self.pending_reasoning)
        twin.uncommitted(tail, line_no, offset)
        return twin.finish(max_messages)

    def run(self, lines: Iterable[bytes], line_no: int = 0, offset: int = 0) -> tuple[int, int]:
        """Apply complete lines (without their ``\\n``); returns (last line number, end offset)."""
        result = self.result
        loads = orjson.loads
        decode_error = orjson.JSONDecodeError
        add_message = self.add_message
        add_check = self.checks.append
        check_key, check_mark = LINE_CHECK_KEY, LINE_CHECK_MARK
        expected_seq = result.last_seq + 1
        records, last_seq, last_type = 0, result.last_seq, result.last_record_type
        for raw in lines:
            line_no += 1
            start = offset
            offset += len(raw) + 1
            try:
                record = loads(raw)
            except decode_error:
                add_check(crc32c(raw))
                stripped = raw.lstrip(b"\x00")
                if len(stripped) != len(raw):
                    self.degrade(
                        DegradedKind.NUL_RUN, line_no, start, f"{len(raw) - len(stripped)} NUL bytes skipped"
                    )
                    try:
                        record = loads(stripped)
                    except decode_error:
                        if stripped:
                            self.degrade(
                                DegradedKind.UNPARSEABLE_LINE, line_no, start, f"not JSON: {stripped[:60]!r}"
                            )
                        continue
                    self.checks.pop()  # the record after the NULs has a check of its own
                    raw = stripped
                else:
                    self.degrade(DegradedKind.UNPARSEABLE_LINE, line_no, start, f"not JSON: {raw[:60]!r}")
                    continue
            try:
                seq = record["seq"]
                record_type = record["type"]
                payload = record["payload"]
            except (KeyError, TypeError):
                self.degrade(
                    DegradedKind.MALFORMED_RECORD, line_no, start, "a record needs seq, type and payload"
                )
                add_check(crc32c(raw))
                continue
            # type() rather than isinstance(): orjson builds exact types, and this runs on every line.
            if type(seq) is not int or type(record_type) is not str or type(payload) is not dict:
                self.degrade(
                    DegradedKind.MALFORMED_RECORD,
                    line_no,
                    start,
                    "seq must be an integer, type a string and payload an object",
                )
                add_check(crc32c(raw))
                continue
            # The line check (shared.records.line_check, inline): the CRC32C of the bytes before
            # the last ',"crc32c":' is the stored value. Added to the lines digest after the record
            # is applied: a checkpoint's lines digest covers the lines before it.
            check = record.get(check_key)
            if type(check) is not int or crc32c(raw[: raw.rfind(check_mark)]) != check:
                check = self.odd_line_check(raw, check, line_no, start)
            if seq != expected_seq:
                kind = DegradedKind.SEQ_GAP if seq > expected_seq else DegradedKind.SEQ_REPEAT
                self.degrade(kind, line_no, start, f"expected seq {expected_seq}, found {seq}")
            expected_seq = seq + 1
            records += 1
            last_seq = seq
            last_type = record_type
            if record_type == _MESSAGE:
                add_message(payload, line_no, start, -1, seq << _ORIGIN_SHIFT)
            elif record_type == _TURN_CONTEXT:
                pass  # only counted
            elif record_type != _EVENT or payload.get("kind") == RESUMED_EVENT:
                # Events only count, except the writer's `resumed` (it may accept damage).
                self.record(seq, record_type, payload, line_no, start)
            add_check(check)
        self.add_checks()
        result.records += records
        if records:
            result.last_seq = last_seq
            result.last_record_type = last_type
        result.committed_bytes = offset
        return line_no, offset

    def uncommitted(self, tail: bytes, line_no: int, offset: int) -> None:
        """Report bytes after the last newline (not yet committed; ignored)."""
        if tail:
            self.degrade(
                DegradedKind.UNCOMMITTED_TAIL,
                line_no + 1,
                offset,
                f"{len(tail)} bytes after the last newline are not committed; ignored",
            )


def view_continues(
    since_next_seq: int,
    since_count: int | None,
    next_seq: int,
    origins: array[int] | None = None,
    rewritten_seq: int = -1,
) -> bool:
    """Whether a caller's view of a session, rebuilt from the records before seq ``since_next_seq``
    and holding ``since_count`` messages (None: a count not known exactly), is the start of the
    view rebuilt from the records before ``next_seq`` (docs/spec.md §3, §5.1): then the current
    view is the caller's followed by its messages from position ``since_count`` on.

    ``origins`` and ``rewritten_seq`` are those of a :class:`Rebuilder` that holds the whole
    current view; None for a pass that does not (a tail read), which can only tell that nothing
    was written since. The rules change a message already in the view only by taking it out (a
    retraction, a compaction) or by putting a later line's message in its place (an output
    replacing another): so the view continues when no such record came since, or when the first
    ``since_count`` messages all came from lines before ``since_next_seq``.
    """
    if since_next_seq < 1 or next_seq < since_next_seq:
        return False  # no view held, or one this reader has not read up to
    if next_seq == since_next_seq:
        return True  # the same lines, the same view
    if origins is None or since_count is None or since_count > len(origins):
        return False
    if rewritten_seq < since_next_seq:
        return True  # only messages appended since
    return since_count == 0 or max(origins[:since_count]) < message_origin(since_next_seq)


def rebuild(data: bytes, *, max_messages: int = 0) -> Rebuild:
    """Rebuild the message sequence from the bytes of one session file.

    ``data`` is the whole file as read once (bytes); ``max_messages`` caps the
    returned sequence (0: no cap). A last line without ``\\n`` is treated as not
    yet committed (ignored, reported). Never raises on bad content: every
    problem becomes a :class:`DegradedEntry`. Source: docs/spec.md §3, seed rules 8, 11, 12.

    Runs under :func:`collector_paused`; a caller that keeps the result for more
    than a moment holds that pause itself until the result is released (every
    service caller does), or the collector walks all of it once afterwards.
    """
    state = Rebuilder()
    with collector_paused():
        committed = data.rfind(b"\n") + 1
        line_no = offset = 0
        while offset < committed:
            cut = data.find(b"\n", offset + SPLIT_BYTES) + 1 or committed
            lines = data[offset:cut].split(b"\n")
            lines.pop()  # the empty piece after the slice's last newline
            line_no, offset = state.run(lines, line_no, offset)
        state.uncommitted(data[committed:], line_no, offset)
        return state.finish(max_messages)
