"""Fork points: where a fork cuts its source, never splitting a tool pair or a reasoning from its answer.

A fork keeps the source's records up to a fork point, byte for byte (original
seqs and timestamps). The point is either a seq (keep ``seq <= at_seq``) or "before
the Nth user message". A point that falls between an assistant tool call and its
output is refused (docs/spec.md §2.8): the fork would start with a call whose output
exists but was cut away; so is a point right after a ``reasoning`` record, which
would otherwise attach to whatever answer the fork writes next.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared.committed_lines import CommittedLines
from shared.errors import InvalidArgumentError, SessionStateError
from shared.layout import read_session_file
from shared.reasons import seq_subject
from shared.records import RecordType, clip, record_of_line


@dataclass(frozen=True, slots=True)
class ForkPoint:
    """``seq``: last source seq kept; offsets in bytes of the source file."""

    seq: int
    end_offset: int
    first_line_end: int


#: Bytes read at a time while looking for a fork point.
READ_CHUNK_BYTES = 1 << 20


def _records(path: Path, start: int = 0) -> Iterator[tuple[int, int, dict[str, Any] | None]]:
    """(line start, line end incl. newline, record or None: shared.records.record_of_line) of the
    committed lines from ``start``.

    Reads the file in chunks: memory stays bounded whatever its size.
    """
    with read_session_file(path) as handle:
        offset = start
        for raw in CommittedLines(handle.fileno(), start, None, READ_CHUNK_BYTES).lines():
            end = offset + len(raw) + 1
            yield offset, end, record_of_line(raw)
            offset = end


def _first_line_end(path: Path) -> int:
    """The offset just after the first line (0 when the file has no complete line)."""
    with read_session_file(path) as handle:
        size = 0
        while chunk := handle.read(64 * 1024):
            cut = chunk.find(b"\n")
            if cut >= 0:
                return size + cut + 1
            size += len(chunk)
    return 0


def find_fork_point(path: Path, at_seq: int | None, before_user_message: int | None) -> ForkPoint:
    """Locate the fork point in a source file (read in chunks, bounded memory).

    Raises InvalidArgumentError when neither or both points are given, or when the
    point is outside the session.
    """
    if (at_seq is None) == (before_user_message is None):
        raise InvalidArgumentError("at", "give exactly one of at_seq and before_user_message")
    first_line_end = _first_line_end(path)
    if first_line_end == 0:
        raise InvalidArgumentError("session_id", "the source session has no committed record")
    last_seq, users, last_type = 0, 0, ""
    for start, end, record in _records(path, first_line_end):
        if record is None:
            continue
        seq, record_type = record["seq"], record["type"]
        is_user = record_type == RecordType.MESSAGE and record["payload"].get("role") == "user"
        if before_user_message is not None and is_user:
            users += 1
            if users == before_user_message:
                return _checked(ForkPoint(last_seq, start, first_line_end), last_type)
        last_seq, last_type = seq, record_type
        if at_seq is not None and seq == at_seq:
            return _checked(ForkPoint(seq, end, first_line_end), last_type)
    if at_seq == 0:
        return ForkPoint(0, first_line_end, first_line_end)
    if at_seq is not None:
        raise InvalidArgumentError("at_seq", f"is {at_seq}, but the session holds seqs 0..{last_seq}")
    raise InvalidArgumentError(
        "before_user_message", f"is {before_user_message}, but the session has {users} user messages"
    )


def _checked(point: ForkPoint, last_type: str) -> ForkPoint:
    """Refuse a point whose last kept record is a reasoning: it would attach to the fork's next answer."""
    if last_type == RecordType.REASONING:
        raise SessionStateError(
            f"fork point seq {point.seq} is a reasoning record whose answer follows it; fork at seq"
            f" {point.seq + 1} (with the answer) or at seq {point.seq - 1} (without the reasoning)",
            subject=seq_subject(point.seq),
            precondition="a reasoning record stays with its answer",
        )
    return point


def check_fork_keeps_pairs(path: Path, point: ForkPoint, unanswered_call_ids: Collection[str]) -> None:
    """Refuse a fork point that cuts a tool call (kept) from its output (cut away).

    Raises SessionStateError naming the call and the seq of its output.
    """
    if not unanswered_call_ids:
        return
    for _, _, record in _records(path, point.end_offset):
        if record is None or record["type"] != RecordType.MESSAGE:
            continue
        payload = record["payload"]
        if payload.get("role") == "tool":
            call_id = payload.get("tool_call_id")
            if call_id in unanswered_call_ids:
                seq = record.get("seq")
                raise SessionStateError(
                    f"fork point seq {point.seq} falls between tool call {clip(call_id)!r} and its output at"
                    f" seq {seq}; fork at seq {seq} or later, or before the call",
                    subject=seq_subject(point.seq),
                    precondition=f"tool pair {clip(call_id)!r} ends at seq {seq}",
                )
