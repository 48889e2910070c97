"""ImportSessions: whole sessions, all or nothing, with their source times (writer.proto)."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import orjson
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from rollout.v1 import reader_pb2, records_pb2, writer_pb2, writer_pb2_grpc
from tests.conftest import start_service
from tests.data_roots import session_file, session_files

PARENT = "01938a4b-1111-7000-8000-000000000001"
CHILD = "01938a4b-1111-7000-8000-000000000002"


def create(session_id: str, **fields) -> writer_pb2.ImportSessionsRequest:
    return writer_pb2.ImportSessionsRequest(
        create=writer_pb2.CreateSessionRequest(
            session_id=session_id, created_at="2025-01-02T03:04:05Z", **fields
        )
    )


def records(*items: writer_pb2.AppendRecord) -> writer_pb2.ImportSessionsRequest:
    return writer_pb2.ImportSessionsRequest(records=writer_pb2.ImportRecords(records=items))


def stop(ts: str = "2025-01-02T03:10:00Z") -> writer_pb2.ImportSessionsRequest:
    return writer_pb2.ImportSessionsRequest(
        stop=writer_pb2.StopRequest(stop_kind=records_pb2.STOP_KIND_COMPLETED, reason="imported", ts=ts)
    )


def message(role: str, text: str = "", ts: str = "", **fields) -> writer_pb2.AppendRecord:
    return writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role=role, text=text, **fields), ts=ts)


def call(call_id: str, ts: str = "") -> writer_pb2.AppendRecord:
    chat = records_pb2.ChatMessage(role="assistant")
    chat.tool_calls.add(
        id=call_id, type="function", function=records_pb2.FunctionCall(name="Task", arguments="{}")
    )
    return writer_pb2.AppendRecord(message=chat, ts=ts)


def parent_and_child() -> list[writer_pb2.ImportSessionsRequest]:
    """A parent that delegates with call_1, and the child run it started (in the same stream)."""
    return [
        create(PARENT, role=writer_pb2.SESSION_ROLE_ROOT),
        records(
            message("user", "go", ts="2025-01-02T03:04:06Z"), call("call_1", ts="2025-01-02T03:04:07+01:00")
        ),
        records(message("tool", "done", ts="2025-01-02T02:04:09Z", tool_call_id="call_1")),
        stop(),
        create(CHILD, agent_name="worker", parent_session_id=PARENT, delegation_id="call_1"),
        records(message("user", "sub task", ts="2025-01-02T03:04:08Z")),
        stop("2025-01-02T03:04:09Z"),
    ]


def lines_of(data_dir: Path, session_id: str) -> list[dict]:
    path = session_file(data_dir, session_id)
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def hidden_files(data_dir: Path) -> list[str]:
    return [path.name for path in session_files(data_dir, ".*")]


def test_a_parent_and_its_child_arrive_together_stopped_and_verified(writer, reader, data_dir) -> None:
    """Both sessions appear stopped with a verifying checkpoint; the child is found from the parent's call."""
    answer = writer.ImportSessions(iter(parent_and_child()))
    assert [(s.session_id, s.already_present) for s in answer.sessions] == [(PARENT, False), (CHILD, False)]
    assert [s.records for s in answer.sessions] == [6, 4]  # meta, records, checkpoint, stop
    for session in answer.sessions:
        replay = reader.GetReplay(reader_pb2.ReplayRequest(session_id=session.session_id))
        assert replay.digest_status == reader_pb2.DIGEST_STATUS_VERIFIED
        assert replay.computed_digest == session.digest
    [link] = reader.FindDelegations(reader_pb2.FindDelegationsRequest(parent_session_id=PARENT)).delegations
    assert (link.child_session_id, link.delegation_id) == (CHILD, "call_1")
    assert hidden_files(data_dir) == []


def test_source_times_are_kept_even_going_backwards(writer, data_dir) -> None:
    """Each record keeps its source time (normalized to UTC microseconds), in seq order, backwards included."""
    writer.ImportSessions(iter(parent_and_child()))
    parent = lines_of(data_dir, PARENT)
    assert [line["seq"] for line in parent] == list(range(6))
    assert [line["ts"] for line in parent[1:]] == [
        "2025-01-02T03:04:06.000000Z",
        "2025-01-02T02:04:07.000000Z",  # +01:00 in the source
        "2025-01-02T02:04:09.000000Z",
        "2025-01-02T03:10:00.000000Z",  # the checkpoint and the stop take the stop's time
        "2025-01-02T03:10:00.000000Z",
    ]
    assert parent[0]["payload"]["created_at"] == "2025-01-02T03:04:05.000000Z"


def _refusal_field(error: grpc.RpcError) -> str:
    status = rpc_status.from_call(error)
    assert status is not None
    bad_request = error_details_pb2.BadRequest()
    status.details[0].Unpack(bad_request)
    return bad_request.field_violations[0].field


def test_a_refused_record_midway_leaves_no_session_of_the_stream(writer, reader, data_dir) -> None:
    """A bad record in the second session refuses the whole stream, names session and record, keeps nothing."""
    requests = parent_and_child()
    requests[5] = records(message("user", "ok"), message("tool", "orphan", tool_call_id="call_unknown"))
    with pytest.raises(grpc.RpcError) as caught:
        writer.ImportSessions(iter(requests))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert _refusal_field(caught.value) == "sessions[1].records[1].message.tool_call_id"
    assert reader.ListSessions(reader_pb2.ListSessionsRequest()).sessions == []
    assert list(data_dir.glob("shards/*/delegations/*")) == []
    assert hidden_files(data_dir) == []
    assert len(writer.ImportSessions(iter(parent_and_child())).sessions) == 2  # the ids were not taken


@pytest.mark.parametrize(
    ("requests", "field"),
    [
        pytest.param([records(message("user", "x"))], "sessions[0].create", id="records-before-create"),
        pytest.param([create(PARENT), records(message("user", "x"))], "sessions[0].stop", id="no-stop"),
        pytest.param([create(PARENT), create(CHILD)], "sessions[0].stop", id="create-before-stop"),
        pytest.param(
            [create(PARENT), records(message("user", "x"), message("user", "y", ts="yesterday"))],
            "sessions[0].records[1].ts",
            id="a-time-that-is-not-rfc3339",
        ),
        pytest.param([create("")], "sessions[0].session_id", id="no-id"),
        pytest.param(
            [
                create(PARENT),
                writer_pb2.ImportSessionsRequest(
                    stop=writer_pb2.StopRequest(
                        stop_kind=records_pb2.STOP_KIND_FAILED,
                        error=records_pb2.StopError(message="m" * (16 * 1024 + 1), category="tool"),
                    )
                ),
            ],
            "sessions[0].error",
            id="an-error-text-over-the-stop-limit",
        ),
    ],
)
def test_a_stream_out_of_order_is_refused_and_keeps_nothing(
    writer, reader, data_dir, requests, field
) -> None:
    """Records before a create, a missing stop, a bad time or a missing id: INVALID_ARGUMENT naming it, nothing kept."""
    with pytest.raises(grpc.RpcError) as caught:
        writer.ImportSessions(iter(requests))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert _refusal_field(caught.value) == field
    assert reader.ListSessions(reader_pb2.ListSessionsRequest()).sessions == []
    assert hidden_files(data_dir) == []


def test_importing_again_skips_what_the_ledger_holds(writer, data_dir) -> None:
    """A second import of the same sessions writes nothing and says already_present."""
    writer.ImportSessions(iter(parent_and_child()))
    before = {sid: lines_of(data_dir, sid) for sid in (PARENT, CHILD)}
    again = writer.ImportSessions(iter(parent_and_child()))
    assert [(s.already_present, s.records) for s in again.sessions] == [(True, 0), (True, 0)]
    assert {sid: lines_of(data_dir, sid) for sid in (PARENT, CHILD)} == before


def test_a_cancelled_stream_leaves_nothing(writer_process, reader, data_dir) -> None:
    """A client that goes away mid-stream leaves no session and no staging file."""
    sent = threading.Event()

    def requests() -> Iterator[writer_pb2.ImportSessionsRequest]:
        yield create(PARENT, role=writer_pb2.SESSION_ROLE_ROOT)
        yield records(message("user", "partial"))
        sent.set()
        threading.Event().wait(30)  # never finishes: the call is cancelled
        yield stop()

    with grpc.insecure_channel(writer_process.address) as channel:
        future = writer_pb2_grpc.RolloutWriterStub(channel).ImportSessions.future(requests())
        assert sent.wait(60)
        deadline = time.monotonic() + 60  # the staging file exists once the records are written
        while not hidden_files(data_dir) and time.monotonic() < deadline:
            threading.Event().wait(0.05)
        assert hidden_files(data_dir), "the writer staged nothing to clean up"
        future.cancel()
    deadline = time.monotonic() + 60  # a hang guard: the clean-up follows the cancel at once
    while hidden_files(data_dir) and time.monotonic() < deadline:
        threading.Event().wait(0.05)
    assert hidden_files(data_dir) == []
    assert reader.ListSessions(reader_pb2.ListSessionsRequest()).sessions == []


def test_a_writer_killed_mid_import_leaves_nothing_after_restart(data_dir, tmp_path) -> None:
    """kill -9 while a session is staged: after the restart no session and no staging file exist."""
    service = start_service("writer", data_dir)
    sent = threading.Event()

    def requests() -> Iterator[writer_pb2.ImportSessionsRequest]:
        yield create(PARENT, role=writer_pb2.SESSION_ROLE_ROOT)
        yield records(*(message("user", f"m{n}") for n in range(50)))
        sent.set()
        threading.Event().wait(30)
        yield stop()

    try:
        with grpc.insecure_channel(service.address) as channel:
            future = writer_pb2_grpc.RolloutWriterStub(channel).ImportSessions.future(requests())
            assert sent.wait(60)
            deadline = time.monotonic() + 60  # the staging file exists once the records are written
            while not hidden_files(data_dir) and time.monotonic() < deadline:
                threading.Event().wait(0.05)
            assert hidden_files(data_dir), "the import never staged its session"
            os.kill(service.process.pid, signal.SIGKILL)
            service.process.wait(10)
            future.cancel()
    finally:
        service.stop()
    restarted = start_service("writer", data_dir)
    try:
        assert hidden_files(data_dir) == []
        assert [p.name for p in session_files(data_dir)] == []
        with grpc.insecure_channel(restarted.address) as channel:
            answer = writer_pb2_grpc.RolloutWriterStub(channel).ImportSessions(iter(parent_and_child()))
        assert [s.already_present for s in answer.sessions] == [False, False]
    finally:
        restarted.stop()


def test_a_call_cancelled_while_its_commit_publishes_leaves_the_session_known(data_dir, monkeypatch) -> None:
    """A cancel that lands while the commit links the files (a slow folder fsync here): the session
    is published once, the writer's index knows it (Resume works), and a retry finds it present."""
    import asyncio

    import writer_service.importing as importing
    from writer_service.server import start_writer
    from writer_service.sessions import WriterConfig

    fsync_dir = importing.fsync_dir
    abort = importing.SessionImport.abort
    publishing, aborting = threading.Event(), threading.Event()

    async def noted_abort(self: importing.SessionImport) -> None:
        aborting.set()
        await abort(self)

    cancelled_in_publish: list[bool] = []

    def slow_fsync_dir(path: Path) -> None:
        publishing.set()
        # A slow disk: the cancel reaches the call (its abort) meanwhile.
        cancelled_in_publish.append(aborting.wait(60))
        fsync_dir(path)

    monkeypatch.setattr(importing, "fsync_dir", slow_fsync_dir)
    monkeypatch.setattr(importing.SessionImport, "abort", noted_abort)
    parts = [create(PARENT, role=writer_pb2.SESSION_ROLE_ROOT), records(message("user", "hello")), stop()]

    async def scenario() -> None:
        writer = await start_writer(WriterConfig(data_dir=data_dir), "127.0.0.1:0")
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{writer.port}") as channel:
                stub = writer_pb2_grpc.RolloutWriterStub(channel)
                call = stub.ImportSessions(iter(parts))
                assert await asyncio.to_thread(publishing.wait, 60), "the commit never began publishing"
                call.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await call
                loop = asyncio.get_running_loop()
                deadline = loop.time() + 60
                while PARENT not in writer.ledger.index.entries:  # the publish ends after the cancel
                    assert loop.time() < deadline, "the published session never became known"
                    await asyncio.sleep(0.01)
                retry = await stub.ImportSessions(iter(parts))
                assert [result.already_present for result in retry.sessions] == [True]
                await stub.Resume(
                    writer_pb2.ResumeRequest(session_id=PARENT, force=True)
                )  # known, not NOT_FOUND
        finally:
            await writer.stop()

    asyncio.run(scenario())
    assert cancelled_in_publish[0], "the cancel did not reach the call while it published"
    assert len(list(session_files(data_dir, f"*{PARENT}*"))) == 1
    assert hidden_files(data_dir) == []
