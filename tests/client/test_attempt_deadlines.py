"""The client times its attempts by the monotonic clock: a process whose ``time.time`` is moved
(a test freezing the wall clock, as the Agents SDK's Fernet tests do) still reaches the services,
and an attempt still ends when its timeout has passed."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from rollout_client import AsyncRolloutClient, DeadlineExceededError, RetryPolicy, RolloutClient, user
from rollout_client.agents import LedgerSession
from tests.client.conftest import TEST_RETRY

#: A wall clock frozen in 1970, as ``monkeypatch.setattr("cryptography.fernet.time.time", ...)`` leaves it.
FROZEN = 1_000.0


def test_calls_succeed_with_the_wall_clock_frozen_in_the_past(
    writer_process, reader_process, monkeypatch
) -> None:
    """With time.time frozen at 1970 every call of both clients and a LedgerSession answers as usual."""
    monkeypatch.setattr(time, "time", lambda: FROZEN)

    async def asynchronous() -> list[str]:
        async with AsyncRolloutClient(
            writer_process.address, reader_process.address, retry=TEST_RETRY
        ) as client:
            session = await client.create_session()
            await session.append(user("one"), user("two"))
            stopped = await session.stop("completed")
            replay = await session.replay()
            assert stopped.stop_seq > 0
            return [message["content"] for message in replay.messages]

    assert asyncio.run(asynchronous()) == ["one", "two"]
    with RolloutClient(writer_process.address, reader_process.address, retry=TEST_RETRY) as client:
        ledger = LedgerSession("frozen-clock", client=client)
        asyncio.run(
            ledger.add_items([{"role": "user", "content": "kept"}, {"role": "user", "content": "popped"}])
        )
        assert asyncio.run(ledger.pop_item()) == {"role": "user", "content": "popped"}
        assert asyncio.run(ledger.get_items()) == [{"role": "user", "content": "kept"}]
        assert client.resolve_session("frozen-clock")[1]


def test_an_attempt_ends_after_its_timeout_by_the_monotonic_clock(monkeypatch) -> None:
    """A service that never answers: each attempt is cut at attempt_timeout, the call at the deadline
    (DEADLINE_EXCEEDED naming the attempt's timeout), though the wall clock stands still."""
    monkeypatch.setattr(time, "time", lambda: FROZEN)
    with socket.socket() as silent:  # accepts TCP connections (backlog), never speaks HTTP/2
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        retry = RetryPolicy(deadline=1.5, attempt_timeout=0.3, initial_backoff=0.01, max_backoff=0.05)

        async def call() -> None:
            async with AsyncRolloutClient(address, address, retry=retry) as client:
                await client.resolve_session("never-answered")

        with pytest.raises(DeadlineExceededError, match=r"no answer within the attempt's [0-9.]+ s"):
            asyncio.run(call())
