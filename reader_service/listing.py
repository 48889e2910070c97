"""Session listing: newest first, paged by an opaque cursor (SPEC §5 Listing).

Order: creation time (from the file name, to the second) descending, then
session id descending; stable while sessions are being created, because the
cursor names the last (time, id) returned rather than a position: sessions
created after the walk started sort before the cursor and never shift a page.
Each listed session costs one read of its head (the ``session_meta`` line, for
tenant and delegation fields) and one tail read (stop facts); no session is
ever rebuilt. Sessions without stop facts are listed as unknown, never hidden.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import logging
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from reader_service.stop_facts import DEFAULT_TAIL_WINDOW, StopFactsResult, eligibility_of, read_stop_facts
from shared.errors import InvalidArgumentError
from shared.layout import DataRoot
from shared.naming import SessionFileName, validate_session_id
from shared.stop_kinds import StopKind

log = logging.getLogger(__name__)

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 1000
HEAD_WINDOW = 64 * 1024


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
            validate_session_id(self.parent_session_id)
        if self.stop_state not in STOP_STATES:
            raise InvalidArgumentError(
                "stop_state", f"must be one of {list(STOP_STATES)}, got {self.stop_state!r}"
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
    """One listed session: its name parts, its session_meta and its stop facts."""

    name: SessionFileName
    meta: dict[str, Any]
    stop_facts: StopFactsResult


def read_session_meta(path: Path) -> dict[str, Any]:
    """The payload of a session's first line (empty dict if it is not a session_meta)."""
    with path.open("rb") as handle:
        head = handle.read(HEAD_WINDOW)
        while b"\n" not in head:
            more = handle.read(HEAD_WINDOW)
            if not more:
                return {}
            head += more
    try:
        record = orjson.loads(head[: head.index(b"\n")])
    except orjson.JSONDecodeError:
        return {}
    if (
        isinstance(record, dict)
        and record.get("type") == "session_meta"
        and isinstance(record.get("payload"), dict)
    ):
        payload: dict[str, Any] = record["payload"]
        return payload
    return {}


def encode_cursor(name: SessionFileName) -> str:
    """The opaque page token after ``name``."""
    raw = orjson.dumps({"t": name.created_at.isoformat(), "id": name.session_id})
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(token: str) -> tuple[datetime, str]:
    """The (created_at, session_id) a page token points after; InvalidArgumentError if malformed."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        fields = orjson.loads(raw)
        moment, session_id = datetime.fromisoformat(fields["t"]), fields["id"]
    except (binascii.Error, ValueError, KeyError, TypeError) as exc:
        raise InvalidArgumentError("page_token", "is not a token returned by ListSessions") from exc
    if moment.tzinfo is None or not isinstance(session_id, str):
        raise InvalidArgumentError("page_token", "is not a token returned by ListSessions")
    return moment, session_id


def list_sessions(
    root: DataRoot,
    page_size: int = DEFAULT_PAGE_SIZE,
    page_token: str = "",
    filters: SessionFilters | None = None,
    tail_window: int = DEFAULT_TAIL_WINDOW,
    max_scan: int = DEFAULT_MAX_SCAN,
) -> ListingPage:
    """One page of sessions, newest first.

    At most ``max_scan`` sessions that pass the name filters are examined (head
    and tail reads); when that ends the page early it says so (``scan_capped``)
    and its token continues after the last one examined. Raises
    InvalidArgumentError for a malformed token, a page size outside 0..1000 (0
    means 50) or a negative scan cap.
    """
    if not 0 <= page_size <= MAX_PAGE_SIZE:
        raise InvalidArgumentError("page_size", f"must be between 1 and {MAX_PAGE_SIZE}, got {page_size}")
    if max_scan < 0:
        raise InvalidArgumentError("max_scan", f"must be >= 0, got {max_scan}")
    size = page_size or DEFAULT_PAGE_SIZE
    cap = max_scan or DEFAULT_MAX_SCAN
    filters = filters or SessionFilters()
    keys, entries = root.ordered()
    # Newest first: walk the oldest-first order backwards from the cursor's place.
    end = bisect.bisect_left(keys, decode_cursor(page_token)) if page_token else len(entries)
    names = entries[end - 1 :: -1] if end else []
    page: list[SessionListing] = []
    scanned = 0
    for position, (parsed, file_name) in enumerate(names):
        if not filters.matches_name(parsed):
            continue
        if scanned == cap:
            return ListingPage(page, encode_cursor(names[position - 1][0]), scanned, True)
        scanned += 1
        path = root.sessions_dir / file_name
        try:
            meta = read_session_meta(path)
            if not filters.matches_meta(meta):
                continue
            facts = read_stop_facts(path, tail_window)
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as exc:  # one unreadable file must not hide the others
            log.warning("listing %s as unknown: %s", file_name, exc)
            facts = StopFactsResult(found=False)
        if not filters.matches_stop(facts, meta):
            continue
        page.append(SessionListing(parsed, meta, facts))
        if len(page) == size:
            more = position + 1 < len(names)
            return ListingPage(page, encode_cursor(parsed) if more else "", scanned, False)
    return ListingPage(page, "", scanned, False)
