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
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from reader_service.stop_facts import DEFAULT_TAIL_WINDOW, StopFactsResult, read_stop_facts
from shared.errors import InvalidArgumentError
from shared.layout import DataRoot
from shared.naming import SessionFileName

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 1000
HEAD_WINDOW = 64 * 1024


@dataclass(frozen=True, slots=True)
class SessionFilters:
    """Listing filters; empty strings match everything."""

    tenant: str = ""
    agent_name: str = ""
    parent_session_id: str = ""


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
        return datetime.fromisoformat(fields["t"]), str(fields["id"])
    except (binascii.Error, ValueError, KeyError, TypeError) as exc:
        raise InvalidArgumentError("page_token", "is not a token returned by ListSessions") from exc


def _matches(listing_meta: dict[str, Any], name: SessionFileName, filters: SessionFilters) -> bool:
    if filters.agent_name and name.agent_name != filters.agent_name:
        return False
    if filters.tenant and listing_meta.get("tenant", "") != filters.tenant:
        return False
    return not (
        filters.parent_session_id and listing_meta.get("parent_session_id", "") != filters.parent_session_id
    )


def list_sessions(
    root: DataRoot,
    page_size: int = DEFAULT_PAGE_SIZE,
    page_token: str = "",
    filters: SessionFilters | None = None,
    tail_window: int = DEFAULT_TAIL_WINDOW,
) -> tuple[list[SessionListing], str]:
    """One page of sessions, newest first; returns (page, next page token or "").

    Raises InvalidArgumentError for a malformed token or a page size outside 0..1000
    (0 means the default of 50).
    """
    if not 0 <= page_size <= MAX_PAGE_SIZE:
        raise InvalidArgumentError("page_size", f"must be between 1 and {MAX_PAGE_SIZE}, got {page_size}")
    size = page_size or DEFAULT_PAGE_SIZE
    filters = filters or SessionFilters()
    names = sorted(root.scan(), key=lambda entry: entry[0].sort_key, reverse=True)
    if page_token:
        after = decode_cursor(page_token)
        names = [entry for entry in names if entry[0].sort_key < after]
    page: list[SessionListing] = []
    for position, (parsed, file_name) in enumerate(names):
        path = root.sessions_dir / file_name
        try:
            meta = read_session_meta(path)
            if not _matches(meta, parsed, filters):
                continue
            facts = read_stop_facts(path, tail_window)
        except FileNotFoundError:
            continue
        page.append(SessionListing(parsed, meta, facts))
        if len(page) == size:
            more = position + 1 < len(names)
            return page, encode_cursor(parsed) if more else ""
    return page, ""
