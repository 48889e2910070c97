"""The writer answers for a request id itself (docs/spec.md §2.4, writer_service.idempotency): from memory,
and from the request mark a request's first line carries when memory cannot tell."""

from __future__ import annotations

import asyncio

import orjson
import pytest

import writer_service.idempotency as idempotency
from rollout.v1 import records_pb2, writer_pb2
from shared.errors import InvalidArgumentError, SessionStateError
from shared.rebuild import rebuild
from shared.session_meta import SessionSpec
from shared.stop_kinds import StopKind
from shared.wire import append_payloads
from writer_service.idempotency import RequestMemory
from writer_service.sessions import SessionLedger, WriterConfig


def user(text: str) -> list:
    return append_payloads(
        writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="user", text=text)), 0
    )


def thinking(text: str) -> list:
    message = records_pb2.ChatMessage(role="assistant", text=text)
    message.reasoning_blocks.add(content="a")
    message.reasoning_blocks.add(content="b")
    return append_payloads(writer_pb2.AppendRecord(message=message), 0)


def file_lines(ledger: SessionLedger, session_id: str) -> list[dict]:
    entry = ledger.index.get(session_id)
    assert entry is not None
    data = ledger.root.session_path(session_id, entry.name).read_bytes()
    return [orjson.loads(line) for line in data.splitlines()]


async def append(ledger, session_id, records, request_id="", since=None, expected=None):
    seqs, next_seq, durable = await ledger.enqueue(
        session_id, records, expected, request_id, request_since_seq=since
    )
    await durable
    return seqs, next_seq


def run(scenario):
    return asyncio.run(scenario())


def test_the_first_line_of_a_request_carries_its_mark_and_replay_ignores_it(data_dir) -> None:
    """Only a request's first line carries request_id and request_fp; the rebuild is the same as without."""

    async def scenario():
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        try:
            sid, _ = await ledger.create_session(SessionSpec())
            await append(ledger, sid, [thinking("x"), user("y")], request_id="r-1", since=1)
            await append(ledger, sid, [user("z")])
            entry = ledger.index.get(sid)
            return file_lines(ledger, sid), ledger.root.session_path(sid, entry.name).read_bytes()
        finally:
            await ledger.close()

    lines, data = run(scenario)
    marked = [line["seq"] for line in lines if "request_id" in line]
    assert marked == [1]
    assert lines[1]["request_id"] == "r-1"
    assert len(lines[1]["request_fp"]) == 32
    assert list(lines[1]) == ["v", "seq", "ts", "type", "payload", "request_id", "request_fp", "crc32c"]
    found = rebuild(data)
    assert [m.get("content") for m in found.messages] == ["x", "y", "z"]
    assert not found.degraded


def test_a_retry_after_memory_forgot_the_id_is_answered_from_the_file(data_dir) -> None:
    """With request_since_seq, an id memory no longer holds is found in the file: first answer, nothing written."""

    async def scenario():
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        ledger._requests = RequestMemory(limit=1, on_forget=ledger._request_forgotten)
        try:
            sid, _ = await ledger.create_session(SessionSpec())
            first = await append(ledger, sid, [thinking("x"), user("y")], request_id="lost", since=1)
            await append(ledger, sid, [user("other")], request_id="newer", since=4)
            retry = await append(ledger, sid, [thinking("x"), user("y")], request_id="lost", since=1)
            return first, retry, len(file_lines(ledger, sid))
        finally:
            await ledger.close()

    first, retry, lines = run(scenario)
    assert first == ([3, 4], 5)
    assert retry == first
    assert lines == 6, "nothing was written twice"


def test_a_retry_after_a_writer_restart_is_answered_from_the_file_even_once_stopped(data_dir) -> None:
    """A new writer process finds the id in the file (the session stopped meanwhile): the first answer."""

    async def first_writer():
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        try:
            sid, _ = await ledger.create_session(SessionSpec())
            answer = await append(ledger, sid, [user("kept")], request_id="r", since=1)
            await append(ledger, sid, [user("someone else")], request_id="s", since=2)
            await ledger.stop(sid, StopKind.PAUSED, "")
            return sid, answer
        finally:
            await ledger.close()

    sid, answer = asyncio.run(first_writer())

    async def second_writer():
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        try:
            retry = await append(ledger, sid, [user("kept")], request_id="r", since=1)
            return retry, len(file_lines(ledger, sid))
        finally:
            await ledger.close()

    retry, lines = asyncio.run(second_writer())
    assert retry == answer == ([1], 2)
    assert lines == 5  # meta, two messages, checkpoint, stop


def test_an_id_not_in_the_file_is_written_once_after_a_restart(data_dir) -> None:
    """A request whose earlier attempt never landed is written, at the session's current end."""

    async def first_writer():
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        try:
            sid, _ = await ledger.create_session(SessionSpec())
            await append(ledger, sid, [user("a")], request_id="a", since=1)
            return sid
        finally:
            await ledger.close()

    sid = asyncio.run(first_writer())

    async def second_writer():
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        try:
            written = await append(ledger, sid, [user("b")], request_id="b", since=1)
            again = await append(ledger, sid, [user("b")], request_id="b", since=1)
            return written, again, [line["payload"].get("content") for line in file_lines(ledger, sid)]
        finally:
            await ledger.close()

    written, again, contents = asyncio.run(second_writer())
    assert written == again == ([2], 3)
    assert contents == [None, "a", "b"]


def test_the_same_id_with_other_records_found_in_the_file_is_refused(data_dir) -> None:
    """An id reused for different records is INVALID_ARGUMENT whether memory or the file holds it."""

    async def first_writer():
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        try:
            sid, _ = await ledger.create_session(SessionSpec())
            await append(ledger, sid, [user("a")], request_id="r", since=1)
            return sid
        finally:
            await ledger.close()

    sid = asyncio.run(first_writer())

    async def second_writer():
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        try:
            with pytest.raises(InvalidArgumentError, match="already used for different records"):
                await append(ledger, sid, [user("not a")], request_id="r", since=1)
            return len(file_lines(ledger, sid))
        finally:
            await ledger.close()

    assert asyncio.run(second_writer()) == 2


def test_a_since_seq_beyond_the_lookup_window_is_refused_not_guessed(data_dir, monkeypatch) -> None:
    """A lookup that would read past its byte bound is FAILED_PRECONDITION, and nothing is written."""
    monkeypatch.setattr(idempotency, "MAX_LOOKUP_BYTES", 2048)
    monkeypatch.setattr(idempotency, "LOOKUP_CHUNK_BYTES", 512)

    async def first_writer():
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        try:
            sid, _ = await ledger.create_session(SessionSpec())
            for index in range(40):
                await append(ledger, sid, [user(f"line {index} " + "x" * 100)])
            return sid
        finally:
            await ledger.close()

    sid = asyncio.run(first_writer())

    async def second_writer():
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        try:
            with pytest.raises(SessionStateError, match="lies more than 2048 bytes back"):
                await append(ledger, sid, [user("late")], request_id="r", since=1)
            near = await append(ledger, sid, [user("near")], request_id="q", since=38)
            return near, len(file_lines(ledger, sid))
        finally:
            await ledger.close()

    near, lines = asyncio.run(second_writer())
    assert near == ([41], 42)
    assert lines == 42


def test_a_line_longer_than_a_lookup_chunk_is_read_whole(data_dir, monkeypatch) -> None:
    """The backward read joins a line that spans several chunks before it looks for the mark."""
    monkeypatch.setattr(idempotency, "LOOKUP_CHUNK_BYTES", 64)

    async def first_writer():
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        try:
            sid, _ = await ledger.create_session(SessionSpec())
            answer = await append(ledger, sid, [user("y" * 1000)], request_id="long", since=1)
            await append(ledger, sid, [user("z" * 500)])
            return sid, answer
        finally:
            await ledger.close()

    sid, answer = asyncio.run(first_writer())

    async def second_writer():
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        try:
            return await append(ledger, sid, [user("y" * 1000)], request_id="long", since=1)
        finally:
            await ledger.close()

    assert asyncio.run(second_writer()) == answer


def test_concurrent_attempts_of_one_request_write_it_once(data_dir) -> None:
    """Two attempts of one request arriving while a lookup runs get one answer and one write."""

    async def first_writer():
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        try:
            sid, _ = await ledger.create_session(SessionSpec())
            await append(ledger, sid, [user("a")])
            return sid
        finally:
            await ledger.close()

    sid = asyncio.run(first_writer())

    async def second_writer():
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        try:
            answers = await asyncio.gather(
                *(append(ledger, sid, [user("b")], request_id="twice", since=1) for _ in range(5))
            )
            return answers, len(file_lines(ledger, sid))
        finally:
            await ledger.close()

    answers, lines = asyncio.run(second_writer())
    assert answers == [([2], 3)] * 5
    assert lines == 3


def test_an_id_in_flight_is_never_the_one_forgotten() -> None:
    """Beyond the bound, memory forgets settled ids only; an in-flight one stays until it settles."""

    async def scenario():
        loop = asyncio.get_running_loop()
        forgotten = []
        memory = RequestMemory(limit=1, on_forget=lambda sid, answer: forgotten.append(sid))
        pending = loop.create_future()
        memory.remember("a", "r", idempotency.RememberedAppend(b"p", [1], 2, pending, 10))
        settled = loop.create_future()
        settled.set_result(None)
        memory.remember("b", "r", idempotency.RememberedAppend(b"p", [1], 2, settled, 10))
        kept = memory.recall("a", "r", b"p")
        return kept, forgotten, len(memory)

    kept, forgotten, size = asyncio.run(scenario())
    assert kept is not None
    assert forgotten == ["b"]
    assert size == 1
