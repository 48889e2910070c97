"""Stop facts from a session file's tail (docs/spec.md §5, seed rules 6 and 9).

Only the end of the file is read: a window of ``tail_window`` bytes (64 KiB by
default) that grows only when it does not yet hold the last complete records,
so the bytes read do not depend on the file's size. A last line without
``\\n`` is not yet committed and is ignored (the reader never repairs).

* the last record is ``stop``: found, with its kind, reason and the checkpoint
  just before it (the last checkpoint wins: earlier pause/continue rounds are
  never looked at);
* the last record is ``agent_checkpoint``: found, ``has_stop_record`` false (the
  process was killed between the two): still a stopped session;
* anything else: ``found=false``, shown as "unknown" (running, or killed before
  any Stop), never "cannot continue".

A record read whose line check fails (shared.records) is reported in ``damage``
(its byte offset), and such a session is never eligible to resume as-is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shared.layout import read_session_file
from shared.rebuild import CheckpointRecord, DegradedEntry, checkpoint_record
from shared.records import RecordType
from shared.remedies import SEE_VERIFY
from shared.stop_kinds import ResumeEligibility, classify_session
from shared.tail import DEFAULT_TAIL_WINDOW as DEFAULT_TAIL_WINDOW  # listing and server take it from here
from shared.tail import next_seq_of_tail, read_tail, stop_of_tail


@dataclass(frozen=True, slots=True)
class StopFactsResult:
    """What the tail says; ``tail_bytes_read`` is the cost of finding out (bytes).

    ``last_record_ts`` is the ``ts`` of the last complete record (when the session last
    changed; empty when the tail holds none); ``next_seq`` the seq after it (0 when none);
    ``damage`` the records read whose line check fails (shared.tail).
    """

    found: bool
    stop_kind: str = ""
    reason: str = ""
    error: dict[str, Any] | None = None
    checkpoint: CheckpointRecord | None = None
    has_stop_record: bool = False
    stop_seq: int = -1
    tail_bytes_read: int = 0
    last_record_ts: str = ""
    next_seq: int = 0
    damage: list[DegradedEntry] = field(default_factory=list)


def read_stop_facts(path: Path, tail_window: int = DEFAULT_TAIL_WINDOW) -> StopFactsResult:
    """Read the stop facts of one session file from its tail.

    Raises FileNotFoundError when the file is gone, OSError ELOOP for a symbolic link
    (never followed). Bytes read: ``tail_window``,
    doubled only while the window holds fewer than the last two complete records.
    """
    with read_session_file(path) as handle:
        tail = read_tail(handle.fileno(), want=2, window=tail_window)
    records, total_read, damage = tail.records, tail.bytes_read, tail.damage
    if not records:
        return StopFactsResult(found=False, tail_bytes_read=total_read)
    last = records[0]
    next_seq = next_seq_of_tail(records)  # the writer's index takes it so too
    last_ts = last.get("ts")
    last_ts = last_ts if isinstance(last_ts, str) else ""
    stop = stop_of_tail(records)  # the writer's index decides by the same rule
    if stop is None:
        return StopFactsResult(
            found=False, tail_bytes_read=total_read, last_record_ts=last_ts, next_seq=next_seq, damage=damage
        )
    if stop.has_stop_record:
        payload = last["payload"]
        checkpoint = None
        if len(records) > 1 and records[1].get("type") == RecordType.AGENT_CHECKPOINT:
            checkpoint = checkpoint_record(records[1]["seq"], records[1]["payload"])
        error = payload.get("error") if isinstance(payload.get("error"), dict) else None
        return StopFactsResult(
            found=True,
            stop_kind=stop.kind,
            reason=str(payload.get("reason", "")),
            error=error,
            checkpoint=checkpoint,
            has_stop_record=True,
            stop_seq=last["seq"],
            tail_bytes_read=total_read,
            last_record_ts=last_ts,
            next_seq=next_seq,
            damage=damage,
        )
    return StopFactsResult(
        found=True,
        stop_kind=stop.kind,
        reason="the process stopped after writing its checkpoint and before its stop record",
        checkpoint=checkpoint_record(last["seq"], last["payload"]),
        has_stop_record=False,
        tail_bytes_read=total_read,
        last_record_ts=last_ts,
        next_seq=next_seq,
        damage=damage,
    )


UNKNOWN_ELIGIBILITY = ResumeEligibility(
    False, "unknown: no stop facts in the tail (running, or killed before any Stop)", None
)


def eligibility_of(facts: StopFactsResult, meta: dict[str, Any]) -> ResumeEligibility:
    """Resume eligibility of a session from its stop facts and session_meta (default-deny).

    No stop facts: not replayable, reason "unknown"; a damaged tail: not replayable;
    otherwise :func:`shared.stop_kinds.classify_session`, as the writer's Resume.
    """
    if facts.damage:
        first = facts.damage[0]
        return ResumeEligibility(
            False,
            f"the tail is damaged: a record at byte {first.offset} fails its line check ({SEE_VERIFY})",
            None,
        )
    if not facts.found:
        return UNKNOWN_ELIGIBILITY
    return classify_session(facts.stop_kind or None, meta)
