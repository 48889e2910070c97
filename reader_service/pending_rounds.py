"""ListPendingRounds: rounds a crash left pending, newest first, so a host closes them (issue 24).

A session's round is left pending by a crash when the session has no stop record,
nothing was appended to it for a while (its file's modification time is older than
the request's idle time, :data:`DEFAULT_IDLE_SECONDS` unless it says) and its last
round has no final answer: :func:`shared.rounds.round_to_close`, the rule the
writer's Resume applies before it records the round interrupted. The sessions are
those of the caller's tenant as the listing index holds them (shared.tenancy); each
one's stop facts and modification time come from the index's activity (a tail read
when the file changed), and only open, idle sessions in the window have their
rounds read, once per state of their file (reader_service.rounds.RoundCache.to_close).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from reader_service.listing import SessionFilters, walk_sessions
from reader_service.listing_index import ListingIndex
from rollout.v1 import reader_pb2
from shared.errors import InvalidArgumentError, clip
from shared.records import format_timestamp, parse_timestamp
from shared.rounds import Round

log = logging.getLogger(__name__)

#: Rounds returned unless the request says (and the most it may ask).
DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
#: Seconds without an append after which an open session counts as left by a crash.
DEFAULT_IDLE_SECONDS = 300

#: (session id, path of its file) -> the round its file leaves pending, or None.
ToClose = Callable[[str, Path], Round | None]


@dataclass(frozen=True, slots=True)
class PendingQuery:
    """A checked ListPendingRounds request: the tenant it acts in ("" every tenant, without
    authentication), the lower bound on the last append (None: any), the most rounds to
    return and the idle time in nanoseconds."""

    tenant: str
    since: datetime | None
    limit: int
    idle_ns: int


@dataclass(frozen=True, slots=True)
class PendingRound:
    """A round left pending: its session, the round, and its file's modification time (ns)."""

    session_id: str
    round: Round
    last_append_ns: int


def check_pending_request(request: reader_pb2.ListPendingRoundsRequest, tenant: str) -> PendingQuery:
    """The query of a request whose tenant was resolved (shared.tenancy.caller_tenant) to
    ``tenant``; InvalidArgumentError naming the field otherwise."""
    if not 0 <= request.limit <= MAX_LIMIT:
        raise InvalidArgumentError(
            "limit", f"must be 0..{MAX_LIMIT} (0: {DEFAULT_LIMIT}), got {request.limit}"
        )
    if request.idle_seconds < 0:
        raise InvalidArgumentError(
            "idle_seconds", f"must be >= 0 (0: {DEFAULT_IDLE_SECONDS}), got {request.idle_seconds}"
        )
    since = None
    if request.since:
        try:
            since = parse_timestamp(request.since)
        except ValueError as exc:
            raise InvalidArgumentError(
                "since", f"{clip(request.since)!r} is not an RFC 3339 time such as 2026-11-30T10:00:00Z"
            ) from exc
    return PendingQuery(
        tenant,
        since,
        request.limit or DEFAULT_LIMIT,
        (request.idle_seconds or DEFAULT_IDLE_SECONDS) * 1_000_000_000,
    )


def pending_rounds(
    index: ListingIndex, to_close: ToClose, query: PendingQuery, now_ns: int
) -> tuple[list[PendingRound], int]:
    """(rounds left pending, newest first, at most ``query.limit``; open idle sessions looked at)
    at the time ``now_ns`` (nanoseconds since the epoch). A session file that cannot be read
    is skipped and logged."""
    filters = SessionFilters(tenant=query.tenant)
    since_ns = int(query.since.timestamp() * 1_000_000_000) if query.since is not None else None
    found: list[PendingRound] = []
    scanned = 0
    for _, name in walk_sessions(index, filters, None):
        parsed = index.parsed_name(name)
        if parsed is None or not filters.matches_meta(index.meta(name)):
            continue
        try:
            activity = index.activity(name)
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as exc:
            log.warning("pending rounds: skipping %s: %s", name, exc)
            continue
        if activity.stop_facts.found or activity.mtime_ns > now_ns - query.idle_ns:
            continue
        if since_ns is not None and activity.mtime_ns < since_ns:
            continue
        scanned += 1
        try:
            left = to_close(parsed.session_id, index.path_of(name))
        except OSError as exc:
            log.warning("pending rounds: skipping %s: %s", name, exc)
            continue
        if left is not None:
            found.append(PendingRound(parsed.session_id, left, activity.mtime_ns))
    found.sort(key=lambda pending: (pending.last_append_ns, pending.session_id), reverse=True)
    return found[: query.limit], scanned


def last_append_at(pending: PendingRound) -> str:
    """The RFC 3339 UTC form of a pending round's last append."""
    return format_timestamp(datetime.fromtimestamp(pending.last_append_ns / 1e9, UTC))
