"""Delegation lookups, both ways (docs/spec.md §5, seed rule 13).

Parent to children: the writer keeps one marker per child under
``delegations/<parent id>/`` (shared.layout), so a lookup lists one folder
instead of reading every session. Child to parent: the child's ``session_meta``
names its coordinates. One role delegated to several times in one parent stays
distinguishable: each child has its own delegation id (the parent's tool call
id) and session id. Empty coordinates mean "no coordinates", never "root".
A reader of a cluster asks the owners about the children it does not see
(reader_service.server, docs/cluster.md §5.2).
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


@dataclass(frozen=True, slots=True)
class Children:
    """What :func:`find_children` found: the ``links`` to children served, oldest first, and
    ``unseen``: the ids of children whose marker is listed but whose file this reader does not
    see (or whose session the caller may not see), in marker order."""

    links: list[DelegationLink]
    unseen: list[str]


def find_children(index: ListingIndex, parent_session_id: str, delegation_id: str) -> Children:
    """The child sessions a parent delegated to (optionally one delegation).

    Raises FileNameError for a malformed id and SessionNotFoundError for an unknown parent
    (or one the caller may not see: serving.tenancy). A marker whose child file is not seen
    (a crash between the two; on another host of a shared volume, a file not in view yet) or
    whose child the caller may not see is in ``unseen``; one whose file went while it was read
    (a deletion) is left out.
    """
    index.locate(parent_session_id, "parent_session_id")
    links, unseen = [], []
    for _, child in index.root.delegations_of(parent_session_id, delegation_id):
        try:
            links.append(_link(index, child))
        except SessionNotFoundError:
            unseen.append(child)
        except FileNotFoundError:
            continue
    return Children(sorted(links, key=lambda link: (link.created_at, link.child_session_id)), unseen)


def find_parent(index: ListingIndex, child_session_id: str) -> DelegationLink:
    """The coordinates of a child session (empty fields: none recorded).

    Raises FileNameError for a malformed id and SessionNotFoundError for an unknown session.
    """
    return _link(index, child_session_id)
