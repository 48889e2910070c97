"""Session listing: newest first, paged by an opaque cursor (docs/spec.md §5 Listing).

Order: creation time (from the file name, to the second) descending, then
session id descending; stable while sessions are being created, because the
cursor names the last (time, id) returned rather than a position: sessions
created after the walk started sort before the cursor and never shift a page.

Which sessions exist comes from the sessions folder, brought up to date at every
call; what each one holds comes from the listing index
(:mod:`reader_service.listing_index`), which reads a session's head once and its
tail again only when the file changed. A tenant, parent or agent filter walks
the index's list of the sessions holding that value (the shortest, when several
are given), so it costs what matches, not the number of sessions; before such a
walk every session not yet in the index has its head read, so a missing or stale
index never hides one. The walk steps from key to key (each step finds the next
older session as the index holds it then), so a session that appears or goes
during a page never shifts the others. No session is ever rebuilt. Sessions
without stop facts are listed as unknown, never hidden.
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

from reader_service.listing_index import Activity, ListingIndex, SortKey
from reader_service.stop_facts import StopFactsResult, eligibility_of
from shared.errors import InvalidArgumentError
from shared.naming import SessionFileName, validate_session_id
from shared.records import clip, parse_timestamp
from shared.stop_kinds import StopKind

log = logging.getLogger(__name__)

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 1000


STOP_STATES = ("", "unknown", "stopped", "replayable", "not_replayable", *(kind.value for kind in StopKind))
DEFAULT_MAX_SCAN = 10_000


@dataclass(frozen=True, slots=True)
class SessionFilters:
    """Listing filters; empty values match everything. Bounds are inclusive, UTC."""

    tenant: str = ""
    agent_name: str = ""
    parent_session_id: str = ""
    created_after: datetime | None = None
    created_before: datetime | None = None
    stop_state: str = ""

    def __post_init__(self) -> None:
        if self.parent_session_id:
            validate_session_id(self.parent_session_id, "parent_session_id")
        if self.stop_state not in STOP_STATES:
            raise InvalidArgumentError(
                "stop_state", f"must be one of {list(STOP_STATES)}, got {clip(self.stop_state)!r}"
            )

    def matches_name(self, name: SessionFileName) -> bool:
        """The filters a file name alone decides (no read)."""
        if self.agent_name and name.agent_name != self.agent_name:
            return False
        if self.created_after and name.created_at < self.created_after.replace(microsecond=0):
            return False
        return not (self.created_before and name.created_at > self.created_before)

    def matches_meta(self, meta: dict[str, Any]) -> bool:
        """The filters the session_meta line decides (one head read)."""
        if self.tenant and meta.get("tenant", "") != self.tenant:
            return False
        return not (self.parent_session_id and meta.get("parent_session_id", "") != self.parent_session_id)

    def matches_stop(self, facts: StopFactsResult, meta: dict[str, Any]) -> bool:
        """The stop-state filter (one tail read)."""
        state = self.stop_state
        if not state:
            return True
        if state == "unknown":
            return not facts.found
        if not facts.found:
            return False
        if state == "stopped":
            return True
        if state in ("replayable", "not_replayable"):
            return eligibility_of(facts, meta).replayable == (state == "replayable")
        return facts.stop_kind == state


@dataclass(frozen=True, slots=True)
class ListingPage:
    """One page: the sessions, the token of the next page ("" at the end), the work done."""

    sessions: list[SessionListing]
    next_page_token: str
    scanned: int
    scan_capped: bool


@dataclass(frozen=True, slots=True)
class SessionListing:
    """One listed session: its name parts, its session_meta and its activity (stop facts included)."""

    name: SessionFileName
    meta: dict[str, Any]
    activity: Activity

    @property
    def stop_facts(self) -> StopFactsResult:
        return self.activity.stop_facts


def encode_cursor(key: SortKey) -> str:
    """The opaque page token after the session of sort key ``key`` (created at, session id)."""
    raw = orjson.dumps({"t": key[0].isoformat(), "id": key[1]})
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(token: str) -> tuple[datetime, str]:
    """The (created_at, session_id) a page token points after; InvalidArgumentError if malformed."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        fields = orjson.loads(raw)
        moment, session_id = parse_timestamp(fields["t"]), fields["id"]
    except (binascii.Error, ValueError, KeyError, TypeError) as exc:
        raise InvalidArgumentError("page_token", "is not a token returned by ListSessions") from exc
    if not isinstance(session_id, str):
        raise InvalidArgumentError("page_token", "is not a token returned by ListSessions")
    return moment, session_id


def walk_sessions(
    index: ListingIndex, filters: SessionFilters, cursor: SortKey | None
) -> Iterator[tuple[SortKey, str]]:
    """Candidate sessions newest first, strictly before ``cursor``: (sort key, file name).

    With a tenant, parent or agent filter, the index's shortest list among them;
    otherwise every session. The created range bounds the walk.
    """
    index.sync()
    if filters.tenant or filters.parent_session_id:
        index.ensure_heads()
    given = [
        (kind, value)
        for kind, value in (
            ("tenant", filters.tenant),
            ("parent", filters.parent_session_id),
            ("agent", filters.agent_name),
        )
        if value
    ]
    kind, value = min(given, key=lambda pair: index.count(*pair)) if given else ("", "")
    bound = cursor
    if filters.created_before is not None:
        # Session ids are lowercase hex: every key of that second sorts below (second, "\uffff").
        latest = (filters.created_before, "\uffff")
        bound = latest if bound is None else min(bound, latest)
    floor = filters.created_after.replace(microsecond=0) if filters.created_after else None
    while (key := index.newest_before(kind, value, bound)) is not None:
        if floor is not None and key[0] < floor:
            return
        bound = key
        name = index.name_of(key)
        if name is not None:
            yield key, name


def list_sessions(
    index: ListingIndex,
    page_size: int = DEFAULT_PAGE_SIZE,
    page_token: str = "",
    filters: SessionFilters | None = None,
    max_scan: int = DEFAULT_MAX_SCAN,
) -> ListingPage:
    """One page of sessions, newest first.

    At most ``max_scan`` sessions that pass the name and head filters are examined
    (their activity looked at); when that ends the page early it says so
    (``scan_capped``) and its token continues after the last one examined. Raises
    InvalidArgumentError for a malformed token, a page size outside 0..1000 (0
    means 50) or a negative scan cap.
    """
    if not 0 <= page_size <= MAX_PAGE_SIZE:
        raise InvalidArgumentError(
            "page_size",
            f"must be between 0 and {MAX_PAGE_SIZE} (0: the default, {DEFAULT_PAGE_SIZE}), got {page_size}",
        )
    if max_scan < 0:
        raise InvalidArgumentError("max_scan", f"must be >= 0, got {max_scan}")
    size = page_size or DEFAULT_PAGE_SIZE
    cap = max_scan or DEFAULT_MAX_SCAN
    filters = filters or SessionFilters()
    cursor = decode_cursor(page_token) if page_token else None
    page: list[SessionListing] = []
    scanned = 0
    last_examined: SortKey | None = None
    candidates = walk_sessions(index, filters, cursor)
    for key, name in candidates:
        parsed = index.parsed_name(name)
        if parsed is None or not filters.matches_name(parsed):
            continue
        meta = index.meta(name)
        if not filters.matches_meta(meta):
            continue
        if scanned == cap:
            token = encode_cursor(last_examined) if last_examined is not None else page_token
            return ListingPage(page, token, scanned, True)
        scanned += 1
        last_examined = key
        try:
            activity = index.activity(name)
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as exc:  # one unreadable file must not hide the others
            log.warning("listing %s as unknown: %s", name, exc)
            activity = Activity(0, 0, 0, StopFactsResult(found=False))
        if not filters.matches_stop(activity.stop_facts, meta):
            continue
        page.append(SessionListing(parsed, meta, activity))
        if len(page) == size:
            more = next(candidates, None) is not None
            return ListingPage(page, encode_cursor(key) if more else "", scanned, False)
    return ListingPage(page, "", scanned, False)
