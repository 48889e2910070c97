"""ForgetMemories: the one write of memory artifacts a service makes (docs/memory.md §7).

The artifact store under the data root is written by the memory pipeline, which runs
beside it; forgetting is a privacy request a remote caller must be able to make with its
own credentials, so the writer serves it: :meth:`memory_store.store.MemoryStore.forget`
(the same function ``rollout memory forget`` calls on the data root's host) for the tenant
of the caller's credentials (serving.tenancy.memory_tenant), recording who asked. The
store is not sharded: any writer of a cluster serves it, the store's lock ordering writes.
"""

from __future__ import annotations

import re

from memory_store.store import MemoryStore
from rollout.v1 import writer_pb2
from serving.tenancy import current_caller, memory_tenant
from shared.errors import InvalidArgumentError, clip, storage_error
from shared.naming import validate_session_id

#: A scope key: 32 lowercase hex digits (shared.memory.Scope.key).
_SCOPE_KEY = re.compile(r"[0-9a-f]{32}")
#: Longest ``by`` recorded from a request (characters).
MAX_BY_CHARS = 200


def forget_memories(
    store: MemoryStore, request: writer_pb2.ForgetMemoriesRequest
) -> writer_pb2.ForgetMemoriesResponse:
    """Forget the caller's tenant's artifacts citing ``request.session_id``, or of the scope
    ``request.scope_key``; ``by`` is the caller's credential with authentication, else the
    request's ``by``.

    Raises InvalidArgumentError (``what``, ``scope_key``, ``by``), FileNameError
    (``session_id``), PermissionDeniedError (``tenant``), StorageWriteError."""
    what = request.WhichOneof("what")
    if what is None:
        raise InvalidArgumentError("what", "give session_id (its artifacts) or scope_key (a scope's)")
    if what == "session_id":
        validate_session_id(request.session_id)
    elif not _SCOPE_KEY.fullmatch(request.scope_key):
        raise InvalidArgumentError(
            "scope_key",
            f"must be 32 lowercase hex digits (as `rollout memory show` prints), got {clip(request.scope_key)!r}",
        )
    if len(request.by) > MAX_BY_CHARS:
        raise InvalidArgumentError("by", f"at most {MAX_BY_CHARS} characters, not {len(request.by)}")
    tenant = memory_tenant(request.tenant)
    by = current_caller().credential or request.by
    try:
        removed = store.forget(
            tenant,
            session_id=request.session_id if what == "session_id" else None,
            scope_key=request.scope_key if what == "scope_key" else None,
            by=by,
        )
    except OSError as exc:
        raise storage_error(exc, "write", "forgetting memory artifacts") from exc
    return writer_pb2.ForgetMemoriesResponse(artifact_ids=removed)
