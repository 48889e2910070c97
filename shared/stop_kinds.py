"""The stop-kind vocabulary and default-deny resume eligibility (docs/spec.md §5, seed rule 10).

Only ``paused`` and ``cancelled`` may be replayed as-is; a legacy stop record
without a kind counts as ``cancelled``; every other declared kind is refused with
its own reason; an unrecognized kind is refused; a child session without both
delegation coordinates is refused ("no delegation coordinates"), never taken for
a root session. :func:`classify_resume` matches every :class:`StopKind` member
explicitly and ends in ``assert_never``, so a new kind cannot slip into a
default branch: adding one fails type checking and the test that walks the enum.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, assert_never

from shared.session_meta import is_child


class StopKind(enum.StrEnum):
    """Why a run stopped; stored as the string value in ``stop`` and ``agent_checkpoint``."""

    COMPLETED = "completed"
    PAUSED = "paused"
    CANCELLED = "cancelled"
    FAILED = "failed"
    BUDGET_EXCEEDED = "budget_exceeded"
    INTERRUPTED = "interrupted"


@dataclass(frozen=True, slots=True)
class ResumeEligibility:
    """Whether a stopped session may be continued exactly, and why (a sentence)."""

    replayable: bool
    reason: str
    stop_kind: StopKind | None


#: The declared kinds as callers write them, in declaration order: what a refusal lists.
DECLARED_STOP_KINDS = ", ".join(kind.value for kind in StopKind)


def parse_stop_kind(raw: str) -> StopKind | None:
    """The declared kind named by ``raw``, or None when ``raw`` names none."""
    try:
        return StopKind(raw)
    except ValueError:
        return None


def stop_kind_named(raw: str) -> StopKind:
    """The declared kind named by ``raw`` (exactly its value: ``"paused"``).

    Raises ValueError naming ``raw`` and listing the declared kinds when it names none.
    """
    kind = parse_stop_kind(raw)
    if kind is None:
        raise ValueError(f"{raw!r} is not a stop kind: use one of {DECLARED_STOP_KINDS}")
    return kind


def _classify_kind(kind: StopKind) -> ResumeEligibility:
    match kind:
        case StopKind.PAUSED:
            return ResumeEligibility(True, "paused: the run may continue exactly where it stopped", kind)
        case StopKind.CANCELLED:
            return ResumeEligibility(True, "cancelled: the run may continue exactly where it stopped", kind)
        case StopKind.COMPLETED:
            return ResumeEligibility(False, "completed: the task finished; start a new session or fork", kind)
        case StopKind.FAILED:
            return ResumeEligibility(
                False, "failed: continuing as-is would repeat the failure and its side effects", kind
            )
        case StopKind.BUDGET_EXCEEDED:
            return ResumeEligibility(
                False, "budget_exceeded: the budget is spent; raise it and fork instead", kind
            )
        case StopKind.INTERRUPTED:
            return ResumeEligibility(
                False, "interrupted: the process stopped mid-step; its last step may be incomplete", kind
            )
        case _:
            assert_never(kind)


def classify_resume(
    raw_stop_kind: str | None,
    *,
    is_child: bool = False,
    delegation_id: str = "",
    parent_session_id: str = "",
) -> ResumeEligibility:
    """Classify a stopped session, default-deny.

    ``raw_stop_kind`` is the stored string; None or "" means a legacy stop record
    without a kind (treated as cancelled). ``is_child`` is true when the session
    names an agent or any delegation field; such a session needs both coordinates.
    """
    if is_child and (not delegation_id or not parent_session_id):
        missing = "delegation_id" if not delegation_id else "parent_session_id"
        return ResumeEligibility(
            False, f"no delegation coordinates: this child session has an empty {missing}", None
        )
    if not raw_stop_kind:
        eligibility = _classify_kind(StopKind.CANCELLED)
        return ResumeEligibility(
            eligibility.replayable,
            "legacy stop record without a stop kind: treated as cancelled; " + eligibility.reason,
            StopKind.CANCELLED,
        )
    kind = parse_stop_kind(raw_stop_kind)
    if kind is None:
        return ResumeEligibility(False, f"unrecognized stop kind {raw_stop_kind!r}", None)
    return _classify_kind(kind)


def classify_session(raw_stop_kind: str | None, meta: Mapping[str, Any]) -> ResumeEligibility:
    """Classify a stopped session from its stop kind and its ``session_meta`` payload.

    Who is a child is decided by :func:`shared.session_meta.is_child` (the
    ``role`` said at creation; in older files, a session naming an agent or any
    delegation field). The writer's Resume and the reader's stop facts both call
    this, so a session is never resumable on one side and refused on the other.
    """
    return classify_resume(
        raw_stop_kind,
        is_child=is_child(meta),
        delegation_id=str(meta.get("delegation_id", "")),
        parent_session_id=str(meta.get("parent_session_id", "")),
    )
