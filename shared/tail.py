"""Reading the last records of a session file from its tail (bounded bytes, any file size).

Both services read tails: the reader for stop facts and listings (docs/spec.md §5), the
writer for its session index at start-up (docs/spec.md §2.10: the next seq and stop state
of every session, never a whole-file read). :func:`read_tail` reads a window of
``window`` bytes from the end (64 KiB by default) and doubles it only while it
does not yet hold ``want`` complete records, so the bytes read depend on the size
of the last records, not of the file. A last line without ``\\n`` is not
committed and is never returned; lines that hold no record (shared.records.record_of_line)
are skipped, and NUL bytes before a record.
A returned record whose line check fails (shared.records) is reported in
``Tail.damage`` with its byte offset: whoever uses it knows it changed.

What makes a file's end clean for the writer (:func:`record_fits`): its last line is
complete, a valid record (shared.records.parse_record: ``{}`` is not one, nor a
line whose check fails) and the record after the one before it (seq + 1).

A session's next seq and stop state are its tail's (:func:`next_seq_of_tail`,
:func:`stop_of_tail`; the writer's index and the reader's stop facts alike): the seq after
its last record; a last record ``stop`` means stopped with its kind, and so does a last
``agent_checkpoint`` (a Stop writes the two together; a process killed between them left
the checkpoint, whose kind it carries); anything else means open.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from shared.rebuild import DegradedEntry, DegradedKind
from shared.records import RecordType, line_check, parse_record, record_of_line

DEFAULT_TAIL_WINDOW = 64 * 1024


@dataclass(frozen=True, slots=True)
class Tail:
    """The last records of a file, newest first, and what reading them cost.

    ``bytes_read`` counts every byte read (the cost); ``clean_end`` is true when the
    file ends with a complete valid record of the session (:func:`record_fits`:
    nothing for the writer's start-up repair to do); ``size`` is the file size in
    bytes; ``damage`` holds a ``line_check_failed`` entry (line 0: not counted from
    a tail; the byte offset exact) per returned record whose line check fails.
    """

    records: list[dict[str, Any]]
    bytes_read: int
    clean_end: bool
    size: int
    damage: list[DegradedEntry] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class TailStop:
    """A stopped session's stop as its tail gives it: ``kind`` as recorded ("" for a stop
    without a kind, as older files have), ``has_stop_record`` false when the last record is
    the checkpoint of a Stop whose stop line was never written."""

    kind: str
    has_stop_record: bool


def next_seq_of_tail(records: Sequence[dict[str, Any]]) -> int:
    """The seq after the last record (records newest first, as :func:`read_tail` gives them),
    0 when there is none. The writer's index and the reader's stop facts both take it so."""
    return int(records[0]["seq"]) + 1 if records else 0


def stop_of_tail(records: Sequence[dict[str, Any]]) -> TailStop | None:
    """The stop state of a session from its last records (newest first, as :func:`read_tail`
    gives them): a :class:`TailStop` when the last is a ``stop`` or an ``agent_checkpoint``
    (a trailing checkpoint means stopped), None when it is anything else or there is none
    (open, or killed before any Stop). Source: docs/spec.md §5 and §2.6; the writer's index and the
    reader's stop facts both decide by it."""
    if not records:
        return None
    last = records[0]
    record_type = last.get("type")
    if record_type != RecordType.STOP and record_type != RecordType.AGENT_CHECKPOINT:
        return None
    return TailStop(str(last["payload"].get("stop_kind") or ""), record_type == RecordType.STOP)


def last_records(
    tail: bytes, partial_first: bool, want: int, base: int = 0
) -> tuple[list[dict[str, Any]], list[DegradedEntry]]:
    """Up to ``want`` last records (shared.records.record_of_line) of ``tail``, newest first, and
    the damage entries of those whose line check fails.

    ``partial_first``: the first line of ``tail`` may be cut (the window starts
    inside it) and is skipped. Bytes after the last ``\\n`` are ignored. ``base`` is
    the file offset of ``tail``'s first byte (for the offsets of damage entries).
    """
    found: list[dict[str, Any]] = []
    damage: list[DegradedEntry] = []
    cut = tail.rfind(b"\n")
    while cut >= 0 and len(found) < want:
        start = tail.rfind(b"\n", 0, cut) + 1
        if start == 0 and partial_first:
            break
        raw = tail[start:cut].lstrip(b"\x00")
        cut = start - 1
        record = record_of_line(raw)
        if record is not None:
            found.append(record)
            if line_check(raw, record) is False:
                damage.append(
                    DegradedEntry(
                        DegradedKind.LINE_CHECK_FAILED,
                        0,
                        base + start,
                        "the line's crc32c does not match its bytes: it changed after it was written",
                    )
                )
    return found, damage


def record_fits(tail: bytes, start: int, end: int, base: int) -> bool:
    """Whether the line ``tail[start:end]`` is a valid record of its session: a record
    (shared.records.parse_record) whose seq is one more than the record on the line
    before it, when that line is in ``tail`` and holds a record (the first line of a
    file has none before it; a damaged one before it is mid-file damage, not this line's).
    ``base`` is the file offset of ``tail[0]``."""
    record = parse_record(tail[start:end])
    if record is None:
        return False
    if start == 0:
        return True  # the file's first line, or the previous line is outside the window
    previous_start = tail.rfind(b"\n", 0, start - 1) + 1
    if previous_start == 0 and base > 0:
        return True  # the previous line may begin before the window: not known here
    previous = parse_record(tail[previous_start : start - 1])
    return previous is None or previous["seq"] == record["seq"] - 1


def _ends_clean(tail: bytes, base: int) -> bool:
    if not tail.endswith(b"\n"):
        return False
    start = tail.rfind(b"\n", 0, len(tail) - 1) + 1
    return record_fits(tail, start, len(tail) - 1, base)


def read_tail(fd: int, want: int, window: int = DEFAULT_TAIL_WINDOW) -> Tail:
    """Read the last ``want`` complete records of the open file ``fd`` (positional reads only).

    Bytes read: ``window`` (at most the file size), doubled only while the window
    holds fewer than ``want`` records. Raises OSError when the file cannot be read.
    """
    size = os.fstat(fd).st_size
    window = min(window, size)
    total = 0
    while True:
        base = size - window
        tail = os.pread(fd, window, base)
        total += len(tail)
        records, damage = last_records(tail, partial_first=window < size, want=want, base=base)
        if len(records) >= want or window >= size:
            return Tail(records, total, _ends_clean(tail, base), size, damage)
        window = min(size, window * 2)
