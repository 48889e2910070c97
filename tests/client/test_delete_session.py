"""``client.delete_session``: blocking and asyncio, idempotent, NOT_FOUND for an unknown id."""

from __future__ import annotations

import asyncio

import pytest

from rollout_client import AsyncRolloutClient, NotFoundError, RolloutClient, user


def test_delete_session_deletes_once_and_a_retry_is_answered_as_done(client: RolloutClient) -> None:
    """The first call deletes; a second answers already_deleted with the first call's time; the
    session is gone for the reader."""
    session = client.create_session(root=True)
    session.append(user("hello"))
    first = client.delete_session(session.id)
    assert (first.session_id, first.already_deleted) == (session.id, False)
    second = client.delete_session(session.id)
    assert (second.already_deleted, second.deleted_at) == (True, first.deleted_at)
    with pytest.raises(NotFoundError):
        session.replay()


def test_an_unknown_session_is_not_found(client: RolloutClient) -> None:
    with pytest.raises(NotFoundError):
        client.delete_session("01a22c15-89a6-7d3d-b5b7-165622bd350c")


def test_the_async_client_deletes(writer_process, reader_process) -> None:
    async def run() -> None:
        async with AsyncRolloutClient(writer_process.address, reader_process.address) as client:
            session = await client.create_session(root=True)
            result = await client.delete_session(session.id)
            assert not result.already_deleted
            with pytest.raises(NotFoundError):
                await session.stop_facts()

    asyncio.run(run())
