"""GetRound by round id alone, and how many sessions hold a round (issue 24: the round store's
reference count).

A round id is derived from the session that first wrote the trigger and its seq
(shared.rounds.round_id), so it cannot be read back: the reader keeps a derived index
from each round id it has read to that (session, seq) pair (the round cache's origins,
reader_service.rounds). A round id it has not read yet is looked for by reading the
rounds of the caller's sessions whose files grew since they were last noted, newest
first, until it is found.

The sessions holding a round are the session that wrote its trigger and every fork that
copied that seq, transitively: a fork of a session holds its seqs up to its fork point
(``forked_from`` of its session_meta, from the listing index's heads). They are found
from the heads alone (no session is read), within the caller's tenant.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from reader_service.listing import SessionFilters, walk_sessions
from reader_service.listing_index import ListingIndex
from reader_service.rounds import RoundCache
from serving.tenancy import caller_tenant, check_visible
from shared.errors import InvalidArgumentError, SessionNotFoundError
from shared.lineage import Lineage, TombstoneOf, fork_source

#: Deleted sources followed back from the listed forks for one holders lookup.
MAX_DELETED_SOURCES = 4096
#: (session id, path of its file) -> how the round cache learns the session's lineage.
LineageFor = Callable[[str, Path], Callable[[], Lineage]]


def _visible(session_id: str, meta: Mapping[str, Any]) -> bool:
    """Whether the caller sees the session whose session_meta is ``meta`` (serving.tenancy)."""
    try:
        check_visible(session_id, lambda: meta)
    except SessionNotFoundError:
        return False
    return True


def holders(index: ListingIndex, owner: str, seq: int, tombstone_of: TombstoneOf) -> list[str]:
    """Ids of the sessions the caller sees that hold the round whose trigger ``owner`` wrote at
    ``seq``: ``owner`` first when it is still there, then its forks that copied ``seq`` (fork
    point >= seq), theirs, and so on, oldest first at each step. A deleted fork in between is
    followed through its deletion record (``tombstone_of``: shared.lineage.fork_source, the step
    of the walk that names the round), so its forks still count."""
    index.sync()  # forks made since the last call are listed
    index.ensure_heads()
    found: list[str] = []
    try:
        index.locate(owner)
        found.append(owner)
    except SessionNotFoundError:
        pass  # deleted (or another tenant's): its forks may still hold the round
    deleted = _deleted_forks(index, tombstone_of)
    frontier, seen = [owner], {owner}
    while frontier:
        source = frontier.pop(0)
        children: list[tuple[str, dict[str, Any] | None]] = list(_forks(index, source))
        children += [(child, None) for child in deleted.get(source, [])]
        for child, meta in children:
            heads = {child: meta} if meta is not None else {}
            origin = fork_source(child, heads.get, tombstone_of)
            if origin is None or origin[0] != source or origin[1] < seq or child in seen:
                continue
            seen.add(child)
            frontier.append(child)
            if meta is not None and _visible(child, meta):
                found.append(child)
    return found


def _deleted_forks(index: ListingIndex, tombstone_of: TombstoneOf) -> dict[str, list[str]]:
    """Source id -> the deleted sessions forked from it, found from the listed forks the caller
    sees whose source the caller cannot locate, by their deletion records, and on back through
    deleted sources of deleted sources. A deletion record is read only for such a source."""
    deleted: dict[str, list[str]] = {}
    waiting = [
        source
        for source in index.fork_sources()
        if any(_visible(name_id, meta) for name_id, meta in _forks(index, source))
        and not _located(index, source)
    ]
    looked = set(waiting)
    while waiting:
        source = waiting.pop()
        deletion = tombstone_of(source)
        if deletion is None or deletion.forked_from is None:
            continue
        parent = deletion.forked_from[0]
        deleted.setdefault(parent, []).append(source)
        if parent not in looked and len(looked) < MAX_DELETED_SOURCES and not _located(index, parent):
            looked.add(parent)
            waiting.append(parent)
    return deleted


def _forks(index: ListingIndex, source: str) -> list[tuple[str, dict[str, Any]]]:
    """(session id, session_meta) of each listed session forked directly from ``source``."""
    found = []
    for name, meta in index.forks_of(source):
        parsed = index.parsed_name(name)
        if parsed is not None:
            found.append((parsed.session_id, meta))
    return found


def _located(index: ListingIndex, session_id: str) -> bool:
    """Whether the caller can locate ``session_id`` (listed and visible)."""
    try:
        index.locate(session_id)
    except (SessionNotFoundError, InvalidArgumentError, OSError):
        return False
    return True


def find_origin(
    index: ListingIndex, cache: RoundCache, round_id: str, lineage_for: LineageFor
) -> tuple[str, int] | None:
    """(session that wrote the trigger, its seq) of round ``round_id``: from the round cache's
    index, else by reading the rounds of the caller's sessions not noted at their current size,
    newest first, until it is there; None when no session the caller sees holds it. A file
    that cannot be read is passed over."""
    known = cache.origin(round_id)
    if known is not None:
        return known
    for _, name in walk_sessions(index, SessionFilters(tenant=caller_tenant("")), None):
        parsed = index.parsed_name(name)
        if parsed is None:
            continue
        path = index.path_of(name)
        try:
            if cache.noted_bytes(path) == path.stat().st_size:
                continue
            if not _visible(parsed.session_id, index.meta(name)):
                continue
            cache.rounds(path, lineage_for(parsed.session_id, path))
        except (OSError, SessionNotFoundError):
            continue
        known = cache.origin(round_id)
        if known is not None:
            return known
    return None
