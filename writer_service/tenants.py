"""The tenant of each session, as the writer's lookups need it (shared.tenancy).

Only a writer with authentication asks: without it every caller sees every session and
nothing here is read. A session's tenant is its ``session_meta.tenant``; it never
changes once written, so it is read once per session (the first line only) and kept,
or recorded directly when the writer creates the session. ~100 bytes per session asked
about: 20,000 sessions take ~2 MB.
"""

from __future__ import annotations

from shared.errors import SessionNotFoundError, storage_error
from shared.layout import DataRoot
from shared.session_meta import read_session_meta, tenant_of


class SessionTenants:
    """Session id -> tenant, read from each session file's first line on first use (event loop)."""

    def __init__(self, root: DataRoot) -> None:
        self.root = root
        self._tenants: dict[str, str] = {}

    def record(self, session_id: str, tenant: str) -> None:
        """Keep the tenant of a session the writer has just created."""
        self._tenants[session_id] = tenant

    def forget(self, session_id: str) -> None:
        """Drop a deleted session's tenant."""
        self._tenants.pop(session_id, None)

    def of(self, session_id: str, name: str) -> str:
        """The tenant of session ``session_id`` whose file is ``name`` ("" when it names none).

        A first line not complete yet is read again next time. Raises StorageWriteError
        (UNAVAILABLE) when the file cannot be read: without its tenant, the session is
        shown to no one.
        """
        tenant = self._tenants.get(session_id)
        if tenant is not None:
            return tenant
        try:
            meta = read_session_meta(self.root.session_path(session_id, name))
        except FileNotFoundError as exc:  # moved or deleted outside the ledger
            raise SessionNotFoundError(session_id) from exc
        except OSError as exc:
            raise storage_error(exc, "read", f"reading the session_meta of {name}") from exc
        tenant = tenant_of(meta)
        if meta is not None:
            self._tenants[session_id] = tenant
        return tenant
