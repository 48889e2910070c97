"""Fork lineage: which session first wrote each seq of a fork, through sources live or deleted
(docs/spec.md §2.8, docs/deletion.md §1.2).

A fork's ``session_meta.forked_from`` names its source and fork seq; a deleted session's
deletion record keeps its own ``forked_from`` (shared.deletions), so a walk goes on through a
deleted source. :func:`fork_source` is the one step ("who was this session forked from, live
or deleted") and :func:`lineage_of` the one walk: the reader's round ids and round holders
and the writer's ``round_interrupted`` record all call them, each with its own lookups (pure
over them: no I/O here).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from shared.deletions import Deletion

#: Sources followed back from a fork (:func:`lineage_of`).
MAX_FORK_DEPTH = 32

#: The ``session_meta`` payload of a live session (one whose file is there), None (or {}) when none is.
MetaOf = Callable[[str], Mapping[str, Any] | None]
#: The deletion record of a deleted session, None when it was not deleted (or cannot be read).
TombstoneOf = Callable[[str], Deletion | None]


@dataclass(frozen=True, slots=True)
class Lineage:
    """Who first wrote each seq of a session: ``forks`` lists (source session id, fork seq) from
    the oldest ancestor to the direct source (a session that is no fork: empty), each fork seq
    being where the next session (or this one) was forked from that source. Seq ``s`` was
    copied from the direct source when ``s <= `` its fork seq, and so on back: the last source
    reached that way wrote it (a fork point may be below its source's own: a fork of a fork
    taken before the first fork's point holds only its own records after it)."""

    session_id: str
    forks: tuple[tuple[str, int], ...] = ()

    def owner(self, seq: int) -> str:
        """The session that first wrote ``seq`` of this one."""
        writer = self.session_id
        for source, point in reversed(self.forks):
            if seq > point:
                break
            writer = source
        return writer


def forked_from(session_meta: Mapping[str, Any] | None) -> tuple[str, int] | None:
    """(source session id, fork seq) a ``session_meta`` payload records, or None (no fork)."""
    origin = (session_meta or {}).get("forked_from")
    if (
        isinstance(origin, dict)
        and isinstance(origin.get("session_id"), str)
        and type(origin.get("seq")) is int
    ):
        return origin["session_id"], origin["seq"]
    return None


def fork_source(session_id: str, meta_of: MetaOf, tombstone_of: TombstoneOf) -> tuple[str, int] | None:
    """(source id, fork seq) ``session_id`` was forked from: its ``session_meta`` when it is live,
    else its deletion record's ``forked_from``; None when it is no fork, or neither is found. An
    empty ``session_meta`` (a head that cannot be read: a file going as it is deleted) counts as
    none, so the deletion record answers."""
    meta = meta_of(session_id)
    if meta:
        return forked_from(meta)
    deletion = tombstone_of(session_id)
    return deletion.forked_from if deletion is not None else None


def lineage_of(
    session_id: str, meta: Mapping[str, Any] | None, meta_of: MetaOf, tombstone_of: TombstoneOf
) -> Lineage:
    """The lineage of a session whose session_meta is ``meta``: each fork source's id and fork seq,
    oldest first, each source's own source found by :func:`fork_source` (live or deleted). A
    source found neither live nor deleted ends the walk (its rounds are named by the oldest
    source found); a cycle ends it too; at most :data:`MAX_FORK_DEPTH` sources."""
    forks: list[tuple[str, int]] = []
    origin = forked_from(meta)
    seen = {session_id}
    while origin is not None and len(forks) < MAX_FORK_DEPTH and origin[0] not in seen:
        source = origin[0]
        forks.insert(0, origin)
        seen.add(source)
        origin = fork_source(source, meta_of, tombstone_of)
    return Lineage(session_id, tuple(forks))
