"""Delegation coordinates carried by context (seed rule 13, docs/spec.md §5 delegation lookup).

A parent agent that hands work to a child wraps the hand-off in
``with delegation(parent=session, tool_call_id="call_..."):``. Every
``create_session`` inside, in the same thread or in an asyncio task started
inside (tasks copy the context when they are created), records the parent's
session id and the delegating tool call id in the child's ``session_meta``, with
role CHILD. The child never has to be told its coordinates.

Plain threads do not inherit context: a thread started inside the block sees no
delegation. Run the thread's work in a copy of the context instead::

    ctx = contextvars.copy_context()
    threading.Thread(target=ctx.run, args=(work,)).start()

(``asyncio.to_thread`` and ``loop.run_in_executor`` via ``to_thread`` copy it for you.)
Empty coordinates never mean "root": outside any delegation, a session that names
an agent must say ``root=True`` (:class:`rollout_client.RootNotDeclaredError`).
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol


class HasSessionId(Protocol):
    """Anything with a session id (a Session or AsyncSession)."""

    @property
    def id(self) -> str: ...


@dataclass(frozen=True)
class DelegationScope:
    """The coordinates a child session created in this context records: the parent's
    session id and the parent's tool call id that started the child (``delegation_id``)."""

    parent_session_id: str
    tool_call_id: str


_current: contextvars.ContextVar[DelegationScope | None] = contextvars.ContextVar(
    "rollout_client_delegation", default=None
)


@contextmanager
def delegation(*, parent: HasSessionId | str, tool_call_id: str) -> Iterator[DelegationScope]:
    """Within the block, sessions created in this context are children of ``parent`` started
    by ``tool_call_id``. Nested blocks: the innermost wins, and leaving a block restores the
    outer one. Raises ValueError for an empty parent id or tool call id (a child with half its
    coordinates could never be found from its parent, nor resumed)."""
    parent_id = parent if isinstance(parent, str) else parent.id
    if not parent_id:
        raise ValueError("delegation(parent=...) needs the parent's session id")
    if not tool_call_id:
        raise ValueError("delegation(tool_call_id=...) needs the parent's tool call id that starts the child")
    scope = DelegationScope(parent_id, tool_call_id)
    token = _current.set(scope)
    try:
        yield scope
    finally:
        _current.reset(token)


def current_delegation() -> DelegationScope | None:
    """The delegation of the current context, or None outside any ``delegation(...)`` block."""
    return _current.get()
