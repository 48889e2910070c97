"""Delegation lookups, both ways (docs/spec.md §5, seed rule 13).

Parent to children: the writer keeps one marker per child under
``delegations/<parent id>/`` (shared.layout), so a lookup lists one folder
instead of reading every session. Child to parent: the child's ``session_meta``
names its coordinates. One role delegated to several times in one parent stays
distinguishable: each child has its own delegation id (the parent's tool call
id) and session id. Empty coordinates mean "no coordinates", never "root".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reader_service.listing_index import ListingIndex
from reader_service.stop_facts import StopFactsResult, read_stop_facts
from shared.errors import SessionNotFoundError


@dataclass(frozen=True, slots=True)
class DelegationLink:
    """One parent-child link with the child's head and stop facts."""

    parent_session_id: str
    delegation_id: str
    child_session_id: str
    agent_name: str
    created_at: str
    meta: dict[str, Any]
    stop_facts: StopFactsResult


def _link(index: ListingIndex, child_session_id: str) -> DelegationLink:
    parsed, path = index.locate(child_session_id, "child_session_id")
    meta = index.meta(path.name)
    return DelegationLink(
        parent_session_id=str(meta.get("parent_session_id", "")),
        delegation_id=str(meta.get("delegation_id", "")),
        child_session_id=child_session_id,
        agent_name=parsed.agent_name,
        created_at=str(meta.get("created_at", "")),
        meta=meta,
        stop_facts=read_stop_facts(path, index.tail_window),
    )


def find_children(index: ListingIndex, parent_session_id: str, delegation_id: str) -> list[DelegationLink]:
    """The child sessions a parent delegated to (optionally one delegation), oldest first.

    Raises FileNameError for a malformed id and SessionNotFoundError for an unknown parent
    (or one the caller may not see: shared.tenancy). Markers whose child file does not
    exist (a crash between the two), or whose child the caller may not see, are skipped.
    """
    index.locate(parent_session_id, "parent_session_id")
    links = []
    for _, child in index.root.delegations_of(parent_session_id, delegation_id):
        try:
            links.append(_link(index, child))
        except (SessionNotFoundError, FileNotFoundError):
            continue
    return sorted(links, key=lambda link: (link.created_at, link.child_session_id))


def find_parent(index: ListingIndex, child_session_id: str) -> DelegationLink:
    """The coordinates of a child session (empty fields: none recorded).

    Raises FileNameError for a malformed id and SessionNotFoundError for an unknown session.
    """
    return _link(index, child_session_id)
