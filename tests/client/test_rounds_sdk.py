"""The SDK's round calls (issue 24): ``client.round(id)`` with the sessions holding it, and
``client.pending_rounds()``, on the blocking and the asyncio client alike."""

from __future__ import annotations

import asyncio

from rollout_client import AsyncRolloutClient, RoundRecords, assistant, user
from shared.rounds import RoundStatus
from tests.client.conftest import TEST_RETRY


def test_a_round_by_its_id_says_which_sessions_hold_it(client, writer_process, reader_process) -> None:
    session = client.create_session()
    session.append(user("one", input_kind="trigger"), assistant("1"))
    session.append(user("two", input_kind="trigger"))
    first, second = session.rounds()
    fork = session.fork(at_seq=first.end_seq)
    found = client.round(first.round_id)
    assert isinstance(found, RoundRecords)
    assert (found.held_by, found.session_id, found.round.status) == (2, session.id, RoundStatus.COMPLETE)
    assert [record.payload["content"] for record in found.records if record.payload] == ["one", "1"]
    assert client.round(first.round_id, session_id=fork.id).session_id == fork.id

    async def from_async() -> tuple[RoundRecords, list[str]]:
        async with AsyncRolloutClient(
            writer_process.address, reader_process.address, retry=TEST_RETRY
        ) as aclient:
            pending = await aclient.pending_rounds(idle_seconds=3600)
            return await aclient.round(second.round_id), [p.session_id for p in pending]

    other, pending = asyncio.run(from_async())
    assert (other.held_by, other.round.question) == (1, "two")
    assert session.id not in pending  # appended to a moment ago: not idle for an hour
