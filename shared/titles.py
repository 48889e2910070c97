"""Session titles: a title is a record, the last non-empty one wins (docs/spec.md §10).

A title is an ``event`` record of kind :data:`TITLE_EVENT` whose body holds the title
text: ``{"kind": "title", "body": {"title": "Fix the flaky upload test"}}`` (a documented
event kind: no new record type, so every reader of docs/spec.md §1 files reads it already).
Wherever it stands in the file, the last one with a non-empty title is the session's
title (:func:`next_title`); earlier ones stay in the file, and so stay searchable
(reader_service.search_index indexes each). Whoever shows or indexes a title folds the
records through :func:`next_title`, so all sides agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: The event kind of a title record.
TITLE_EVENT = "title"
#: Longest title kept, in characters (longer ones are cut).
MAX_TITLE_CHARS = 500


def title_of(record_type: str, payload: Mapping[str, Any]) -> str | None:
    """The title a record sets: the stripped text of a title event's ``body.title``; None for
    any other record and for an empty title (which never replaces an earlier one)."""
    if record_type != "event" or payload.get("kind") != TITLE_EVENT:
        return None
    body = payload.get("body")
    title = body.get("title") if isinstance(body, Mapping) else None
    if not isinstance(title, str) or not title.strip():
        return None
    return " ".join(title.split())[:MAX_TITLE_CHARS]


def next_title(current: str, record_type: str, payload: Mapping[str, Any]) -> str:
    """The session's title after one more record: the record's title when it sets a non-empty
    one, else ``current`` (the rule "the last non-empty title wins")."""
    return title_of(record_type, payload) or current


def preferred_title(*candidates: str) -> str:
    """The first non-empty of ``candidates``, given by precedence (an importer: Claude Code's
    custom title, then its AI title, then a summary line), blanks collapsed and cut to
    :data:`MAX_TITLE_CHARS`; "" when none (the listing then shows the first prompt)."""
    for candidate in candidates:
        if candidate.strip():
            return " ".join(candidate.split())[:MAX_TITLE_CHARS]
    return ""


def title_event_body(title: str) -> dict[str, str]:
    """The ``body`` of the title event that sets ``title`` (importers, SDK)."""
    return {"title": title}
