"""Every changed byte is found and nothing re-blesses damage: files edited on disk between calls.

Each test edits a session file the way a disk, a tool or a person might, keeping its
size and JSON shape (so only the checks can tell), then asks both services.
"""

from __future__ import annotations

from pathlib import Path

import grpc
import orjson
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from rollout.v1 import reader_pb2, reader_pb2_grpc, records_pb2, writer_pb2, writer_pb2_grpc
from tests.data_roots import session_file, session_files, session_path

PAUSED = records_pb2.STOP_KIND_PAUSED
UNKNOWN_PARENT = "01a22c15-89a6-7d3d-b5b7-165622bd350c"
DAMAGE = {
    "line_check_failed",
    "lines_digest_mismatch",
    "seq_gap",
    "seq_repeat",
    "resumed_over_damage",
    "checkpoint_mismatch",
}


def msg(role: str, text: str) -> writer_pb2.AppendRecord:
    return writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role=role, text=text))


def tool_event(output: str) -> writer_pb2.AppendRecord:
    event = records_pb2.Event(kind="tool_result")
    event.body.update({"output": output})
    return writer_pb2.AppendRecord(event=event)


def file_of(data_dir: Path, session_id: str) -> Path:
    path = session_file(data_dir, session_id)
    return path


def edit_in_place(path: Path, old: bytes, new: bytes) -> tuple[int, int]:
    """Replace the one occurrence of ``old`` (same length) on disk; returns (1-based line, line offset)."""
    assert len(old) == len(new)
    data = path.read_bytes()
    assert data.count(old) == 1, old
    at = data.index(old)
    path.write_bytes(data[:at] + new + data[at + len(old) :])
    line_start = data.rfind(b"\n", 0, at) + 1
    return data.count(b"\n", 0, line_start) + 1, line_start


def damage_of(entries) -> list[tuple[str, int, int]]:
    return [(entry.kind, entry.line, entry.offset) for entry in entries if entry.kind in DAMAGE]


def new_session(writer, *records: writer_pb2.AppendRecord) -> str:
    sid = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    writer.Append(writer_pb2.AppendRequest(session_id=sid, records=list(records)))
    return sid


def field_paths(error: grpc.RpcError) -> list[str]:
    """The fields a refusal's google.rpc.BadRequest detail names."""
    (detail,) = rpc_status.from_call(error).details
    bad_request = error_details_pb2.BadRequest()
    assert detail.Unpack(bad_request)
    return [violation.field for violation in bad_request.field_violations]


def refused(call) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    return caught.value


def test_a_changed_byte_in_a_never_stopped_session_fails_verification(writer, reader, data_dir) -> None:
    """Hole 1a: an open session (no checkpoint) with one changed message byte is damaged, by line and byte."""
    sid = new_session(writer, msg("user", "list the files"), msg("assistant", "a.txt b.txt"))
    line, offset = edit_in_place(file_of(data_dir, sid), b"a.txt b.txt", b"a.txt c.txt")
    report = reader.VerifySession(reader_pb2.VerifyRequest(session_id=sid))
    assert not report.ok
    assert damage_of(report.degraded) == [("line_check_failed", line, offset)]
    assert any(f"line_check_failed at line {line} (byte {offset})" in finding for finding in report.findings)
    replay = reader.GetReplay(reader_pb2.ReplayRequest(session_id=sid))
    assert damage_of(replay.degraded) == [("line_check_failed", line, offset)]


def test_a_changed_event_body_in_a_stopped_session_is_found(writer, reader, data_dir) -> None:
    """Hole 1b: an event (outside the message digest) changed under a checkpoint: not verified, not OK."""
    sid = new_session(writer, msg("user", "run it"), tool_event("exit 0"))
    writer.Stop(writer_pb2.StopRequest(session_id=sid, stop_kind=PAUSED, reason="p"))
    line, offset = edit_in_place(file_of(data_dir, sid), b"exit 0", b"exit 1")
    report = reader.VerifySession(reader_pb2.VerifyRequest(session_id=sid))
    assert not report.ok
    assert damage_of(report.degraded) == [("line_check_failed", line, offset)]
    replay = reader.GetReplay(reader_pb2.ReplayRequest(session_id=sid))
    assert replay.digest_status == reader_pb2.DIGEST_STATUS_MISMATCH
    assert replay.last_checkpoint.lines_digest.startswith("sha256:lines:v1:")


def test_resume_refuses_a_changed_message_and_force_never_reblesses_it(writer, reader, data_dir) -> None:
    """Hole 1c: Resume refuses a changed message (DATA_LOSS, line and byte); a forced Resume is recorded,
    and after a later Stop the damage still fails verification."""
    sid = new_session(writer, msg("user", "deploy to staging"), msg("assistant", "deployed"))
    writer.Stop(writer_pb2.StopRequest(session_id=sid, stop_kind=PAUSED, reason="p"))
    path = file_of(data_dir, sid)
    line, offset = edit_in_place(path, b"staging", b"prodxyz")
    before = path.read_bytes()

    error = refused(lambda: writer.Resume(writer_pb2.ResumeRequest(session_id=sid)))
    assert error.code() == grpc.StatusCode.DATA_LOSS
    assert f"line {line} (byte {offset})" in error.details()
    assert "force" in error.details()
    assert path.read_bytes() == before, "a refused Resume writes nothing"

    writer.Resume(writer_pb2.ResumeRequest(session_id=sid, force=True))
    resumed = orjson.loads(path.read_bytes().splitlines()[-1])
    assert resumed["payload"]["kind"] == "resumed"
    assert resumed["payload"]["body"]["forced"] is True
    assert resumed["payload"]["body"]["damage"][0]["kind"] == "line_check_failed"
    assert resumed["payload"]["body"]["damage"][0]["offset"] == offset

    writer.Append(writer_pb2.AppendRequest(session_id=sid, records=[msg("user", "and now?")]))
    writer.Stop(writer_pb2.StopRequest(session_id=sid, stop_kind=PAUSED, reason="again"))
    report = reader.VerifySession(reader_pb2.VerifyRequest(session_id=sid))
    assert not report.ok
    found = damage_of(report.degraded)
    assert ("line_check_failed", line, offset) in found
    assert any(kind == "resumed_over_damage" for kind, _, _ in found)
    replay = reader.GetReplay(reader_pb2.ReplayRequest(session_id=sid))
    assert replay.digest_status == reader_pb2.DIGEST_STATUS_MISMATCH, (
        "a later checkpoint never verifies damage"
    )

    # The damage was accepted once, by an operator: the session continues without force.
    writer.Resume(writer_pb2.ResumeRequest(session_id=sid))
    writer.Stop(writer_pb2.StopRequest(session_id=sid, stop_kind=PAUSED, reason="third"))
    assert not reader.VerifySession(reader_pb2.VerifyRequest(session_id=sid)).ok


def test_resume_refuses_a_seq_gap_as_stop_does(writer, data_dir) -> None:
    """Hole 1d: a file with a seq gap (a line removed) is refused by Resume and Stop alike, writing nothing."""
    sid = new_session(writer, msg("user", "one"), msg("assistant", "two"), msg("user", "three"))
    writer.Stop(writer_pb2.StopRequest(session_id=sid, stop_kind=PAUSED, reason="p"))
    path = file_of(data_dir, sid)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:2] + lines[3:]))
    before = path.read_bytes()
    error = refused(lambda: writer.Resume(writer_pb2.ResumeRequest(session_id=sid)))
    assert error.code() == grpc.StatusCode.DATA_LOSS
    assert f"line 3 (byte {len(lines[0] + lines[1])}): seq_gap" in error.details()
    assert path.read_bytes() == before


def test_stop_refuses_a_changed_line_of_an_open_session(writer, data_dir) -> None:
    """Stop never writes a checkpoint over a line whose check fails (DATA_LOSS naming it)."""
    sid = new_session(writer, msg("user", "hello"), msg("assistant", "world"))
    line, offset = edit_in_place(file_of(data_dir, sid), b"world", b"WORLD")
    error = refused(lambda: writer.Stop(writer_pb2.StopRequest(session_id=sid, stop_kind=PAUSED, reason="p")))
    assert error.code() == grpc.StatusCode.DATA_LOSS
    assert f"line {line} (byte {offset}): line_check_failed" in error.details()


def test_stop_facts_report_a_changed_stop_record_and_deny_resume(writer, reader, data_dir) -> None:
    """Stop facts read from a tail whose stop record changed say so (offset) and never offer resume."""
    sid = new_session(writer, msg("user", "hi"))
    writer.Stop(writer_pb2.StopRequest(session_id=sid, stop_kind=PAUSED, reason="lunch break"))
    path = file_of(data_dir, sid)
    _, offset = edit_in_place(path, b"lunch break", b"lunch BREAK")
    facts = reader.GetStopFacts(reader_pb2.StopFactsRequest(session_id=sid))
    assert [(entry.kind, entry.offset) for entry in facts.damage] == [("line_check_failed", offset)]
    assert not facts.resume.replayable
    assert "damaged" in facts.resume.reason


@pytest.mark.parametrize("kind", ["resumed", "forked", "round_interrupted"])
def test_clients_cannot_forge_the_writers_own_events(writer, data_dir, kind) -> None:
    """Hole 5: an Append or an import naming an event kind the writer reserves is INVALID_ARGUMENT
    (field records[i].event.kind); importers' own kinds (codex.*, claude.*) stay allowed."""
    sid = new_session(writer, msg("user", "hi"))
    before = file_of(data_dir, sid).read_bytes()
    forged = writer_pb2.AppendRecord(event=records_pb2.Event(kind=kind))
    forged.event.body.update({"forced": True, "damage": [{"kind": "seq_gap"}]})
    error = refused(
        lambda: writer.Append(writer_pb2.AppendRequest(session_id=sid, records=[msg("user", "a"), forged]))
    )
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "reserved" in error.details()
    assert field_paths(error) == ["records[1].event.kind"]
    assert file_of(data_dir, sid).read_bytes() == before

    imported = iter(
        [
            writer_pb2.ImportSessionsRequest(
                create=writer_pb2.CreateSessionRequest(session_id="01a22c15-89a6-7d3d-b5b7-165622bd350c")
            ),
            writer_pb2.ImportSessionsRequest(records=writer_pb2.ImportRecords(records=[forged])),
            writer_pb2.ImportSessionsRequest(stop=writer_pb2.StopRequest(stop_kind=PAUSED)),
        ]
    )
    error = refused(lambda: writer.ImportSessions(imported))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field_paths(error) == ["sessions[0].records[0].event.kind"]
    allowed = writer_pb2.AppendRecord(event=records_pb2.Event(kind="codex.resumed"))
    writer.Append(writer_pb2.AppendRequest(session_id=sid, records=[allowed]))


def test_an_unknown_parent_is_refused_and_no_delegation_folder_is_made(writer, data_dir) -> None:
    """Hole 6: CreateSession or an import naming a parent that is not in the ledger is INVALID_ARGUMENT
    (field parent_session_id) and creates nothing: no session, no delegation folder for the parent."""
    child = writer_pb2.CreateSessionRequest(
        parent_session_id=UNKNOWN_PARENT, delegation_id="call_1", role=writer_pb2.SESSION_ROLE_CHILD
    )
    error = refused(lambda: writer.CreateSession(child))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field_paths(error) == ["parent_session_id"]

    imported_child = writer_pb2.CreateSessionRequest(
        session_id="01a22c15-89a6-7d3d-b5b7-165622bd3500",
        parent_session_id=UNKNOWN_PARENT,
        delegation_id="call_1",
        role=writer_pb2.SESSION_ROLE_CHILD,
    )
    stream = iter(
        [
            writer_pb2.ImportSessionsRequest(create=imported_child),
            writer_pb2.ImportSessionsRequest(stop=writer_pb2.StopRequest(stop_kind=PAUSED)),
        ]
    )
    error = refused(lambda: writer.ImportSessions(stream))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field_paths(error) == ["sessions[0].parent_session_id"]
    assert list(data_dir.glob("shards/*/delegations/*")) == []
    assert list(session_files(data_dir)) == []


def test_checkpoints_a_fork_copies_keep_verifying_in_forks_of_forks(writer, reader) -> None:
    """A fork copies its source's checkpoints byte for byte under its own session_meta: they still verify
    there (the lines digest leaves the session_meta out), in a fork of the fork too."""
    sid = new_session(writer, msg("user", "one"), msg("assistant", "two"))
    writer.Stop(writer_pb2.StopRequest(session_id=sid, stop_kind=PAUSED, reason="p"))
    writer.Resume(writer_pb2.ResumeRequest(session_id=sid))
    writer.Append(writer_pb2.AppendRequest(session_id=sid, records=[msg("user", "three")]))
    writer.Stop(writer_pb2.StopRequest(session_id=sid, stop_kind=PAUSED, reason="p"))
    last = writer.Resume(writer_pb2.ResumeRequest(session_id=sid)).next_seq - 1
    fork = writer.Fork(writer_pb2.ForkRequest(session_id=sid, at_seq=last)).session_id
    writer.Append(writer_pb2.AppendRequest(session_id=fork, records=[msg("user", "four")]))
    writer.Stop(writer_pb2.StopRequest(session_id=fork, stop_kind=PAUSED, reason="p"))
    fork_of_fork = writer.Fork(writer_pb2.ForkRequest(session_id=fork, at_seq=last + 3)).session_id
    for session_id in (fork, fork_of_fork):
        report = reader.VerifySession(reader_pb2.VerifyRequest(session_id=session_id))
        assert report.ok, report.findings
        assert damage_of(report.degraded) == []


def test_an_older_file_whose_message_changed_under_its_checkpoint_is_refused_and_never_reblessed(
    data_dir, tmp_path
) -> None:
    """Hole 1c for files written before line checks: the older checkpoint's message digest finds the
    change, Resume refuses it (DATA_LOSS, checkpoint_mismatch), and after a forced Resume and a Stop the
    file still fails verification."""
    from datetime import UTC, datetime

    from shared.digest import digest
    from shared.naming import build_file_name
    from tests.conftest import start_service

    sid = "01a22c15-89a6-7d3d-b5b7-165622bd3511"
    ts = "2026-11-30T10:00:00.000000Z"
    messages = [{"role": "user", "content": "deploy to staging"}, {"role": "assistant", "content": "done"}]
    records = [
        ("session_meta", {"session_id": sid, "tenant": "t", "created_at": ts}),
        *(("message", message) for message in messages),
        (
            "agent_checkpoint",
            {"digest": digest(messages), "message_count": 2, "covers_seq": 2, "stop_kind": "paused"},
        ),
        ("stop", {"stop_kind": "paused", "reason": "p", "checkpoint_seq": 3}),
    ]
    older = b"".join(
        orjson.dumps({"v": 1, "seq": seq, "ts": ts, "type": kind, "payload": payload}) + b"\n"
        for seq, (kind, payload) in enumerate(records)
    )
    path = session_path(data_dir, sid, build_file_name(datetime(2026, 11, 30, tzinfo=UTC), sid))
    path.write_bytes(older.replace(b"staging", b"prodxyz"))
    writer_process = start_service("writer", data_dir)
    reader_process = start_service("reader", data_dir)
    try:
        with (
            grpc.insecure_channel(writer_process.address) as w,
            grpc.insecure_channel(reader_process.address) as r,
        ):
            writer, reader = writer_pb2_grpc.RolloutWriterStub(w), reader_pb2_grpc.RolloutReaderStub(r)
            error = refused(lambda: writer.Resume(writer_pb2.ResumeRequest(session_id=sid)))
            assert error.code() == grpc.StatusCode.DATA_LOSS
            assert "line 4" in error.details()
            assert "checkpoint_mismatch" in error.details()
            writer.Resume(writer_pb2.ResumeRequest(session_id=sid, force=True))
            writer.Stop(writer_pb2.StopRequest(session_id=sid, stop_kind=PAUSED, reason="again"))
            report = reader.VerifySession(reader_pb2.VerifyRequest(session_id=sid))
            assert not report.ok
            assert [kind for kind, _, _ in damage_of(report.degraded)] == ["resumed_over_damage"]
            assert report.digest_status == reader_pb2.DIGEST_STATUS_MISMATCH
    finally:
        writer_process.stop()
        reader_process.stop()
