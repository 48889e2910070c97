"""Idempotent retries, optimistic concurrency, concurrent clients, undecodable input (docs/spec.md §2.3, §2.4)."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import grpc
import orjson
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from rollout.v1 import records_pb2, writer_pb2, writer_pb2_grpc
from tests.conftest import REPO
from tests.data_roots import session_file
from tests.ports import free_port
from tests.processes import launch, reap, start_service
from writer_service.committer import STOP_BEFORE_SYNC_ENV


def user(text: str) -> writer_pb2.AppendRecord:
    return writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="user", text=text))


def lines_of(data_dir, session_id: str) -> list[dict]:
    path = session_file(data_dir, session_id)
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def test_a_retried_request_id_writes_once_and_returns_the_first_answer(writer, data_dir) -> None:
    """A retry with the same request_id and records answers the same seqs and writes nothing again."""
    sid = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    request = writer_pb2.AppendRequest(session_id=sid, records=[user("once")], request_id="req-1")
    first = writer.Append(request)
    retry = writer.Append(request)
    assert retry == first
    assert sum(1 for r in lines_of(data_dir, sid) if r["payload"].get("content") == "once") == 1


def test_a_request_id_reused_with_other_records_is_refused(writer) -> None:
    """The same request_id with different records is INVALID_ARGUMENT, not a silent second write."""
    sid = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    writer.Append(writer_pb2.AppendRequest(session_id=sid, records=[user("a")], request_id="req-1"))
    with pytest.raises(grpc.RpcError) as caught:
        writer.Append(writer_pb2.AppendRequest(session_id=sid, records=[user("b")], request_id="req-1"))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "already used for different records" in caught.value.details()


def test_expected_next_seq_mismatch_reports_the_actual_value(writer) -> None:
    """expected_next_seq that does not match is FAILED_PRECONDITION with the actual next seq in the details."""
    sid = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    assert (
        writer.Append(
            writer_pb2.AppendRequest(session_id=sid, records=[user("a")], expected_next_seq=1)
        ).next_seq
        == 2
    )
    with pytest.raises(grpc.RpcError) as caught:
        writer.Append(writer_pb2.AppendRequest(session_id=sid, records=[user("b")], expected_next_seq=1))
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    status = rpc_status.from_call(caught.value)
    failure = error_details_pb2.PreconditionFailure()
    assert status.details[0].Unpack(failure)
    assert failure.violations[0].description == "next_seq=2"


def test_concurrent_clients_get_one_total_order_with_contiguous_seqs(writer, data_dir) -> None:
    """16 clients x 500 appends to one session give seqs 1..8000, every record present exactly once."""
    sid = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    acked: list[tuple[int, str]] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def client(number: int) -> None:
        try:
            for index in range(500):
                text = f"c{number}-{index}"
                seqs = writer.Append(writer_pb2.AppendRequest(session_id=sid, records=[user(text)])).seqs
                with lock:
                    acked.append((seqs[0], text))
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    records = lines_of(data_dir, sid)[1:]
    assert [r["seq"] for r in records] == list(range(1, 8001))
    by_seq = {r["seq"]: r["payload"]["content"] for r in records}
    assert sorted(acked) == sorted(by_seq.items())
    assert len(set(by_seq.values())) == 8000
    per_client = {}
    for _seq, text in sorted(acked):
        number, index = text[1:].split("-")
        assert per_client.get(number, -1) < int(index), "each client's appends keep their order"
        per_client[number] = int(index)


def _with_lone_surrogate(session_id: str) -> bytes:
    """A serialized one-record AppendRequest whose text is U+D800 encoded as (invalid) UTF-8.

    Python clients cannot build one (see below); clients in other languages can.
    """
    raw = writer_pb2.AppendRequest(session_id=session_id, records=[user("XXX")]).SerializeToString()
    assert raw.count(b"XXX") == 1
    return raw.replace(b"XXX", b"\xed\xa0\x80")


def test_a_lone_surrogate_is_rejected_and_nothing_is_written(writer, writer_process, data_dir) -> None:
    """A string field holding an encoded lone surrogate (invalid UTF-8) is INVALID_ARGUMENT, never stored."""
    sid = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    bad = _with_lone_surrogate(sid)
    with grpc.insecure_channel(writer_process.address) as channel:
        append_raw = channel.unary_unary("/rollout.v1.RolloutWriter/Append")
        with pytest.raises(grpc.RpcError) as caught:
            append_raw(bad)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "valid UTF-8" in caught.value.details()
    assert len(lines_of(data_dir, sid)) == 1


def test_python_clients_cannot_even_build_a_lone_surrogate() -> None:
    """The protobuf runtime refuses a lone surrogate before it reaches the wire."""
    with pytest.raises((ValueError, UnicodeError)):
        records_pb2.ChatMessage(role="user", text="\ud800").SerializeToString()


def test_an_undecodable_request_in_a_stream_ends_it_with_invalid_argument(
    writer, writer_process, data_dir
) -> None:
    """Invalid UTF-8 in the second request of an AppendStream: the first is acknowledged, nothing else lands."""
    sid = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    good = writer_pb2.AppendRequest(session_id=sid, records=[user("fine")]).SerializeToString()
    bad = _with_lone_surrogate(sid)
    with grpc.insecure_channel(writer_process.address) as channel:
        stream = channel.stream_stream("/rollout.v1.RolloutWriter/AppendStream")
        responses = stream(iter([good, bad, good]))
        first = writer_pb2.AppendResponse.FromString(next(responses))
        with pytest.raises(grpc.RpcError) as caught:
            next(responses)
    assert list(first.seqs) == [1]
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "request 1 of the stream" in caught.value.details()
    assert len(lines_of(data_dir, sid)) == 2


def test_a_retry_after_the_first_attempt_was_cancelled_gets_the_first_answer(data_dir, monkeypatch) -> None:
    """A caller cancelled while its append waits for durability (a client's deadline, a dropped
    connection) and then retried with the same request id gets the first answer once the lines
    are durable: the answer kept for the retry waits on the committer's own future, never on the
    cancelled caller's (whose retry raised CancelledError in the writer)."""
    import asyncio

    from shared.session_meta import SessionSpec
    from shared.wire import append_payloads
    from writer_service.committer import SessionLog
    from writer_service.sessions import SessionLedger, WriterConfig

    release = threading.Event()
    write_batch = SessionLog.write_batch

    def held(self, data, sync):  # the round waits until the test lets it write
        release.wait(timeout=600)
        return write_batch(self, data, sync)

    async def scenario() -> tuple[str, list[int], list[int]]:
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        try:
            sid, _ = await ledger.create_session(SessionSpec())
            monkeypatch.setattr(SessionLog, "write_batch", held)
            records = [append_payloads(user("once"), 0)]
            seqs, _, durable = await ledger.enqueue(sid, records, request_id="req-1")
            waiter = asyncio.ensure_future(durable)
            await asyncio.sleep(0)
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
            retried, _, again = await ledger.enqueue(sid, records, request_id="req-1")
            release.set()
            await again
            return sid, seqs, retried
        finally:
            release.set()
            await ledger.close()

    sid, seqs, retried = asyncio.run(scenario())
    assert retried == seqs
    assert sum(1 for r in lines_of(data_dir, sid) if r["payload"].get("content") == "once") == 1


def test_a_caller_cancelled_while_a_session_loads_leaves_the_load_to_the_others(
    data_dir, monkeypatch
) -> None:
    """Two appends wait for one session's file to be loaded (a writer just started, a session
    reopened): the caller that began the load is cancelled (a client's deadline, a dropped
    connection). The load goes on for the other, whose append lands; it is read once, and its
    file is left open once (the cancelled caller's load was thrown away, its file descriptor
    leaked, and the other caller got CancelledError)."""
    import asyncio
    import os

    from shared.session_meta import SessionSpec
    from shared.wire import append_payloads
    from writer_service import sessions
    from writer_service.sessions import SessionLedger, WriterConfig

    started = threading.Event()
    release = threading.Event()
    loads: list[bool] = []
    load_session = sessions.load_session

    def held(*args, quick=False, **kwargs):  # the I/O thread's load waits until the test lets it
        if quick:
            return None  # no quick reopen: the load goes to an I/O thread
        loads.append(True)
        started.set()
        release.wait(timeout=600)
        return load_session(*args, **kwargs)

    def descriptors_of(path) -> int:
        count = 0
        for name in os.listdir("/proc/self/fd"):
            try:
                count += os.readlink(f"/proc/self/fd/{name}") == str(path)
            except OSError:
                continue
        return count

    async def scenario() -> tuple[list[int], int, bool]:
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        sid, _ = await ledger.create_session(SessionSpec())
        await ledger.close()
        monkeypatch.setattr(sessions, "load_session", held)
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        try:
            first = asyncio.ensure_future(ledger.append(sid, [append_payloads(user("first"), 0)]))
            await asyncio.to_thread(started.wait, 600)
            second = asyncio.ensure_future(ledger.append(sid, [append_payloads(user("second"), 0)]))
            await asyncio.sleep(0)  # the second append waits for the same load
            first.cancel()
            with pytest.raises(asyncio.CancelledError):
                await first
            release.set()
            seqs, _ = await second
            return seqs, descriptors_of(session_file(data_dir, sid)), sid in ledger._sessions
        finally:
            release.set()
            await ledger.close()

    seqs, descriptors, open_now = asyncio.run(scenario())
    assert seqs == [1]
    assert open_now
    assert descriptors == 1
    assert loads == [True]


#: A client process that sends one Append (session, request id, text from argv) and waits for it.
_ONE_APPEND = """
import sys, grpc
from rollout.v1 import records_pb2, writer_pb2, writer_pb2_grpc
address, session_id, request_id, text = sys.argv[1:5]
record = writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="user", text=text))
request = writer_pb2.AppendRequest(
    session_id=session_id, records=[record], request_id=request_id, request_since_seq=2
)
writer_pb2_grpc.RolloutWriterStub(grpc.insecure_channel(address)).Append(request, timeout=600)
"""


def stopped_by_signal(pid: int) -> bool:
    """Whether process ``pid`` is stopped by a signal (state T in /proc/<pid>/stat)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2] == "T"


def wait_until(condition, what: str, seconds: float = 120.0) -> None:
    """Wait (polling) until ``condition()``; fail naming ``what`` after a generous bound."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.02)


@pytest.mark.parametrize("writer_killed", [False, True], ids=["writer-kept", "writer-killed-too"])
def test_a_request_of_a_client_killed_mid_durability_is_answered_once_to_another_process(
    data_dir, tmp_path, writer_killed
) -> None:
    """A client process is killed (SIGKILL) while its Append's lines wait for durability (the
    writer stops itself between the round's write and its sync: the committer's test hook).
    Another process sends the same request id: it gets the first answer (seq 2) once the round
    is durable, from the writer's memory or, when the writer was killed too and restarted, from
    the file; the record is there once and the next append follows it."""
    address = f"127.0.0.1:{free_port()}"
    marker = "durability-of-a-killed-client"
    writer = start_service(
        "writer", data_dir, tmp_path / "writer.log", address=address, env={STOP_BEFORE_SYNC_ENV: marker}
    )
    try:
        with grpc.insecure_channel(address) as channel:
            stub = writer_pb2_grpc.RolloutWriterStub(channel)
            sid = stub.CreateSession(writer_pb2.CreateSessionRequest()).session_id
            stub.Append(writer_pb2.AppendRequest(session_id=sid, records=[user("before")]))
            client = launch([sys.executable, "-c", _ONE_APPEND, address, sid, "killed-1", marker], cwd=REPO)
            try:
                wait_until(lambda: stopped_by_signal(writer.process.pid), "the writer stopped in the round")
            finally:
                reap(client)  # SIGKILL: the client goes with its call in flight
            if writer_killed:
                writer.stop(signal.SIGKILL)
                writer = start_service("writer", data_dir, tmp_path / "writer-2.log", address=address)
            else:
                os.kill(writer.process.pid, signal.SIGCONT)
            retry = writer_pb2.AppendRequest(
                session_id=sid, records=[user(marker)], request_id="killed-1", request_since_seq=2
            )
            first = stub.Append(retry, timeout=120, wait_for_ready=True)
            again = stub.Append(retry, timeout=120)
            after = stub.Append(writer_pb2.AppendRequest(session_id=sid, records=[user("after")]))
    finally:
        writer.stop()
    assert list(first.seqs) == list(again.seqs) == [2]
    assert list(after.seqs) == [3]
    assert [r["payload"].get("content") for r in lines_of(data_dir, sid)[1:]] == ["before", marker, "after"]
