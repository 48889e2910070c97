"""Many sessions at once (docs/spec.md §2.10): the session index, bounded reopens, shared durability rounds,
the request-id bound and the record-type dispatch."""

from __future__ import annotations

import asyncio
import errno
import os
import threading
from pathlib import Path

import orjson
import pytest

import shared.committed_lines as committed_lines
import writer_service.committer as committer
import writer_service.saved_state as saved_state
import writer_service.session_cache as session_cache
import writer_service.sessions as sessions
from rollout.v1 import records_pb2, writer_pb2
from shared.errors import RecordValidationError, SessionNotFoundError, StorageWriteError
from shared.naming import build_file_name, new_session_id
from shared.records import APPENDABLE_TYPES, RecordType, encode_line
from shared.session_meta import SessionSpec
from shared.stop_kinds import StopKind
from shared.wire import append_payloads
from tests.data_roots import session_file, session_files, session_path
from writer_service.committer import SessionLog
from writer_service.idempotency import RequestMemory
from writer_service.open_session import CallView, apply_record
from writer_service.session_index import build_index
from writer_service.sessions import SessionLedger, WriterConfig

TS = "2026-11-30T10:00:00.000000Z"


def user(text: str) -> list:
    return append_payloads(
        writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="user", text=text)), 0
    )


def call(call_id: str) -> list:
    message = records_pb2.ChatMessage(role="assistant")
    message.tool_calls.add(
        id=call_id, type="function", function=records_pb2.FunctionCall(name="f", arguments="{}")
    )
    return append_payloads(writer_pb2.AppendRecord(message=message), 0)


def output(call_id: str) -> list:
    message = records_pb2.ChatMessage(role="tool", tool_call_id=call_id, text="done")
    return append_payloads(writer_pb2.AppendRecord(message=message), 0)


def write_session_file(data_dir: Path, lines: list[tuple[str, dict]], session_id: str = "") -> str:
    """A session file written directly in the on-disk format; returns its id."""
    from datetime import UTC, datetime

    session_id = session_id or new_session_id()
    body = encode_line(0, TS, "session_meta", {"session_id": session_id, "tenant": "t"})
    for seq, (record_type, payload) in enumerate(lines, start=1):
        body += encode_line(seq, TS, record_type, payload)
    session_path(
        data_dir, session_id, build_file_name(datetime(2026, 11, 30, tzinfo=UTC), session_id)
    ).write_bytes(body)
    return session_id


def test_start_up_indexes_next_seq_and_stop_state_from_tails_and_repairs_torn_ends(data_dir) -> None:
    """The start-up index gives each session its next seq and stop kind from the tail; a torn end is repaired."""
    open_id = write_session_file(data_dir, [("message", {"role": "user", "content": "a"})] * 3)
    stopped_id = write_session_file(
        data_dir,
        [
            ("message", {"role": "user", "content": "a"}),
            ("agent_checkpoint", {"digest": "d", "message_count": 1, "covers_seq": 1, "stop_kind": "paused"}),
            ("stop", {"stop_kind": "paused", "reason": "r", "checkpoint_seq": 2}),
        ],
    )
    torn_id = write_session_file(data_dir, [("message", {"role": "user", "content": "a"})])
    torn_path = session_file(data_dir, torn_id)
    with torn_path.open("ab") as handle:
        handle.write(b'{"v":1,"seq":2,"ts"')
    index = build_index(sessions.DataRoot(data_dir))
    assert (index.get(open_id).next_seq, index.get(open_id).stopped_kind) == (4, None)
    assert (index.get(stopped_id).next_seq, index.get(stopped_id).stopped_kind) == (4, "paused")
    assert index.get(torn_id).next_seq == 2
    assert torn_path.read_bytes().endswith(b"\n")
    assert list(session_files(data_dir, f"*{torn_id}.jsonl.torn-1"))


def test_an_unknown_id_is_not_found_without_touching_the_disk(data_dir, monkeypatch) -> None:
    """Appends, stops, resumes and forks of unknown ids answer NOT_FOUND from the index: no listing,
    stat or open of anything, so a flood of them never scans the sessions folder."""
    for _ in range(5):
        write_session_file(data_dir, [("message", {"role": "user", "content": "a"})])

    async def scenario() -> None:
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        try:
            touched: list[str] = []

            def refuse(name: str):
                def call(*args, **kwargs):
                    touched.append(name)
                    raise AssertionError(f"{name} touched the disk for an unknown id")

                return call

            with monkeypatch.context() as patch:
                for name in ("listdir", "scandir", "stat", "open", "lstat"):
                    patch.setattr(os, name, refuse(name))
                missing = new_session_id()
                for attempt in (
                    ledger.append(missing, [user("x")]),
                    ledger.stop(missing, StopKind.PAUSED, "p"),
                    ledger.resume(missing),
                    ledger.fork(missing, 1, None),
                ):
                    with pytest.raises(SessionNotFoundError):
                        await attempt
            assert touched == []
        finally:
            await ledger.close()

    asyncio.run(scenario())


def test_reopening_a_session_reads_a_bounded_number_of_bytes_whatever_its_size(data_dir, monkeypatch) -> None:
    """With one file open at a time, a session closed and reopened at 0.3, 3 and 9 MB reads its saved
    state and the lines after it (never more than the save interval plus one request), and never
    rebuilds its whole file; its tool calls still validate after each reopen."""
    monkeypatch.setattr(sessions, "SAVE_EVERY_BYTES", 1 << 20)
    monkeypatch.setattr(session_cache, "KEPT_VIEWS", 0)  # no closed session's view stays in memory
    read: list[int] = []
    real_pread = saved_state._os_pread

    def counting_pread(fd: int, size: int, offset: int) -> bytes:
        data = real_pread(fd, size, offset)
        read.append(len(data))
        return data

    def no_whole_file(*args, **kwargs):
        raise AssertionError("a reopen rebuilt the whole file")

    big = "x" * 90_000

    async def scenario() -> list[tuple[int, int]]:
        # One I/O thread: work it runs after an eviction runs after the evicted session's save.
        ledger = SessionLedger(WriterConfig(data_dir=data_dir, max_open_sessions=1, io_threads=1))
        seen = []
        try:
            grown, _ = await ledger.create_session(SessionSpec())
            other, _ = await ledger.create_session(SessionSpec())
            await ledger.append(grown, [call("early")])
            for target in (300_000, 3_000_000, 9_000_000):
                while ledger.root.locate(grown)[1].stat().st_size < target:
                    await ledger.append(grown, [user(big), user(big)])
                await ledger.append(other, [user("evicts the grown session")])
                await ledger.run_io(lambda: None)  # the evicted session's state is saved by now
                assert grown not in ledger._sessions
                read.clear()
                with monkeypatch.context() as patch:
                    patch.setattr(saved_state, "_os_pread", counting_pread)
                    patch.setattr(committed_lines, "pread", counting_pread)
                    patch.setattr(session_cache, "index_rebuild", no_whole_file)
                    await ledger.append(grown, [output("early")])  # the call from the first request
                seen.append((ledger.root.locate(grown)[1].stat().st_size, sum(read)))
                await ledger.append(other, [user("evicts it again")])
        finally:
            await ledger.close()
        return seen

    seen = asyncio.run(scenario())
    assert all(size > target for (size, _), target in zip(seen, (300_000, 3_000_000, 9_000_000), strict=True))
    for size, bytes_read in seen:
        assert bytes_read <= (1 << 20) + 200_000 + 1024, (size, bytes_read)


def test_a_session_without_saved_state_is_indexed_from_its_file_once(data_dir) -> None:
    """A session file written by another version (no saved state) is read whole on its first open,
    its tool calls validate, and its state is saved so that the next reopen is bounded."""
    sid = write_session_file(
        data_dir,
        [
            (
                "message",
                {
                    "role": "assistant",
                    "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                    ],
                },
            ),
        ],
    )

    async def scenario() -> list[int]:
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        try:
            seqs, _ = await ledger.append(sid, [output("c1")])
            with pytest.raises(RecordValidationError):
                await ledger.append(sid, [output("never-called")])
            return seqs
        finally:
            await ledger.close()

    assert asyncio.run(scenario()) == [2]
    root = sessions.DataRoot(data_dir)
    saved = orjson.loads(saved_state.state_path(root.shard_dir(root.shard_of(sid)), sid).read_bytes())
    assert saved["calls"] == ["c1"]
    assert saved["last_seq"] == 2


def test_a_failed_round_fails_every_waiter_of_every_session_in_it_and_leaves_no_partial_line(
    data_dir, monkeypatch
) -> None:
    """Three sessions share a round whose syncfs fails (EIO), and then a round whose second write fails
    half-way (ENOSPC): every waiter of every session in each round gets the error, every file is cut
    back to its length before the round, and the next appends land with the seqs the failed ones had."""
    hold = threading.Event()
    holding = threading.Event()
    real_write_batch = SessionLog.write_batch

    def held_write(self: SessionLog, data: bytes, sync: bool) -> None:
        if b"holder" in data:
            holding.set()
            assert hold.wait(10)
        real_write_batch(self, data, sync)

    monkeypatch.setattr(SessionLog, "write_batch", held_write)
    failures = {"syncfs": 0, "write": 0}

    def failing_syncfs(fd: int) -> None:
        failures["syncfs"] += 1
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    real_write = committer._os_write
    writes: list[int] = []

    def failing_second_write(fd: int, data) -> int:
        writes.append(fd)
        if len(writes) == 2:
            real_write(fd, bytes(data[: len(data) // 2]))
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    async def one_round(ledger, holder_id: str, ids: list[str], text: str) -> list:
        """Hold a round on ``holder_id`` so that one append to each of ``ids`` forms the next round."""
        hold.clear()
        holding.clear()
        held = asyncio.ensure_future(ledger.append(holder_id, [user("holder")]))
        while not holding.is_set():
            await asyncio.sleep(0.002)
        waiters = [asyncio.ensure_future(ledger.append(sid, [user(text)])) for sid in ids]
        await asyncio.sleep(0.01)
        hold.set()
        await held
        return await asyncio.gather(*waiters, return_exceptions=True)

    async def scenario() -> tuple[list, list, list, dict[str, bytes], dict[str, bytes]]:
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        try:
            holder, _ = await ledger.create_session(SessionSpec())
            ids = [(await ledger.create_session(SessionSpec()))[0] for _ in range(3)]
            for sid in ids:
                await ledger.append(sid, [user("before")])
            paths = {sid: ledger.root.locate(sid)[1] for sid in ids}
            before = {sid: path.read_bytes() for sid, path in paths.items()}
            monkeypatch.setattr(committer, "_os_syncfs", failing_syncfs)
            synced = await one_round(ledger, holder, ids, "lost to syncfs")
            monkeypatch.setattr(committer, "_os_syncfs", lambda fd: None)
            monkeypatch.setattr(committer, "_os_write", failing_second_write)
            written = await one_round(ledger, holder, ids, "lost to a write")
            after_failures = {sid: path.read_bytes() for sid, path in paths.items()}
            monkeypatch.setattr(committer, "_os_write", real_write)
            later = [await ledger.append(sid, [user("after")]) for sid in ids]
            return synced, written, later, before, after_failures
        finally:
            hold.set()
            await ledger.close()

    synced, written, later, before, after_failures = asyncio.run(scenario())
    assert failures["syncfs"] == 1
    assert [type(outcome) for outcome in synced] == [StorageWriteError] * 3
    assert {outcome.operation for outcome in synced} == {"syncfs"}
    assert [type(outcome) for outcome in written] == [StorageWriteError] * 3
    assert {outcome.errno_name for outcome in written} == {"ENOSPC"}
    assert after_failures == before, "no partial line, and nothing of a failed round, anywhere"
    assert [seqs for seqs, _ in later] == [[2], [2], [2]]


def test_request_id_memory_has_one_global_bound(data_dir) -> None:
    """Request ids of all sessions share one bound: beyond it the least recently used id is forgotten
    (its retry without request_since_seq writes again), while a recent one still returns the first
    answer and writes nothing."""

    async def scenario() -> tuple[int, list[int], list[int], list[int]]:
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        ledger._requests = RequestMemory(limit=4, on_forget=ledger._request_forgotten)
        try:
            ids = [(await ledger.create_session(SessionSpec()))[0] for _ in range(5)]
            first = []
            for sid in ids:
                first.append(await ledger.enqueue(sid, [user("r")], request_id="req"))
                await first[-1][2]
            remembered = len(ledger._requests)
            oldest_retry, _, durable = await ledger.enqueue(ids[0], [user("r")], request_id="req")
            await durable
            newest_retry, _, durable = await ledger.enqueue(ids[-1], [user("r")], request_id="req")
            await durable
            return remembered, first[-1][0], oldest_retry, newest_retry
        finally:
            await ledger.close()

    remembered, newest_first, oldest_retry, newest_retry = asyncio.run(scenario())
    assert remembered == 4
    assert oldest_retry == [2], "the forgotten id wrote again"
    assert newest_retry == newest_first == [1], "a remembered id returned the first answer"


_SAMPLE_PAYLOADS = {
    RecordType.SESSION_META: {"session_id": "s", "tenant": "t"},
    RecordType.MESSAGE: {
        "role": "assistant",
        "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f"}}],
    },
    RecordType.REASONING: {"content": "r"},
    RecordType.COMPACTED: {"summary": "s", "replacement_history": [{"role": "user", "content": "u"}]},
    RecordType.TURN_CONTEXT: {"model": "m"},
    RecordType.EVENT: {"kind": "k", "body": {}},
    RecordType.AGENT_CHECKPOINT: {"digest": "d", "message_count": 0, "covers_seq": 0, "stop_kind": "paused"},
    RecordType.STOP: {"stop_kind": "paused", "reason": "r", "checkpoint_seq": 1},
    RecordType.RETRACTION: {"messages": [{"seq": 1}], "call_ids": ["old"]},
}


def test_every_record_type_is_claimed_by_the_writers_dispatch() -> None:
    """The writer's one match over record types claims every RecordType: appendable ones pass validation
    (a message adds its calls, a compaction resets the view), the others are refused by name; a type
    outside the enum falls through to assert_never."""
    assert set(_SAMPLE_PAYLOADS) == set(RecordType)
    for record_type in RecordType:
        view = CallView({"old"})
        payload = _SAMPLE_PAYLOADS[record_type]
        if record_type in APPENDABLE_TYPES:
            apply_record(view, record_type, payload, 3, validate=True)
        else:
            with pytest.raises(RecordValidationError) as caught:
                apply_record(view, record_type, payload, 3, validate=True)
            assert caught.value.index == 3
            assert caught.value.field == record_type.value
        apply_record(view, record_type, payload, 3, validate=False)  # replaying a file accepts every type
        expected = {
            RecordType.MESSAGE: {"old", "c"},
            RecordType.COMPACTED: set(),
            RecordType.RETRACTION: set(),  # the retracted message's call leaves the view
        }.get(record_type, {"old"})
        assert set(view.committed()) == expected, record_type
    with pytest.raises(AssertionError):
        apply_record(CallView(set()), "not_a_type", {}, 0, validate=False)  # type: ignore[arg-type]


class _RecordingContext:
    """A servicer context that records the status a handler sets; aborting is refused."""

    def __init__(self) -> None:
        self.code: object = None
        self.details = ""

    def set_code(self, code: object) -> None:
        self.code = code

    def set_details(self, details: str) -> None:
        self.details = details

    def peer(self) -> str:
        return "ipv4:127.0.0.1:40000"

    async def abort_with_status(self, status: object) -> None:
        raise AssertionError("an unknown id was refused through the abort path")


def test_an_append_to_an_unknown_id_is_refused_before_its_records_are_decoded(data_dir, monkeypatch) -> None:
    """A unary Append to a well-formed unknown id sets NOT_FOUND and its message without decoding a
    record, raising or aborting; a malformed id still takes the INVALID_ARGUMENT path."""
    import grpc

    from writer_service import server

    def no_decoding(*args: object) -> None:
        raise AssertionError("the records of a request to an unknown id were decoded")

    monkeypatch.setattr(server, "request_payloads", no_decoding)

    async def scenario() -> None:
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        try:
            servicer = server.RolloutWriterServicer(ledger)
            missing = new_session_id()
            bad_record = writer_pb2.AppendRecord()  # empty: INVALID_ARGUMENT had it been decoded
            context = _RecordingContext()
            request = writer_pb2.AppendRequest(session_id=missing, records=[bad_record])
            await servicer.Append(request, context)  # type: ignore[arg-type]
            assert context.code == grpc.StatusCode.NOT_FOUND
            assert context.details == f"session {missing!r} not found"
            assert ledger.unknown_id_message("../x") is None
            known, _ = await ledger.create_session(SessionSpec())
            assert ledger.unknown_id_message(known) is None
        finally:
            await ledger.close()

    asyncio.run(scenario())


def test_large_work_is_followed_by_one_heap_trim_and_small_work_by_none(monkeypatch) -> None:
    """Work of at least LARGE_WORK_BYTES schedules one heap trim shortly after (a burst coalesces into
    one); smaller work, the append path's, schedules none."""
    from writer_service import heap_trim

    assert heap_trim.trim_heap()  # glibc: malloc_trim is there
    monkeypatch.setattr(heap_trim, "TRIM_DELAY_SECONDS", 0.01)
    submitted: list[object] = []

    class Recorder:
        def submit(self, function: object) -> None:
            submitted.append(function)

    async def scenario() -> None:
        trimmer = heap_trim.HeapTrimmer(Recorder())  # type: ignore[arg-type]
        trimmer.after(heap_trim.LARGE_WORK_BYTES - 1)
        await asyncio.sleep(0.05)
        assert submitted == []
        for _ in range(3):
            trimmer.after(heap_trim.LARGE_WORK_BYTES)
        await asyncio.sleep(0.05)
        assert submitted == [heap_trim.trim_heap]
        trimmer.after(60 * 1024 * 1024)
        await asyncio.sleep(0.05)
        assert submitted == [heap_trim.trim_heap] * 2

    asyncio.run(scenario())


def test_a_large_request_and_a_large_stop_schedule_a_heap_trim(data_dir, monkeypatch) -> None:
    """The Append and ImportSessions screens have the heap trimmed after a request of LARGE_WORK_BYTES
    or more, and a Stop of a session that large after its rebuild."""
    from writer_service import heap_trim, server

    monkeypatch.setattr(heap_trim, "LARGE_WORK_BYTES", 4096)

    async def scenario() -> None:
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        try:
            trimmer = ledger.heap_trimmer
            request = writer_pb2.AppendRequest(session_id=new_session_id(), records=[]).SerializeToString()
            server.screen_append(request, 1024, trimmer)
            assert trimmer.trims == 0
            await asyncio.sleep(heap_trim.TRIM_DELAY_SECONDS + 0.1)
            assert trimmer.trims == 0
            large = writer_pb2.AppendRequest(records=[writer_pb2.AppendRecord()] * 3000).SerializeToString()
            assert len(large) >= 4096
            server.screen_append(large, 1024 * 1024, trimmer)
            await asyncio.sleep(heap_trim.TRIM_DELAY_SECONDS + 0.1)
            assert trimmer.trims == 1
            server.screen_import(large, trimmer)  # an ImportSessions part that large
            await asyncio.sleep(heap_trim.TRIM_DELAY_SECONDS + 0.1)
            assert trimmer.trims == 2
            session_id, _ = await ledger.create_session(SessionSpec())
            await ledger.append(session_id, [user("x" * 5000)])
            await ledger.stop(session_id, StopKind.PAUSED, "p")
            await asyncio.sleep(heap_trim.TRIM_DELAY_SECONDS + 0.1)
            assert trimmer.trims == 3
        finally:
            await ledger.close()

    asyncio.run(scenario())


def test_a_heap_trim_follows_the_last_large_work_of_a_burst(monkeypatch) -> None:
    """Large work arriving while a trim is pending postpones it to TRIM_DELAY_SECONDS after the last
    piece (so buffers freed late in a burst are trimmed too), never past TRIM_MAX_WAIT_SECONDS."""
    from writer_service import heap_trim

    monkeypatch.setattr(heap_trim, "TRIM_DELAY_SECONDS", 0.5)
    submitted: list[float] = []
    pieces_before: list[int] = []  # per trim: how many pieces of the steady stream came before it
    pieces = 0

    class Recorder:
        def submit(self, function: object) -> None:
            submitted.append(asyncio.get_running_loop().time())
            pieces_before.append(pieces)

    async def scenario() -> None:
        nonlocal pieces
        loop = asyncio.get_running_loop()
        trimmer = heap_trim.HeapTrimmer(Recorder())  # type: ignore[arg-type]
        started = loop.time()
        trimmer.after(heap_trim.LARGE_WORK_BYTES)
        await asyncio.sleep(0.3)
        last = loop.time()
        trimmer.after(heap_trim.LARGE_WORK_BYTES)
        await asyncio.sleep(1.0)
        assert len(submitted) == 1
        assert submitted[0] >= last + 0.5 > started + 0.5
        monkeypatch.setattr(heap_trim, "TRIM_MAX_WAIT_SECONDS", 0.7)
        for _ in range(6):  # work every 0.25 s for 1.5 s: the trim still comes within the max wait
            trimmer.after(heap_trim.LARGE_WORK_BYTES)
            pieces += 1
            await asyncio.sleep(0.25)
        # By the loop's timers, however late they fire: the pending trim is due 0.5 s after the first
        # piece, is postponed to 0.5 s after the second (0.25 s later), and is then past the 0.7 s
        # max wait, before the fifth piece's turn (0.25 s after the fourth, at least 1.0 s in).
        # Postponed to 0.5 s after every piece, it would come after the sixth.
        assert len(submitted) >= 2
        assert pieces_before[1] <= 4, pieces_before

    asyncio.run(scenario())
