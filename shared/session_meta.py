"""What line 0 of a session file holds: the ``session_meta`` fields, in one place (docs/spec.md §1).

:class:`SessionSpec` is the one list of what a session is created with; the
writer's CreateSession and ImportSessions, the protobuf conversion
(:func:`shared.wire.session_spec`) and the importers all go through it, and
:func:`session_meta_payload` writes it as the ``session_meta`` payload::

    {"session_id": "0193…", "agent_name": "coder", "parent_session_id": "0193…",
     "delegation_id": "call_7", "role": "child", "tenant": "default", "session_key": "chat-1",
     "model": "…", "cwd": "…", "originator": "…", "client_version": "…", "created_at": "2026-…Z"}

Optional strings are omitted when empty. ``session_key`` (an addition) is a caller's own
name for the session, from which its id was derived (shared.naming.session_id_for_key). ``role`` is a documented addition to
docs/spec.md §1 (files written before it have none and keep the older reading, see
:func:`is_child`): whether the session is a root or a child is said at creation,
never guessed from an agent name later (:func:`resolve_role`).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared.errors import InvalidArgumentError
from shared.layout import read_session_file
from shared.records import RecordType, record_of_line

#: Bytes read from a file's start for its session_meta line (grown only for a longer line).
HEAD_WINDOW = 64 * 1024


class SessionRole(enum.StrEnum):
    """Where a session sits in a delegation tree (``session_meta.role``)."""

    #: A top-level session; it may name an agent; it has no delegation fields.
    ROOT = "root"
    #: A delegated session: both ``parent_session_id`` and ``delegation_id``.
    CHILD = "child"
    #: A delegated session whose parent is not known (an imported sub-agent run whose
    #: delegating call was not found): no delegation fields, never resumable as-is.
    CHILD_WITHOUT_COORDINATES = "child_without_coordinates"


@dataclass(frozen=True, slots=True)
class SessionSpec:
    """What a session is created with (strings; empty means absent; ``role`` None: not said)."""

    session_id: str = ""
    agent_name: str = ""
    parent_session_id: str = ""
    delegation_id: str = ""
    role: SessionRole | None = None
    tenant: str = ""
    model: str = ""
    cwd: str = ""
    originator: str = ""
    client_version: str = ""
    created_at: str = ""
    #: A caller's own name for the session, unique per tenant: the session id is derived from it
    #: (shared.naming.session_id_for_key).
    session_key: str = ""


#: The free-text fields of session_meta, in line order after the delegation fields.
TEXT_FIELDS = ("tenant", "model", "cwd", "originator", "client_version")
DEFAULT_TENANT = "default"


def resolve_role(spec: SessionSpec) -> SessionRole:
    """The role a new session gets, or InvalidArgumentError saying what is missing (docs/spec.md §5, seed rule 13).

    * ROOT: no delegation field may be set.
    * CHILD: both ``parent_session_id`` and ``delegation_id`` are required.
    * CHILD_WITHOUT_COORDINATES: no delegation field may be set.
    * not said: both coordinates make a child; one without the other is refused;
      a session that names an agent with neither is refused (say ROOT, or give
      both coordinates); a session naming nothing is a root.
    """
    parent, delegation = bool(spec.parent_session_id), bool(spec.delegation_id)
    match spec.role:
        case SessionRole.ROOT | SessionRole.CHILD_WITHOUT_COORDINATES:
            if parent or delegation:
                field = "parent_session_id" if parent else "delegation_id"
                raise InvalidArgumentError(
                    field, f"a session with role {spec.role.value} carries no delegation coordinates"
                )
            return spec.role
        case SessionRole.CHILD:
            if not (parent and delegation):
                missing = "parent_session_id" if not parent else "delegation_id"
                raise InvalidArgumentError(
                    missing, "a child session needs both parent_session_id and delegation_id"
                )
            return SessionRole.CHILD
        case None:
            if parent and delegation:
                return SessionRole.CHILD
            if parent or delegation:
                missing = "delegation_id" if parent else "parent_session_id"
                raise InvalidArgumentError(
                    missing, "is empty while the other delegation coordinate is set; a child needs both"
                )
            if spec.agent_name:
                raise InvalidArgumentError(
                    "role",
                    f"the session names agent {spec.agent_name!r} but is neither said to be a root (role ROOT)"
                    " nor a child with both delegation coordinates (parent_session_id, delegation_id);"
                    " say which",
                )
            return SessionRole.ROOT


def session_meta_payload(
    spec: SessionSpec, session_id: str, role: SessionRole, created_at: str
) -> dict[str, Any]:
    """The ``session_meta`` payload of a new session, in line order (see the module doc)."""
    meta: dict[str, Any] = {"session_id": session_id}
    for key in ("agent_name", "parent_session_id", "delegation_id"):
        value = getattr(spec, key)
        if value:
            meta[key] = value
    meta["role"] = role.value
    meta["tenant"] = recorded_tenant(spec.tenant)
    if spec.session_key:
        meta["session_key"] = spec.session_key
    for key in TEXT_FIELDS[1:]:
        value = getattr(spec, key)
        if value:
            meta[key] = value
    meta["created_at"] = created_at
    return meta


def is_child(meta: Mapping[str, Any]) -> bool:
    """Whether a session is a child: its ``role`` when the file says one, else the older reading
    (a session naming an agent or any delegation field is a child)."""
    role = meta.get("role")
    if role == SessionRole.ROOT:
        return False
    if role in (SessionRole.CHILD, SessionRole.CHILD_WITHOUT_COORDINATES):
        return True
    return bool(meta.get("agent_name") or meta.get("delegation_id") or meta.get("parent_session_id"))


def read_session_meta(path: Path) -> dict[str, Any] | None:
    """The payload of a session's first line: {} if it is not a session_meta record
    (shared.records.record_of_line), None if the line is not complete yet (no newline). Reads :data:`HEAD_WINDOW` bytes at a time. Raises
    OSError when the file cannot be read (ELOOP when it is a symbolic link: never followed)."""
    with read_session_file(path) as handle:
        head = handle.read(HEAD_WINDOW)
        while b"\n" not in head:
            more = handle.read(HEAD_WINDOW)
            if not more:
                return None
            head += more
    record = record_of_line(head[: head.index(b"\n")])
    if record is None or record["type"] != RecordType.SESSION_META:
        return {}
    payload: dict[str, Any] = record["payload"]
    return payload


def recorded_tenant(tenant: str) -> str:
    """The tenant a session created with ``tenant`` is recorded under (``default`` for none)."""
    return tenant or DEFAULT_TENANT


def tenant_of(meta: Mapping[str, Any] | None) -> str:
    """The tenant a session belongs to, from its session_meta payload ("" when it names none)."""
    tenant = meta.get("tenant", "") if meta else ""
    return tenant if isinstance(tenant, str) else ""
