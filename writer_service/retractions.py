"""The writer's half of a retraction (shared.records, ``retraction`` records; docs/spec.md §3 addition).

Before a retraction is written, each of its references must name a message already in
the session: a ``message`` record, entry ``index`` of a ``compacted`` record's
replacement history, or a summary-only ``compacted`` record. The writer reads those
lines back from the end of the file (:func:`shared.committed_lines.lines_before`, at
most :data:`MAX_LOOKBACK_BYTES`) and writes the tool call ids of the retracted messages
into the record as ``call_ids``, so that its view of the calls an output may answer
follows the retraction from that one line, at reopen as at validation (a client never
sets them). Whether a named message is still in the view is the rebuild's to say (a
``retraction_missed`` note); the writer checks only that it exists.

A session the writer holds open remembers the records it queued last that a retraction may name
(:class:`RecentRecords`, at most :data:`RECENT_RECORDS` records and :data:`RECENT_BYTES` bytes of
lines; retractions, events and reasoning take no place): a retraction
whose references all name those records is resolved from them, as the same rules read them
(:func:`resolve_references`), with no read of the file and no wait for the queue to drain (the
named lines are queued before the retraction, so they are durable before it is). Any other
retraction is resolved from the file.
"""

from __future__ import annotations

import os
from array import array
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from shared.committed_lines import lines_before
from shared.errors import RecordValidationError
from shared.layout import open_session_file
from shared.records import RecordType, line_seq, parse_record

#: Bytes of a session file read back at most to find the lines a retraction names.
MAX_LOOKBACK_BYTES = 64 * 1024 * 1024


#: Records an open session remembers at most for the retractions that name them.
RECENT_RECORDS = 256
#: Bytes of lines the remembered records span at most (far below :data:`MAX_LOOKBACK_BYTES`, so a
#: reference resolved from memory is one the file would resolve too).
RECENT_BYTES = 16 * 1024 * 1024
#: Messages a remembered record may hold (a longer replacement history is resolved from the file).
RECENT_MESSAGES = 1024
#: Seqs whose line starts an open session keeps at most (8 bytes each).
LINE_STARTS = 64 * 1024

#: What each reference to one record resolves to: the history index it names (None: the record
#: itself) -> the tool call ids of the message named. A reference not in it names no message.
Targets = dict[int | None, tuple[str, ...]]


def _message_calls(message: dict[str, Any]) -> tuple[str, ...]:
    calls = message.get("tool_calls")
    if not isinstance(calls, list):
        return ()
    return tuple(call["id"] for call in calls if isinstance(call, dict) and isinstance(call.get("id"), str))


def record_targets(record_type: str, payload: Any) -> Targets:
    """The messages a retraction may name in one record: a ``message`` record itself, each entry
    of a ``compacted`` record's replacement history, or the summary of one without a history
    (which holds no calls); nothing in any other record."""
    if not isinstance(payload, dict):
        return {}
    if record_type == RecordType.MESSAGE:
        return {None: _message_calls(payload)}
    if record_type != RecordType.COMPACTED:
        return {}
    history = payload.get("replacement_history")
    if history is None:
        return {None: ()}
    if not isinstance(history, list):
        return {}
    return {
        position: _message_calls(message)
        for position, message in enumerate(history)
        if isinstance(message, dict)
    }


class RecentRecords:
    """The targets of the records an open session queued last, by seq (event loop only).
    Append-only like the file; a session whose round failed is reopened with none."""

    __slots__ = ("_end", "_targets")

    def __init__(self) -> None:
        #: seq -> (targets, where its line starts in the bytes noted so far)
        self._targets: OrderedDict[int, tuple[Targets, int]] = OrderedDict()
        self._end = 0  # bytes of every line noted so far, remembered or not

    def remember(
        self, first_seq: int, records: Iterable[tuple[RecordType, dict[str, Any]]], lines: Sequence[bytes]
    ) -> None:
        """Note queued lines: ``records`` (type, payload) and their encoded ``lines``, in order,
        from seq ``first_seq`` on. A record naming no message is not kept; the oldest kept are
        forgotten past :data:`RECENT_RECORDS`, or once more than :data:`RECENT_BYTES` of lines
        (any) follow their start."""
        seqs = range(first_seq, first_seq + len(lines))
        for seq, (record_type, payload), line in zip(seqs, records, lines, strict=True):
            targets = record_targets(record_type, payload)
            if targets and len(targets) <= RECENT_MESSAGES:
                self._targets[seq] = (targets, self._end)
            self._end += len(line)
        held = self._targets
        while held and (
            len(held) > RECENT_RECORDS or self._end - next(iter(held.values()))[1] > RECENT_BYTES
        ):
            held.popitem(last=False)

    def targets_at(self, seqs: Iterable[int]) -> dict[int, Targets] | None:
        """The targets of the records at ``seqs``, or None when one of them is not remembered."""
        found: dict[int, Targets] = {}
        for seq in seqs:
            held = self._targets.get(seq)
            if held is None:
                return None
            found[seq] = held[0]
        return found


class LineStarts:
    """Where the lines an open session queued since it was opened start in its file, by seq (event
    loop only): a contiguous run of seqs, at most about :data:`LINE_STARTS` of them (the oldest
    forgotten). A session whose round failed is reopened with none, as with :class:`RecentRecords`."""

    __slots__ = ("_end", "_first", "_starts")

    def __init__(self) -> None:
        self._first = 0  # the seq of _starts[0]
        self._starts = array("q")
        self._end = 0  # where the last noted line ends

    def note(self, first_seq: int, start: int, lines: Sequence[bytes]) -> None:
        """Note queued ``lines`` of seqs ``first_seq``... written from byte ``start`` on."""
        if not self._starts or first_seq != self._first + len(self._starts) or start != self._end:
            self._first, self._starts = first_seq, array("q")  # not contiguous: start again
        position = start
        for line in lines:
            self._starts.append(position)
            position += len(line)
        self._end = position
        if len(self._starts) > 2 * LINE_STARTS:  # forget the oldest half at once (amortized)
            dropped = len(self._starts) - LINE_STARTS
            del self._starts[:dropped]
            self._first += dropped

    def spans(self, seqs: Iterable[int]) -> dict[int, tuple[int, int]]:
        """(start, end) of each line of ``seqs`` this knows (end includes the ``\\n``)."""
        starts, first, count = self._starts, self._first, len(self._starts)
        found: dict[int, tuple[int, int]] = {}
        for seq in seqs:
            position = seq - first
            if 0 <= position < count:
                found[seq] = (starts[position], starts[position + 1] if position + 1 < count else self._end)
        return found


def referenced_seqs(retractions: Sequence[tuple[int, dict[str, Any]]], next_seq: int) -> set[int]:
    """The seqs the (request index, retraction payload) pairs name. Raises RecordValidationError
    naming ``retraction.messages[j]`` for a seq not in the session (``next_seq`` or later)."""
    wanted: set[int] = set()
    for index, payload in retractions:
        for position, reference in enumerate(payload["messages"]):
            if reference["seq"] >= next_seq:
                raise RecordValidationError(
                    index,
                    f"retraction.messages[{position}]",
                    f"names seq {reference['seq']}, which is not in the session (its next seq is {next_seq})",
                )
            wanted.add(reference["seq"])
    return wanted


def resolve_retractions(
    path: Path,
    end_offset: int,
    next_seq: int,
    retractions: Sequence[tuple[int, dict[str, Any]]],
    spans: dict[int, tuple[int, int]] | None = None,
) -> None:
    """Check the references of each (request index, retraction payload) and set its ``call_ids``
    (I/O thread). ``end_offset`` is where the durable lines end; ``next_seq`` the session's;
    ``spans`` where some named lines lie (:meth:`LineStarts.spans`), read directly.

    The payloads' shape was checked (writer_service.open_session.check_retraction). Raises
    RecordValidationError naming ``retraction.messages[j]`` for a reference to a seq not
    in the session, to a line that is no message or compaction entry, or further back than
    :data:`MAX_LOOKBACK_BYTES`; OSError when the file cannot be read.
    """
    wanted = referenced_seqs(retractions, next_seq)
    found = _records_at(path, end_offset, wanted, spans or {})
    resolve_references(
        {seq: record_targets(record["type"], record["payload"]) for seq, record in found.items()}, retractions
    )


def resolve_references(found: dict[int, Targets], retractions: Sequence[tuple[int, dict[str, Any]]]) -> None:
    """Set each retraction's ``call_ids`` from ``found`` (the targets of the named records, by
    seq). Raises RecordValidationError naming ``retraction.messages[j]`` for a reference to no
    record of ``found``, or to no message of its record."""
    for index, payload in retractions:
        call_ids: list[str] = []
        for position, reference in enumerate(payload["messages"]):
            calls = found.get(reference["seq"], {}).get(reference.get("index"))
            if calls is None:
                raise RecordValidationError(
                    index,
                    f"retraction.messages[{position}]",
                    f"names {reference!r}, which is no message of the session within the last"
                    f" {MAX_LOOKBACK_BYTES} bytes (a message record, or a compaction's replacement"
                    " history entry or summary)",
                )
            call_ids.extend(calls)
        payload["call_ids"] = list(dict.fromkeys(call_ids))


def _records_at(
    path: Path, end_offset: int, seqs: set[int], spans: dict[int, tuple[int, int]]
) -> dict[int, dict[str, Any]]:
    """The parsed records at ``seqs`` among the lines before ``end_offset``: those of ``spans``
    read where they lie (checked: one whole line of that seq), the rest read back, bounded."""
    found: dict[int, dict[str, Any]] = {}
    if not seqs:
        return found
    fd = open_session_file(path)
    try:
        for seq in sorted(seqs):
            span = spans.get(seq)
            if span is None or span[1] > end_offset or end_offset - span[0] > MAX_LOOKBACK_BYTES:
                continue  # unknown, not durable, or further back than a read back goes
            raw = os.pread(fd, span[1] - span[0], span[0])
            if raw.endswith(b"\n") and line_seq(raw) == seq:
                record = parse_record(raw[:-1])
                if record is not None:
                    found[seq] = record
        missing = seqs.difference(found)
        if missing:
            found.update(_records_read_back(fd, end_offset, missing))
    finally:
        os.close(fd)
    return found


def _records_read_back(fd: int, end_offset: int, seqs: set[int]) -> dict[int, dict[str, Any]]:
    """The parsed records at ``seqs`` among the lines of ``fd`` before ``end_offset`` (read back
    from there, at most :data:`MAX_LOOKBACK_BYTES`)."""
    found: dict[int, dict[str, Any]] = {}
    lowest, read = min(seqs), 0
    for raw in lines_before(fd, min(end_offset, os.fstat(fd).st_size)):
        read += len(raw) + 1
        seq = line_seq(raw)
        if seq is not None and seq in seqs:
            record = parse_record(raw)
            if record is not None:
                found[seq] = record
        if (seq is not None and seq <= lowest) or read > MAX_LOOKBACK_BYTES:
            break
    return found
