"""Edge cases found by adversarial testing: each pins the precise status and that nothing partial is kept."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from types import SimpleNamespace

import grpc
import orjson
import pytest

from rollout.v1 import reader_pb2, records_pb2, writer_pb2, writer_pb2_grpc
from shared.errors import CorruptSessionError, RecordValidationError, SessionNotFoundError
from shared.records import encode_line
from shared.session_meta import SessionSpec
from shared.stop_kinds import StopKind
from shared.wire import append_payloads
from tests.conftest import run_rollout, start_service
from tests.data_roots import session_files, session_path
from writer_service.atomic_files import create_file
from writer_service.sessions import SessionLedger, WriterConfig

TS = "2026-11-30T10:00:00.000000Z"


def msg(role: str, text: str, **extra) -> writer_pb2.AppendRecord:
    return writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role=role, text=text, **extra))


def call(call_id: str) -> writer_pb2.AppendRecord:
    message = records_pb2.ChatMessage(role="assistant")
    message.tool_calls.add(
        id=call_id, type="function", function=records_pb2.FunctionCall(name="f", arguments="{}")
    )
    return writer_pb2.AppendRecord(message=message)


def append(writer, sid: str, *records) -> writer_pb2.AppendResponse:
    return writer.Append(writer_pb2.AppendRequest(session_id=sid, records=list(records)))


def rpc_error(function, *args) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        function(*args)
    return caught.value


def test_session_creation_is_atomic_and_never_half_written(tmp_path, monkeypatch) -> None:
    """create_file writes every byte even when os.write writes a few at a time, then links the name."""
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real_write(fd, bytes(data[:7])))
    body = encode_line(0, TS, "session_meta", {"session_id": "x", "cwd": "c" * 5000})
    fd = create_file(tmp_path / "s.jsonl", body, "x")
    os.close(fd)
    assert (tmp_path / "s.jsonl").read_bytes() == body
    assert [p.name for p in tmp_path.iterdir()] == ["s.jsonl"], "no temporary file is left"


def test_an_empty_or_headless_session_file_is_moved_aside_or_refused(data_dir) -> None:
    """A 0-byte file (a creation cut short) frees its id at start-up; a file without session_meta is DATA_LOSS."""
    empty_id = "01900000-0000-7000-8000-000000000001"
    session_path(data_dir, empty_id, f"2026-01-01_000000_{empty_id}.jsonl").write_bytes(b"")
    headless_id = "01900000-0000-7000-8000-000000000002"
    session_path(data_dir, headless_id, f"2026-01-01_000001_{headless_id}.jsonl").write_bytes(
        encode_line(0, TS, "message", {"role": "user", "content": "no meta"})
    )
    writer = start_service("writer", data_dir)
    try:
        with grpc.insecure_channel(writer.address) as channel:
            stub = writer_pb2_grpc.RolloutWriterStub(channel)
            created = stub.CreateSession(writer_pb2.CreateSessionRequest(session_id=empty_id))
            assert created.session_id == empty_id
            error = rpc_error(
                stub.Append, writer_pb2.AppendRequest(session_id=headless_id, records=[msg("user", "x")])
            )
            assert error.code() == grpc.StatusCode.DATA_LOSS
            assert "does not start with a session_meta" in error.details()
    finally:
        writer.stop()
    assert session_files(data_dir, f"*{empty_id}.jsonl.torn-1")


def test_idle_session_files_are_closed_beyond_the_limit(data_dir) -> None:
    """With at most 3 open files, 12 sessions still take appends: idle ones are closed and reopened."""

    async def scenario() -> list[int]:
        ledger = SessionLedger(WriterConfig(data_dir=data_dir, max_open_sessions=3))
        try:
            ids = [(await ledger.create_session(SessionSpec()))[0] for _ in range(12)]
            assert len(ledger._sessions) <= 3
            results = []
            for sid in ids:
                seqs, _ = await ledger.append(sid, [append_payloads(msg("user", "again"), 0)])
                results.append(seqs[0])
            assert len(ledger._sessions) <= 3
            return results
        finally:
            await ledger.close()

    assert asyncio.run(scenario()) == [1] * 12


def test_stop_and_fork_refuse_a_damaged_file_with_data_loss(data_dir) -> None:
    """No checkpoint is written over a damaged line, and no fork copies one: DATA_LOSS names the line."""

    async def scenario() -> None:
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        try:
            sid, _ = await ledger.create_session(SessionSpec())
            await ledger.append(sid, [append_payloads(msg("user", "a"), 0)])
            path = ledger.root.locate(sid)[1]
            with path.open("ab") as handle:
                handle.write(b"garbage\n")
            await ledger.append(sid, [append_payloads(msg("user", "b"), 0)])
            before = path.read_bytes()
            with pytest.raises(CorruptSessionError, match="line 3"):
                await ledger.stop(sid, StopKind.PAUSED, "p")
            with pytest.raises(CorruptSessionError, match="line 3"):
                await ledger.fork(sid, 2, None)
            assert path.read_bytes() == before
        finally:
            await ledger.close()

    asyncio.run(scenario())


def test_fork_right_after_a_reasoning_record_is_refused(writer) -> None:
    """A fork point that keeps a reasoning but cuts its answer is FAILED_PRECONDITION."""
    sid = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    answer = records_pb2.ChatMessage(
        role="assistant", text="A", reasoning=records_pb2.Reasoning(content="why A")
    )
    append(writer, sid, msg("user", "q"), writer_pb2.AppendRecord(message=answer))
    error = rpc_error(writer.Fork, writer_pb2.ForkRequest(session_id=sid, at_seq=2))
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "reasoning" in error.details()
    assert writer.Fork(writer_pb2.ForkRequest(session_id=sid, at_seq=3)).forked_at_seq == 3


def test_outputs_follow_the_compacted_view(writer, reader) -> None:
    """After a compaction, an output may answer a call kept in the replacement history, not one it dropped."""
    sid = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    append(writer, sid, call("dropped"), msg("tool", "done", tool_call_id="dropped"))
    compacted = records_pb2.Compacted(summary="s")
    kept = compacted.replacement_history.messages.add(
        role="assistant", reasoning=records_pb2.Reasoning(content="r")
    )
    kept.tool_calls.add(
        id="kept", type="function", function=records_pb2.FunctionCall(name="f", arguments="{}")
    )
    append(writer, sid, writer_pb2.AppendRecord(compacted=compacted))
    error = rpc_error(append, writer, sid, msg("tool", "late", tool_call_id="dropped"))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    append(writer, sid, msg("tool", "answer", tool_call_id="kept"))
    replay = reader.GetReplay(reader_pb2.ReplayRequest(session_id=sid))
    assert [m.role for m in replay.messages] == ["assistant", "tool"]
    assert replay.messages[0].reasoning.content == "r", "reasoning in a replacement history is kept"
    assert not [d for d in replay.degraded if d.kind == "orphan_tool_output"]


def test_replacement_history_is_validated_like_appended_messages() -> None:
    """A bad role or an orphan output inside a replacement history refuses the request, naming the entry."""
    from writer_service.open_session import CallView, OpenSession
    from writer_service.session_index import IndexEntry

    compacted = records_pb2.Compacted(summary="s")
    compacted.replacement_history.messages.add(role="tool", tool_call_id="nobody", text="x")
    payloads = append_payloads(writer_pb2.AppendRecord(compacted=compacted), 0)
    state = OpenSession("s", IndexEntry("n", 1, None), Path("n"), SimpleNamespace(), set(), {})
    with pytest.raises(RecordValidationError) as caught:
        state.encode([payloads], WriterConfig(data_dir=".").max_record_bytes)
    assert caught.value.field == "compacted.replacement_history[0].tool_call_id"
    assert "nobody" not in CallView(set())


def test_undeclared_stop_kind_and_oversized_fields_are_invalid_argument(writer) -> None:
    """stop_kind 99, a 20 KiB reason, a 129-byte delegation id and a 5000-char cwd are INVALID_ARGUMENT."""
    sid = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    cases = [
        (writer.Stop, writer_pb2.StopRequest(session_id=sid, stop_kind=99)),
        (
            writer.Stop,
            writer_pb2.StopRequest(
                session_id=sid, stop_kind=records_pb2.STOP_KIND_PAUSED, reason="r" * 20_000
            ),
        ),
        (
            writer.CreateSession,
            writer_pb2.CreateSessionRequest(parent_session_id=sid, delegation_id="é" * 65),
        ),
        (writer.CreateSession, writer_pb2.CreateSessionRequest(cwd="c" * 5000)),
        (writer.CreateSession, writer_pb2.CreateSessionRequest(created_at="0001-01-01T00:00:00+01:00")),
    ]
    for function, request in cases:
        error = rpc_error(function, request)
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (request, error.details())


def test_long_client_input_is_clipped_in_error_messages(writer) -> None:
    """A 10 KB session id is refused with INVALID_ARGUMENT and a short message, not a broken stream."""
    error = rpc_error(
        writer.Append, writer_pb2.AppendRequest(session_id="x" * 10_000, records=[msg("user", "a")])
    )
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert len(error.details()) < 400


def test_appends_during_a_stop_are_aborted_for_retry(data_dir, monkeypatch) -> None:
    """While a Stop drains and rebuilds, an Append gets SessionBusyError (ABORTED), naming the Stop."""
    from shared.errors import SessionBusyError

    async def scenario() -> None:
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        try:
            sid, _ = await ledger.create_session(SessionSpec())
            stop = asyncio.ensure_future(ledger.stop(sid, StopKind.PAUSED, "p"))
            await asyncio.sleep(0)
            with pytest.raises(SessionBusyError, match="a Stop of this session is in progress"):
                await ledger.append(sid, [append_payloads(msg("user", "late"), 0)])
            await stop
        finally:
            await ledger.close()

    asyncio.run(scenario())


def test_resume_is_default_deny_unless_forced(writer, reader) -> None:
    """A completed session refuses Resume with its reason; force re-opens it and records that."""
    sid = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    writer.Stop(writer_pb2.StopRequest(session_id=sid, stop_kind=records_pb2.STOP_KIND_COMPLETED))
    error = rpc_error(writer.Resume, writer_pb2.ResumeRequest(session_id=sid))
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "completed" in error.details()
    assert "force" in error.details()
    assert (
        writer.Resume(writer_pb2.ResumeRequest(session_id=sid, force=True)).previous_stop_kind == "completed"
    )
    assert append(writer, sid, msg("user", "continued")).seqs


def test_a_fork_of_a_child_is_found_from_the_parent(writer, reader) -> None:
    """Forking a child session writes its delegation marker: the parent lists the fork too."""
    parent = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    append(writer, parent, call("call_1"))
    child = writer.CreateSession(
        writer_pb2.CreateSessionRequest(agent_name="coder", parent_session_id=parent, delegation_id="call_1")
    ).session_id
    append(writer, child, msg("user", "task"))
    fork = writer.Fork(writer_pb2.ForkRequest(session_id=child, at_seq=1)).session_id
    found = reader.FindDelegations(reader_pb2.FindDelegationsRequest(parent_session_id=parent)).delegations
    assert {d.child_session_id for d in found} == {child, fork}


def test_damaged_records_never_break_reader_calls(data_dir, reader) -> None:
    """A stop whose seq is null and a message whose tool_calls is 5: replay, stop facts and listing still answer."""
    sid = "01900000-0000-7000-8000-00000000000a"
    body = encode_line(0, TS, "session_meta", {"session_id": sid, "tenant": "t"})
    body += encode_line(1, TS, "message", {"role": "assistant", "content": "x", "tool_calls": 5})
    body += (
        orjson.dumps({"v": 1, "seq": None, "ts": TS, "type": "stop", "payload": {"stop_kind": "paused"}})
        + b"\n"
    )
    session_path(data_dir, sid, f"2026-01-01_000000_{sid}.jsonl").write_bytes(body)
    replay = reader.GetReplay(reader_pb2.ReplayRequest(session_id=sid))
    assert [m.text for m in replay.messages] == ["x"]
    reader.GetStopFacts(reader_pb2.StopFactsRequest(session_id=sid))
    listed = reader.ListSessions(reader_pb2.ListSessionsRequest()).sessions
    assert [s.session_id for s in listed] == [sid]


def test_bad_page_token_time_and_parent_filter_are_invalid_argument(reader) -> None:
    """A token without a time zone, a malformed parent id and an overflowing time are INVALID_ARGUMENT."""
    import base64

    token = base64.urlsafe_b64encode(orjson.dumps({"t": "2026-01-01T00:00:00", "id": "x"})).decode()
    for request in (
        reader_pb2.ListSessionsRequest(page_token=token),
        reader_pb2.ListSessionsRequest(parent_session_id="../x"),
        reader_pb2.ListSessionsRequest(created_after="9999-12-31T23:59:59-01:00"),
    ):
        assert rpc_error(reader.ListSessions, request).code() == grpc.StatusCode.INVALID_ARGUMENT


def test_a_port_in_use_is_refused_not_shared(data_dir, reader_process) -> None:
    """A second reader on a bound port exits with a clear message instead of sharing the port."""
    result = run_rollout("serve-reader", "--data-dir", str(data_dir), "--address", reader_process.address)
    assert result.returncode == 1
    assert "is the port in use? Choose another address (--address" in result.stderr
    assert "set GRPC_VERBOSITY" not in result.stderr


def test_import_refuses_a_file_that_is_not_a_codex_rollout(writer_process, tmp_path) -> None:
    """Importing a non-Codex file creates no session and exits 1 with a reason."""
    stray = tmp_path / "notes.jsonl"
    stray.write_text("hello\nworld\n")
    result = run_rollout("import", "codex", "--writer", writer_process.address, str(stray))
    assert result.returncode == 1
    assert "not a Codex rollout" in result.stderr


def test_cli_reports_an_unreachable_service_in_plain_words(tmp_path) -> None:
    """A client command pointed at nothing says which service it could not reach and how to point it."""
    result = run_rollout("ls", "--reader", "127.0.0.1:1")
    assert result.returncode == 1
    assert "cannot reach the reader at 127.0.0.1:1" in result.stderr


def test_not_found_after_a_session_file_disappears(data_dir) -> None:
    """A session whose file vanished is NOT_FOUND, not an I/O error."""

    async def scenario() -> None:
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        try:
            sid, _ = await ledger.create_session(SessionSpec())
            path = ledger.root.locate(sid)[1]
            ledger.cache.forget(sid)
            path.unlink()
            with pytest.raises(SessionNotFoundError):
                await ledger.append(sid, [append_payloads(msg("user", "x"), 0)])
        finally:
            await ledger.close()

    asyncio.run(scenario())
