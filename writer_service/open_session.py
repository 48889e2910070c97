"""The state the writer keeps for a session it has open, and the validation of its records.

An :class:`OpenSession` is a session whose file descriptor the writer holds: its
:class:`~writer_service.committer.SessionLog` (the queue into the durability
rounds), the tool call ids an output may answer (the session's current view, as
the shared rebuild pairs them: a compaction resets it), its ``session_meta``, and
whether a Stop or Resume is running. Its next seq and stop state live in its
:class:`~writer_service.session_index.IndexEntry`, which outlives the open state.

:func:`apply_record` is the one place a record type decides what it does to the
call view: a closed ``match`` over :class:`shared.records.RecordType` ending in
``assert_never``, used both to validate a request (docs/spec.md §2.3) and to replay the
lines after a saved state when a session is reopened.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, assert_never

from shared.errors import RecordValidationError, SessionBusyError, SessionStateError
from shared.reasons import SESSION_IS_OPEN, session_subject
from shared.records import (
    MAX_HISTORY_INDEX,
    RecordType,
    RequestMark,
    encode_line,
    now_timestamp,
    reference_origin,
    validate_message,
)
from shared.stop_kinds import classify_session
from writer_service.committer import SessionLog
from writer_service.retractions import LineStarts, RecentRecords
from writer_service.session_index import IndexEntry

#: One request's records as the wire gives them: per request record, the payloads it becomes.
RequestRecords = list[list[tuple[RecordType, dict[str, Any]]]]
#: Per request record, its source time in the ledger's ``ts`` form ("" or None: the writer's clock).
RecordTimes = list[str] | None


class CallView:
    """The tool call ids an output may answer while one request is validated.

    Starts from the session's current view without copying it; a compaction in
    the request resets it. :meth:`committed` is the view after the request.
    """

    __slots__ = ("added", "base", "removed", "reset_done")

    def __init__(self, base: set[str]) -> None:
        self.base = base
        self.added: set[str] = set()
        self.removed: set[str] = set()  # base ids a retraction took out
        self.reset_done = False

    def __contains__(self, item: object) -> bool:
        return item in self.added or (not self.reset_done and item in self.base and item not in self.removed)

    def add(self, call_ids: Iterable[str]) -> None:
        for call_id in call_ids:
            self.added.add(call_id)
            self.removed.discard(call_id)

    def remove(self, call_ids: Iterable[str]) -> None:
        for call_id in call_ids:
            self.added.discard(call_id)
            self.removed.add(call_id)

    def reset(self) -> None:
        self.reset_done = True
        self.added = set()
        self.removed = set()

    def committed(self) -> set[str]:
        if self.reset_done:
            return set(self.added)
        self.base.difference_update(self.removed)
        self.base.update(self.added)
        return self.base


def _call_ids(message: Any) -> list[str]:
    """The tool call ids a message payload requests, tolerating damaged shapes (file replay)."""
    calls = message.get("tool_calls") if isinstance(message, dict) else None
    if not isinstance(calls, list):
        return []
    return [call["id"] for call in calls if isinstance(call, dict) and isinstance(call.get("id"), str)]


def apply_record(
    view: CallView, record_type: RecordType, payload: dict[str, Any], index: int, validate: bool
) -> None:
    """Apply one record to the call view; with ``validate``, refuse it first if it is invalid.

    Raises RecordValidationError (naming ``index`` and the field) when ``validate``
    is set and the record may not be appended: a message that fails
    :func:`shared.records.validate_message`, a replacement history entry likewise,
    or a type only CreateSession and Stop write. Source: docs/spec.md §2.3, §3 (the view).
    """
    match record_type:
        case RecordType.MESSAGE:
            if validate:
                validate_message(payload, index, view)
            if "tool_calls" in payload:
                view.add(_call_ids(payload))
        case RecordType.COMPACTED:
            view.reset()
            history = payload.get("replacement_history", ())
            for position, message in enumerate(history if isinstance(history, list) else ()):
                if validate:
                    validate_message(message, index, view, f"compacted.replacement_history[{position}]")
                view.add(_call_ids(message))
        case RecordType.RETRACTION:
            if validate:
                check_retraction(payload, index)
            call_ids = payload.get("call_ids")
            view.remove(
                call for call in (call_ids if isinstance(call_ids, list) else ()) if isinstance(call, str)
            )
        case RecordType.REASONING | RecordType.TURN_CONTEXT | RecordType.EVENT:
            pass
        case RecordType.SESSION_META | RecordType.AGENT_CHECKPOINT | RecordType.STOP:
            if validate:
                raise RecordValidationError(
                    index, str(record_type), "is written by CreateSession or Stop only, never appended"
                )
        case _:
            assert_never(record_type)


def check_retraction(payload: dict[str, Any], index: int) -> None:
    """Refuse (RecordValidationError naming ``records[index].retraction...``) a retraction that
    names no message, or a reference that is not ``{seq >= 1, index?}`` (shared.records)."""
    references = payload.get("messages")
    if not isinstance(references, list) or not references:
        raise RecordValidationError(index, "retraction.messages", "is empty: name at least one message")
    for position, reference in enumerate(references):
        if reference_origin(reference) is None:
            raise RecordValidationError(
                index,
                f"retraction.messages[{position}]",
                f"must name a seq >= 1 and, for a replacement history entry, an index from 0 to"
                f" {MAX_HISTORY_INDEX}; got {reference!r}",
            )


@dataclass(slots=True, eq=False)
class OpenSession:
    """A session the writer holds open; see the module docstring."""

    session_id: str
    entry: IndexEntry
    path: Path
    log: SessionLog
    calls: set[str]
    meta: dict[str, Any]
    #: "Stop" or "Resume" while one is in progress (appends meanwhile are refused: ABORTED, retryable).
    busy: str = ""
    #: The file offset the session's saved state covers (writer_service.saved_state).
    saved_offset: int = 0
    #: What the records queued last hold for a retraction (writer_service.retractions).
    recent: RecentRecords = field(default_factory=RecentRecords)
    #: Where the lines queued since the session was opened start (writer_service.retractions).
    line_starts: LineStarts = field(default_factory=LineStarts)

    @property
    def next_seq(self) -> int:
        return self.entry.next_seq

    @property
    def stopped_kind(self) -> str | None:
        """The stop kind when stopped ("" for a legacy stop without one), None when open."""
        return self.entry.stopped_kind

    def refuse_if_busy(self) -> None:
        """Refuse (SessionBusyError: ABORTED, retryable) while a Stop or Resume of the session runs."""
        if self.busy:
            raise SessionBusyError(f"a {self.busy} of this session is in progress; retry when it ends")

    def check_appendable(self) -> None:
        """Refuse a stopped session (SessionStateError: FAILED_PRECONDITION, saying whether Resume
        continues it or needs force, docs/spec.md §5) or a busy one (SessionBusyError)."""
        if self.entry.stopped_kind is not None:
            kind = self.entry.stopped_kind
            eligibility = classify_session(kind, self.meta)  # as Resume decides (docs/spec.md §5)
            advice = (
                "call Resume to continue it"
                if eligibility.replayable
                else f"it may not be continued as-is ({eligibility.reason}); Resume it with force, or Fork it"
            )
            raise SessionStateError(
                f"session is stopped ({kind or 'no stop kind'}); {advice}",
                subject=session_subject(self.session_id),
                precondition=SESSION_IS_OPEN,
            )
        self.refuse_if_busy()

    def encode(
        self,
        records: RequestRecords,
        max_record_bytes: int,
        times: RecordTimes = None,
        request: RequestMark | None = None,
    ) -> tuple[list[bytes], list[int], CallView]:
        """Validate and encode one request against this session (no state change); see :func:`encode_records`."""
        return encode_records(records, self.entry.next_seq, self.calls, max_record_bytes, times, request)

    def queue(self, lines: bytes, count: int, calls: set[str] | None = None) -> asyncio.Future[None]:
        """Take ``count`` seqs and queue the encoded lines; the future resolves once they are durable.

        ``calls`` is the call view after these lines (unchanged when None).
        """
        self.entry.next_seq += count
        if calls is not None:
            self.calls = calls
        return self.log.submit(lines, count)


def encode_records(
    records: RequestRecords,
    next_seq: int,
    calls: set[str],
    max_record_bytes: int,
    times: RecordTimes = None,
    request: RequestMark | None = None,
) -> tuple[list[bytes], list[int], CallView]:
    """Validate and encode one request: (lines, seq per request record, call view after).

    ``next_seq`` is the seq the first line gets and ``calls`` the session's current
    call view (not changed). ``times`` holds, per request record, its source time
    in the ledger's form ("" for the writer's clock); None: the writer's clock for
    all. ``request`` is the request mark its first line carries (shared.records),
    if any. Tool outputs must answer a call of the current view or one earlier in
    the request. Raises RecordValidationError naming the record index and field:
    an invalid record, or a line over ``max_record_bytes`` (rejected, never
    truncated). Source: docs/spec.md §2.3, §2.4.
    """
    now = now_timestamp()
    seq = next_seq
    view = CallView(calls)
    lines: list[bytes] = []
    seqs: list[int] = []
    for index, payloads in enumerate(records):
        ts = (times[index] or now) if times is not None else now
        for record_type, payload in payloads:
            apply_record(view, record_type, payload, index, validate=True)
            try:
                line = encode_line(seq, ts, record_type, payload, request)
                request = None  # the first line only
            except TypeError as exc:
                raise RecordValidationError(index, str(record_type), f"cannot be stored: {exc}") from exc
            if len(line) > max_record_bytes:
                raise RecordValidationError(
                    index,
                    str(record_type),
                    f"record is {len(line)} bytes, over the limit of {max_record_bytes} bytes; it is"
                    " rejected, never truncated",
                )
            lines.append(line)
            seq += 1
        seqs.append(seq - 1)
    return lines, seqs, view
