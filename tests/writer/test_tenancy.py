"""The writer's tenancy in-process (serving.tenancy): sessions it did not create in this run are
refused to another tenant from their session_meta, and ids stay global."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from serving.tenancy import CALLER, Caller
from shared.errors import InvalidArgumentError, SessionExistsError, SessionNotFoundError
from shared.session_meta import SessionRole, SessionSpec
from writer_service.importing import SessionImport
from writer_service.sessions import SessionLedger, WriterConfig

B = Caller("b", importer=True)


def test_a_session_from_before_a_restart_is_another_tenants_not_found(tmp_path) -> None:
    """After a restart (nothing of the session in memory), every lookup by tenant b of tenant a's
    session answers as for an unknown id; tenant a reaches it; a child of it is refused to b as
    naming no session, and an import by b of its id is ALREADY_EXISTS, never 'already present'."""
    config = WriterConfig(data_dir=tmp_path)

    async def scenario() -> None:
        first = SessionLedger(config)
        session_id, _ = await first.create_session(SessionSpec(tenant="a"))
        await first.close()

        ledger = SessionLedger(config)  # a fresh index: the tenant is read from the file's first line
        try:
            reset = CALLER.set(B)
            try:
                assert ledger.unknown_id_message(session_id) == str(SessionNotFoundError(session_id))
                with pytest.raises(SessionNotFoundError):
                    ledger.check_known(session_id)
                with pytest.raises(SessionNotFoundError):
                    await ledger.open_session(session_id)
                with pytest.raises(SessionNotFoundError):
                    await ledger.drained_path(session_id)
                with pytest.raises(InvalidArgumentError, match="names no session"):
                    ledger.prepare_session(
                        SessionSpec(
                            agent_name="helper",
                            parent_session_id=session_id,
                            delegation_id="call_1",
                            role=SessionRole.CHILD,
                        )
                    )
                with pytest.raises(SessionExistsError):
                    await ledger.create_session(SessionSpec(session_id=session_id))
                session_import = SessionImport(ledger)
                with pytest.raises(SessionExistsError):
                    await session_import.create(SessionSpec(session_id=session_id))
                await session_import.abort()
                other, _ = await ledger.create_session(SessionSpec())
            finally:
                CALLER.reset(reset)
            assert ledger.unknown_id_message(session_id) is None  # no authentication: every tenant
            reset = CALLER.set(Caller("a", importer=False))
            try:
                assert (await ledger.open_session(session_id)).session_id == session_id
                with pytest.raises(SessionNotFoundError):
                    await ledger.open_session(other)  # b's session, made above under b's name
            finally:
                CALLER.reset(reset)
            assert ledger.tenants.of(other, ledger.index.get(other).name) == "b"
            assert ledger.unknown_id_message(str(uuid.uuid4())) is not None
        finally:
            await ledger.close()

    asyncio.run(scenario())
