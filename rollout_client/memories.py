"""The injection block: memory artifacts rendered for a new session's prompt (docs/memory.md).

:func:`render_memory_block` takes what a read returned (shared.memory.MemoryView:
``client.memories(...)`` through the reader, or rollout_memory.get_memories on the data
root's host) and renders text that says, for every memory,
where it comes from (session and seqs, and who said it: the stamped kind) and how old it
is, marks stale ones, lists superseded ones apart as not to be used, and states that the
current instructions and files take precedence::

    <memories>
    Memories distilled from earlier sessions. They may be stale or wrong: the user's current
    instructions and the current files take precedence over them.
    - The Pro plan costs $25. (from session 0193… seq 1 (user); 2 h old)
    Superseded (kept for reference; do not rely on them):
    - The Pro plan costs $20. (from session 0192… seq 1 (user); superseded by mem_… on the
      evidence of session 0193… seq 1)
    </memories>
"""

from __future__ import annotations

from collections.abc import Sequence

from shared.memory import MemoryView

PRECEDENCE = (
    "Memories distilled from earlier sessions. They may be stale or wrong: the user's current"
    " instructions and the current files take precedence over them."
)


def render_age(seconds: float) -> str:
    """An age in words: ``45 s``, ``12 min``, ``5 h``, ``3 d`` old."""
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{int(seconds // size)} {unit} old"
    return f"{int(seconds)} s old"


def _origin(view: MemoryView) -> str:
    parts = []
    for source in view.artifact.sources:
        cited = ", ".join(f"{c.seq} ({c.kind.value})" for c in source.citations)
        parts.append(f"session {source.session_id} seq {cited}")
    return "from " + "; ".join(parts)


def render_memory_block(views: Sequence[MemoryView]) -> str:
    """The injection block of ``views`` (current ones first, in the order given; superseded
    ones after, apart). Empty string when there is nothing to inject."""
    if not views:
        return ""
    lines = ["<memories>", PRECEDENCE]
    for view in views:
        if view.superseded:
            continue
        stale = f"; possibly stale: source {', '.join(m.value for m in view.marks)}" if view.marks else ""
        lines.append(f"- {view.artifact.text} ({_origin(view)}; {render_age(view.age_seconds)}{stale})")
    superseded = [view for view in views if view.superseded]
    if superseded:
        lines.append("Superseded (kept for reference; do not rely on them):")
        for view in superseded:
            evidence = view.superseded_evidence
            because = (
                f" on the evidence of session {evidence.evidence_session_id} seq {evidence.evidence_seq}"
                if evidence is not None
                else ""
            )
            lines.append(
                f"- {view.artifact.text} ({_origin(view)}; superseded by {view.superseded_by}{because})"
            )
    lines.append("</memories>")
    return "\n".join(lines)
