"""A request over one of the writer's fixed limits is refused as INVALID_ARGUMENT naming the limit
(it can never succeed, so no status says to retry it); only a queue that is full for now, which a
retry may find emptied, is RESOURCE_EXHAUSTED."""

from __future__ import annotations

import asyncio
import os
import threading

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

import writer_service.committer as committer
from rollout.v1 import records_pb2, writer_pb2
from serving.status import _status_of
from shared.errors import InvalidArgumentError, QueueFullError
from shared.session_meta import SessionSpec
from shared.wire import append_payloads
from writer_service.sessions import SessionLedger, WriterConfig

#: The writer's default limit of records queued for one session (WriterConfig.max_queued_records).
QUEUE_LIMIT = 100_000


def user(text: str) -> writer_pb2.AppendRecord:
    return writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="user", text=text))


def field_of(error: grpc.RpcError) -> str:
    (detail,) = rpc_status.from_call(error).details
    bad_request = error_details_pb2.BadRequest()
    assert detail.Unpack(bad_request), detail
    (violation,) = bad_request.field_violations
    return str(violation.field)


def test_an_append_of_more_records_than_a_queue_holds_is_invalid_argument_naming_the_limit(writer) -> None:
    """An Append or AppendStream request of 100,001 records (the queue holds 100,000 per session)
    is INVALID_ARGUMENT, field ``records``, naming the limit; nothing is written, and the session
    takes appends afterwards."""
    sid = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    request = writer_pb2.AppendRequest(session_id=sid, records=[user("x")] * (QUEUE_LIMIT + 1))
    for call in (lambda: writer.Append(request), lambda: list(writer.AppendStream(iter([request])))):
        with pytest.raises(grpc.RpcError) as caught:
            call()
        error = caught.value
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
        assert f"{QUEUE_LIMIT + 1} records" in error.details()
        assert f"at most {QUEUE_LIMIT}" in error.details()
        assert "retry" not in error.details()
        assert field_of(error) == "records"
    ack = writer.Append(writer_pb2.AppendRequest(session_id=sid, records=[user("after")]))
    assert list(ack.seqs) == [1]


class HeldDisk:
    """Holds every durable write until released, so that what is queued stays queued."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def write(self, fd: int, data) -> int:
        assert self.release.wait(30)
        return os.write(fd, data)

    def write_dsync(self, fd: int, data) -> int:
        assert self.release.wait(30)
        return os.pwritev(fd, [data], -1, os.RWF_DSYNC)


def test_a_full_queue_is_resource_exhausted_and_a_request_it_can_never_hold_is_invalid_argument(
    data_dir, monkeypatch
) -> None:
    """With a queue of 10 records per session and 8 held in it, 3 more are RESOURCE_EXHAUSTED (they
    fit once the queue drains, and then land) while 11 are INVALID_ARGUMENT naming the limit."""
    disk = HeldDisk()
    monkeypatch.setattr(committer, "_os_write", disk.write)
    monkeypatch.setattr(committer, "_os_write_dsync", disk.write_dsync)
    records = [append_payloads(user(f"r{n}"), 0) for n in range(11)]

    async def scenario() -> tuple[BaseException, BaseException, list[int]]:
        ledger = SessionLedger(WriterConfig(data_dir=data_dir, max_queued_records=10))
        try:
            disk.release.set()
            sid, _ = await ledger.create_session(SessionSpec())
            await ledger.append(sid, records[:1])  # the session is open
            disk.release.clear()
            first = asyncio.ensure_future(ledger.append(sid, records[:1]))  # held in its write
            state = ledger._sessions[sid]
            while not state.log.in_round:
                await asyncio.sleep(0.001)
            _, _, queued = await ledger.enqueue(sid, records[:8])
            with pytest.raises(QueueFullError) as full:
                await ledger.enqueue(sid, records[:3])
            with pytest.raises(InvalidArgumentError) as never:
                await ledger.enqueue(sid, records[:11])
            disk.release.set()
            await first
            await queued
            seqs, _ = await ledger.append(sid, records[:3])
            return full.value, never.value, seqs
        finally:
            disk.release.set()
            await ledger.close()

    full, never, seqs = asyncio.run(scenario())
    assert seqs == [11, 12, 13]
    code, message, _ = _status_of(full, "")
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "retry with backoff" in message
    code, message, details = _status_of(never, "")
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "11 records" in message
    assert "at most 10" in message
    assert details[0].field_violations[0].field == "records"


def test_every_other_fixed_limit_of_the_writer_is_invalid_argument_naming_it(writer) -> None:
    """A record over the line limit, a stop reason or error over 16 KiB characters, a session_meta
    text field over 4096 characters, a delegation id over 128 bytes and a request id over 128
    characters are INVALID_ARGUMENT with the limit in the message, never a status to retry."""
    sid = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    paused = records_pb2.STOP_KIND_PAUSED
    cases = [
        (
            writer.Append,
            writer_pb2.AppendRequest(session_id=sid, records=[user("x" * (64 * 1024 * 1024))]),
            "records[0].message",
            "67108864",
        ),
        (
            writer.Stop,
            writer_pb2.StopRequest(session_id=sid, stop_kind=paused, reason="r" * (16 * 1024 + 1)),
            "reason",
            "16384",
        ),
        (
            writer.Stop,
            writer_pb2.StopRequest(
                session_id=sid,
                stop_kind=paused,
                error=records_pb2.StopError(message="m" * (16 * 1024 + 1), category="c"),
            ),
            "error",
            "16384",
        ),
        (writer.CreateSession, writer_pb2.CreateSessionRequest(model="m" * 4097), "model", "4096"),
        (
            writer.CreateSession,
            writer_pb2.CreateSessionRequest(parent_session_id=sid, delegation_id="d" * 129),
            "delegation_id",
            "128",
        ),
        (
            writer.Append,
            writer_pb2.AppendRequest(session_id=sid, records=[user("x")], request_id="q" * 129),
            "request_id",
            "128",
        ),
    ]
    for function, request, field, limit in cases:
        with pytest.raises(grpc.RpcError) as caught:
            function(request, timeout=60)
        error = caught.value
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (field, error.code(), error.details())
        assert limit in error.details(), (field, error.details())
        assert field_of(error) == field
