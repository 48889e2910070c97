"""Session.watch(): a session's records from a seq, then live, as plain dicts; the iteration ends
after a stop; a reader restart mid-watch loses and repeats nothing."""

from __future__ import annotations

import asyncio
import queue
import threading
from typing import Any

from rollout_client import (
    AsyncRolloutClient,
    Event,
    NotFoundError,
    RolloutClient,
    WatchedRecord,
    assistant,
    user,
)
from tests.client.conftest import TEST_RETRY
from tests.conftest import start_service


def _follow(session: Any, from_seq: int = 0) -> queue.Queue[Any]:
    """Iterate ``session.watch(from_seq)`` on a thread; each record, then None at the end."""
    found: queue.Queue[Any] = queue.Queue()

    def pump() -> None:
        try:
            for record in session.watch(from_seq):
                found.put(record)
            found.put(None)
        except Exception as error:
            found.put(error)

    threading.Thread(target=pump, daemon=True).start()
    return found


def _drain(found: queue.Queue[Any]) -> list[WatchedRecord]:
    records = []
    while isinstance(item := found.get(timeout=60), WatchedRecord):
        records.append(item)
    assert item is None, item
    return records


def test_a_blocking_watch_sees_every_record_as_a_dict_and_ends_after_the_stop(client) -> None:
    """Started before the appends, `for record in session.watch()` yields session_meta, each
    appended record (payloads as stored) and the checkpoint and stop, once each, then ends."""
    session = client.create_session()
    found = _follow(client.session(session.id))
    assert found.get(timeout=60).type == "session_meta"
    session.append(user("hi"), assistant("hello", reasoning={"content": "greet"}))
    session.append(Event("ui", {"shown": True}))
    stop = session.stop("completed", "done")
    records = _drain(found)
    assert [record.seq for record in records] == list(range(1, stop.stop_seq + 1))
    assert [record.type for record in records] == [
        "message",
        "reasoning",
        "message",
        "event",
        "agent_checkpoint",
        "stop",
    ]
    assert records[0].payload == {"role": "user", "content": "hi"}
    assert records[1].payload == {"content": "greet"}
    assert records[3].payload == {"kind": "ui", "body": {"shown": True}}
    assert records[-1].payload is not None
    assert records[-1].payload["reason"] == "done"
    assert [record.seq for record in client.session(session.id).watch(3)] == [3, 4, 5, 6]


def test_an_async_watch_ends_when_left_and_resumes_after_a_reader_restart(writer_process, data_dir) -> None:
    """`async for record in session.watch()` cancels its stream when the loop is left; when the
    reader restarts mid-watch the stream is opened again from the last seq + 1: every record once."""
    readers = [start_service("reader", data_dir)]
    address = readers[0].address

    async def scenario() -> list[int]:
        async with AsyncRolloutClient(writer_process.address, address, retry=TEST_RETRY) as client:
            session = await client.create_session()
            async for record in session.watch():
                assert record.seq == 0
                break  # leaves the loop: the stream is cancelled
            seen: list[int] = []
            watcher = session.watch()
            seen.append((await anext(watcher)).seq)
            await session.append(user("before the restart"))
            seen.append((await anext(watcher)).seq)
            await asyncio.to_thread(readers[0].stop)
            await session.append(user("while the reader is down"))
            readers.append(await asyncio.to_thread(start_service, "reader", data_dir, "--address", address))
            await session.append(user("after the restart"))
            seen.append((await anext(watcher)).seq)
            seen.append((await anext(watcher)).seq)
            await session.stop("paused")
            seen += [record.seq async for record in watcher]
            return seen

    try:
        assert asyncio.run(scenario()) == [0, 1, 2, 3, 4, 5]
    finally:
        for reader in readers:
            reader.stop()


def test_watching_an_unknown_session_raises_not_found(client) -> None:
    """A watch of a session that does not exist raises NotFoundError on first iteration."""
    found = _follow(client.session("0197a5e2-3c4d-7e8f-9a0b-1c2d3e4f5a6b"))
    assert isinstance(found.get(timeout=60), NotFoundError)


def test_a_blocking_client_watch_is_an_iterator(writer_process, reader_process) -> None:
    """RolloutClient's Session.watch() is a plain iterator (next() blocks for the next record)."""
    with RolloutClient(writer_process.address, reader_process.address, retry=TEST_RETRY) as client:
        session = client.create_session()
        records = session.watch()
        assert next(records).type == "session_meta"
        session.append(user("one"))
        assert next(records).payload == {"role": "user", "content": "one"}
        records.close()
