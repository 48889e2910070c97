"""Who is calling, and which sessions that caller may see (tenant isolation, both services).

A service started with authentication (``--auth-tokens``, or client certificates:
:mod:`serving.auth`) learns each call's :class:`Caller` from its credentials, never from
a request field, and sets it for the call in :data:`CALLER` before any handler runs.
The places where a session id is looked up (the writer's session index, the reader's
listing index) read it there and answer a session of another tenant exactly as one
that does not exist: :class:`shared.errors.SessionNotFoundError` (NOT_FOUND), so no
RPC can tell the two apart, and no RPC added later can forget the check.

A service without authentication, and code calling the ledger in-process, run as
:data:`ANYONE`: every session is visible and source times may be set, as before.
A session created without a tenant is recorded under ``default`` (shared.session_meta),
so a token mapped to ``default`` sees the sessions written before authentication was
turned on; a file whose session_meta names no tenant at all belongs to ``""``, which no
token may name: with authentication on it is visible to no caller.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from shared.errors import PermissionDeniedError, SessionNotFoundError
from shared.naming import current_keyed_session_id
from shared.session_meta import recorded_tenant, tenant_of


@dataclass(frozen=True, slots=True)
class Caller:
    """An authenticated caller: its tenant (None: no authentication, every tenant) and whether
    it is trusted to import (set source times: AppendRecord.ts, StopRequest.ts; ImportSessions)."""

    tenant: str | None
    importer: bool
    #: Which credential made the call, for audit records (no secret): ``token:<12 hex>`` (the
    #: start of the token's BLAKE2b digest), ``certificate:<CN>``, or "" without authentication.
    credential: str = ""
    #: The bearer token the call carried (None: none), passed on only when this service asks another
    #: on the caller's behalf (a reader asking a session's owner: docs/cluster.md §5); never shown.
    bearer: str | None = field(default=None, repr=False, compare=False)

    def sees(self, tenant: str) -> bool:
        """True when a session of ``tenant`` is visible to this caller."""
        return self.tenant is None or self.tenant == tenant


#: The caller of a service without authentication (and of in-process use): sees everything.
ANYONE = Caller(None, importer=True)

#: The caller of the RPC being served; set by the authentication interceptor for each call.
CALLER: ContextVar[Caller] = ContextVar("rollout_caller", default=ANYONE)


def current_caller() -> Caller:
    """The caller of the RPC being served (:data:`ANYONE` outside an authenticated call)."""
    return CALLER.get()


def check_visible(session_id: str, meta: Callable[[], Mapping[str, Any]]) -> None:
    """Raise SessionNotFoundError (NOT_FOUND, never a hint that the session exists) unless the
    current caller sees the session whose ``session_meta`` payload ``meta()`` returns; ``meta``
    is called only when authentication names a tenant (it may read the file's first line)."""
    caller = CALLER.get()
    if caller.tenant is not None and not caller.sees(tenant_of(meta())):
        raise SessionNotFoundError(session_id)


def caller_tenant(requested: str) -> str:
    """The tenant a request acts in: the caller's own (a new session's tenant, a listing's filter).

    ``requested`` is the request's ``tenant`` field: empty or the caller's tenant is
    taken as the caller's; another tenant is PermissionDeniedError (PERMISSION_DENIED),
    never an empty answer. Without authentication the request's value is kept as it is.
    """
    caller = CALLER.get()
    if caller.tenant is None:
        return requested
    if requested and requested != caller.tenant:
        raise PermissionDeniedError(
            "tenant", "names another tenant than the caller's credentials; leave it empty or give your own"
        )
    return caller.tenant


def keyed_session_id(
    requested_tenant: str,
    session_key: str,
    *,
    shard_of: Callable[[str], int],
    deleted: Callable[[str], bool],
) -> str:
    """The id a session key names for the current caller now: in the tenant the request acts in
    (:func:`caller_tenant`, recorded as ``default`` when empty), by
    :func:`shared.naming.current_keyed_session_id` (the key's first id, or after deletions of
    its sessions the next: ``shard_of`` and ``deleted`` as that function takes them). The
    writer's CreateSession and the reader's ResolveSession both derive it here. Raises
    FileNameError (``session_key``), PermissionDeniedError (``tenant``)."""
    tenant = recorded_tenant(caller_tenant(requested_tenant))
    return current_keyed_session_id(tenant, session_key, shard_of=shard_of, deleted=deleted)


def memory_tenant(requested_tenant: str) -> str:
    """The tenant whose memory artifacts a request reads or forgets (the reader's GetMemories and
    ResolveProvenance, the writer's ForgetMemories; docs/memory.md §8): the one it acts in
    (:func:`caller_tenant`: with authentication the credentials', PermissionDeniedError for
    another), recorded as ``default`` when empty, as a session created without one."""
    return recorded_tenant(caller_tenant(requested_tenant))


#: How a caller becomes an importer, for refusals.
_IMPORTER_HOW = 'a token marked "importer": true in the writer\'s --auth-tokens file'


def check_may_set_times(field: str) -> None:
    """Raise PermissionDeniedError (naming ``field``) unless the caller may set source times."""
    if not CALLER.get().importer:
        raise PermissionDeniedError(
            field,
            f"only importers may set source times ({_IMPORTER_HOW}); leave it empty for the writer's clock",
        )


def check_importer(rpc: str) -> None:
    """Raise PermissionDeniedError unless the caller is an importer (ImportSessions)."""
    if not CALLER.get().importer:
        raise PermissionDeniedError(rpc, f"only importers may import sessions ({_IMPORTER_HOW})")
