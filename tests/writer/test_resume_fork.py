"""Resume and fork: same identity vs new identity, nothing rewritten (docs/spec.md §2.8)."""

from __future__ import annotations

import hashlib

import grpc
import orjson
import pytest

from rollout.v1 import reader_pb2, records_pb2, writer_pb2
from shared.rounds import round_id
from tests.data_roots import session_file

PAUSED = records_pb2.STOP_KIND_PAUSED


def msg(role: str, text: str, **fields) -> writer_pb2.AppendRecord:
    return writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role=role, text=text, **fields))


def call(call_id: str, name: str = "shell") -> writer_pb2.AppendRecord:
    message = records_pb2.ChatMessage(role="assistant")
    message.tool_calls.add(
        id=call_id, type="function", function=records_pb2.FunctionCall(name=name, arguments="{}")
    )
    return writer_pb2.AppendRecord(message=message)


def append(writer, session_id: str, *records) -> writer_pb2.AppendResponse:
    return writer.Append(writer_pb2.AppendRequest(session_id=session_id, records=list(records)))


def file_of(data_dir, session_id: str):
    path = session_file(data_dir, session_id)
    return path


def lines_of(data_dir, session_id: str) -> list[dict]:
    return [orjson.loads(line) for line in file_of(data_dir, session_id).read_bytes().splitlines()]


@pytest.fixture
def paused_with_dangling_call(writer):
    """A paused session whose last assistant call never got an output."""
    sid = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    append(
        writer,
        sid,
        msg("user", "list files"),
        call("call_a"),
        msg("tool", "a.txt", tool_call_id="call_a"),
        call("call_b"),
    )
    writer.Stop(writer_pb2.StopRequest(session_id=sid, stop_kind=PAUSED, reason="pause"))
    return sid


def test_resume_closes_a_dangling_call_with_exactly_one_synthetic_output(
    writer, reader, data_dir, paused_with_dangling_call
) -> None:
    """Resume appends one synthetic output per unanswered call; a second Resume adds none."""
    sid = paused_with_dangling_call
    before = file_of(data_dir, sid).read_bytes()
    first = writer.Resume(writer_pb2.ResumeRequest(session_id=sid))
    assert list(first.closed_call_ids) == ["call_b"]
    assert first.previous_stop_kind == "paused"
    second = writer.Resume(writer_pb2.ResumeRequest(session_id=sid))
    assert list(second.closed_call_ids) == []
    after = file_of(data_dir, sid).read_bytes()
    assert after.startswith(before), "nothing already written is rewritten"
    synthetic = [r for r in lines_of(data_dir, sid) if r["payload"].get("synthetic")]
    assert len(synthetic) == 1
    assert synthetic[0]["payload"]["content"] == "Error: interrupted before the tool returned"
    replay = reader.GetReplay(reader_pb2.ReplayRequest(session_id=sid))
    assert replay.messages[-1].synthetic
    assert replay.messages[-1].tool_call_id == "call_b"


def test_real_output_after_resume_supersedes_the_synthetic_one_in_place(
    writer, reader, paused_with_dangling_call
) -> None:
    """A real output arriving after Resume replaces the synthetic one at its position."""
    sid = paused_with_dangling_call
    writer.Resume(writer_pb2.ResumeRequest(session_id=sid))
    append(writer, sid, msg("tool", "b.txt", tool_call_id="call_b"), msg("assistant", "done"))
    replay = reader.GetReplay(reader_pb2.ReplayRequest(session_id=sid))
    texts = [(m.role, m.text) for m in replay.messages]
    assert texts[-2:] == [("tool", "b.txt"), ("assistant", "done")]
    assert not replay.messages[-2].synthetic
    assert replay.superseded_outputs == 1


def test_appending_to_a_stopped_session_asks_for_resume(writer, paused_with_dangling_call) -> None:
    """A stopped session refuses appends until Resume, then accepts them on the same file."""
    sid = paused_with_dangling_call
    with pytest.raises(grpc.RpcError) as caught:
        append(writer, sid, msg("user", "again"))
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "session is stopped (paused); call Resume" in caught.value.details()
    writer.Resume(writer_pb2.ResumeRequest(session_id=sid))
    assert append(writer, sid, msg("user", "again")).seqs


def test_appending_to_a_completed_session_says_resume_needs_force_or_a_fork(writer) -> None:
    """A stop kind that may not be replayed as-is: the refusal names force and Fork, not a plain Resume."""
    sid = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    append(writer, sid, msg("user", "hi"), msg("assistant", "done"))
    writer.Stop(writer_pb2.StopRequest(session_id=sid, stop_kind=records_pb2.STOP_KIND_COMPLETED))
    with pytest.raises(grpc.RpcError) as caught:
        append(writer, sid, msg("user", "again"))
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "session is stopped (completed)" in caught.value.details()
    assert "Resume it with force, or Fork it" in caught.value.details()


def test_appending_to_a_paused_child_without_coordinates_says_what_resume_will_say(writer) -> None:
    """The refusal judges the session as Resume does: a paused child without delegation coordinates
    may not be replayed as-is, so the message does not promise a plain Resume."""
    sid = writer.CreateSession(
        writer_pb2.CreateSessionRequest(
            agent_name="sub", role=writer_pb2.SESSION_ROLE_CHILD_WITHOUT_COORDINATES
        )
    ).session_id
    writer.Stop(writer_pb2.StopRequest(session_id=sid, stop_kind=PAUSED))
    with pytest.raises(grpc.RpcError) as caught:
        append(writer, sid, msg("user", "again"))
    assert "no delegation coordinates" in caught.value.details()
    assert "call Resume to continue it" not in caught.value.details()


def test_three_stops_give_three_checkpoints_and_the_last_one_verifies(writer, reader, data_dir) -> None:
    """stop, resume, stop, resume, stop leaves three checkpoints; replay verifies against the last."""
    sid = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    for round_ in range(3):
        if round_:
            writer.Resume(writer_pb2.ResumeRequest(session_id=sid))
        append(writer, sid, msg("user", f"q{round_}"), msg("assistant", f"a{round_}"))
        writer.Stop(writer_pb2.StopRequest(session_id=sid, stop_kind=PAUSED, reason=f"pause {round_}"))
    checkpoints = [r for r in lines_of(data_dir, sid) if r["type"] == "agent_checkpoint"]
    assert [c["payload"]["message_count"] for c in checkpoints] == [2, 4, 6]
    replay = reader.GetReplay(reader_pb2.ReplayRequest(session_id=sid))
    assert replay.digest_status == reader_pb2.DIGEST_STATUS_VERIFIED
    assert replay.last_checkpoint.seq == checkpoints[-1]["seq"]
    facts = reader.GetStopFacts(reader_pb2.StopFactsRequest(session_id=sid))
    assert facts.checkpoint.seq == checkpoints[-1]["seq"]
    assert facts.reason == "pause 2"


def test_fork_keeps_timestamps_excludes_later_records_and_leaves_the_source_untouched(
    writer, reader, data_dir
) -> None:
    """A fork copies the source's records up to the point byte for byte; the source's bytes never change."""
    sid = writer.CreateSession(
        writer_pb2.CreateSessionRequest(agent_name="planner", role=writer_pb2.SESSION_ROLE_ROOT)
    ).session_id
    append(writer, sid, msg("system", "be brief"), msg("user", "first"), msg("assistant", "one"))
    append(writer, sid, msg("user", "second"), msg("assistant", "two"))
    source_hash = hashlib.sha256(file_of(data_dir, sid).read_bytes()).hexdigest()
    fork = writer.Fork(writer_pb2.ForkRequest(session_id=sid, before_user_message=2))
    assert fork.forked_at_seq == 3
    source_lines = lines_of(data_dir, sid)
    fork_lines = lines_of(data_dir, fork.session_id)
    assert fork_lines[0]["payload"]["forked_from"] == {"session_id": sid, "seq": 3, "digest": fork.digest}
    assert fork_lines[1:4] == source_lines[1:4], "same seqs, payloads and original timestamps"
    assert fork_lines[4]["type"] == "event"
    assert fork_lines[4]["payload"]["kind"] == "forked"
    append(writer, fork.session_id, msg("user", "what if"))
    assert hashlib.sha256(file_of(data_dir, sid).read_bytes()).hexdigest() == source_hash
    replay = reader.GetReplay(reader_pb2.ReplayRequest(session_id=fork.session_id))
    assert [m.text for m in replay.messages] == ["be brief", "first", "one", "what if"]
    assert replay.computed_digest != fork.digest  # the fork has grown since


def test_fork_of_a_fork_works(writer, reader) -> None:
    """A fork can itself be forked; each keeps its own identity and history."""
    sid = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    append(writer, sid, msg("user", "a"), msg("assistant", "b"), msg("user", "c"), msg("assistant", "d"))
    child = writer.Fork(writer_pb2.ForkRequest(session_id=sid, at_seq=4)).session_id
    append(writer, child, msg("user", "e"))
    grandchild = writer.Fork(writer_pb2.ForkRequest(session_id=child, at_seq=2)).session_id
    append(writer, grandchild, msg("user", "x"))
    texts = [m.text for m in reader.GetReplay(reader_pb2.ReplayRequest(session_id=grandchild)).messages]
    assert texts == ["a", "b", "x"]
    texts = [m.text for m in reader.GetReplay(reader_pb2.ReplayRequest(session_id=child)).messages]
    assert texts == ["a", "b", "c", "d", "e"]


def test_fork_between_a_call_and_its_output_is_refused(writer) -> None:
    """A fork point that separates a tool call from its output is FAILED_PRECONDITION naming the pair's end."""
    sid = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    append(
        writer,
        sid,
        msg("user", "go"),
        call("call_x"),
        msg("assistant", "still thinking"),
        msg("tool", "out", tool_call_id="call_x"),
    )
    with pytest.raises(grpc.RpcError) as caught:
        writer.Fork(writer_pb2.ForkRequest(session_id=sid, at_seq=3))
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "'call_x'" in caught.value.details()
    assert "seq 4" in caught.value.details()
    assert writer.Fork(writer_pb2.ForkRequest(session_id=sid, at_seq=4)).forked_at_seq == 4


def test_fork_point_outside_the_session_is_invalid(writer) -> None:
    """A fork point past the end of the session is INVALID_ARGUMENT naming the valid range."""
    sid = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    append(writer, sid, msg("user", "only"))
    with pytest.raises(grpc.RpcError) as caught:
        writer.Fork(writer_pb2.ForkRequest(session_id=sid, at_seq=9))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "0..1" in caught.value.details()


def _rounds(reader, session_id: str) -> list[reader_pb2.Round]:
    return list(reader.ListRounds(reader_pb2.ListRoundsRequest(session_id=session_id)).rounds)


def test_resume_of_a_crashed_session_records_its_pending_round_interrupted(writer, reader, data_dir) -> None:
    """Issue 24: a session with no stop record whose last round has no final answer (a crash cut
    it off) gets a round_interrupted event naming that round, before the resumed event; the
    round reads interrupted from then on, a second Resume records nothing, and the next user
    message starts a new round."""
    sid = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    append(writer, sid, msg("user", "one"), msg("assistant", "done"), msg("user", "two"), call("call_a"))
    (first, pending) = _rounds(reader, sid)
    assert (first.status, pending.status) == ("complete", "pending")
    resumed = writer.Resume(writer_pb2.ResumeRequest(session_id=sid))
    assert resumed.interrupted_round_id == pending.round_id
    kinds = [(r["type"], r["payload"].get("kind")) for r in lines_of(data_dir, sid)[-3:]]
    assert kinds == [("message", None), ("event", "round_interrupted"), ("event", "resumed")]
    assert lines_of(data_dir, sid)[-2]["payload"]["body"] == {
        "round_id": pending.round_id,
        "start_seq": pending.start_seq,
    }
    assert [r.status for r in _rounds(reader, sid)] == ["complete", "interrupted"]
    assert writer.Resume(writer_pb2.ResumeRequest(session_id=sid)).interrupted_round_id == ""
    append(writer, sid, msg("user", "three"))
    assert [r.status for r in _rounds(reader, sid)] == ["complete", "interrupted", "pending"]


def test_resume_after_a_pause_records_no_interruption(writer, reader, data_dir) -> None:
    """A round pending when its session was paused is continued by the Resume (one round, issue
    24): no round_interrupted event, and the round reads pending again."""
    sid = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    append(writer, sid, msg("user", "long task"), msg("assistant", "working on it"), call("call_a"))
    writer.Stop(writer_pb2.StopRequest(session_id=sid, stop_kind=PAUSED, reason="pause"))
    assert [r.status for r in _rounds(reader, sid)] == ["interrupted"]
    assert writer.Resume(writer_pb2.ResumeRequest(session_id=sid)).interrupted_round_id == ""
    assert "round_interrupted" not in file_of(data_dir, sid).read_text()
    assert [r.status for r in _rounds(reader, sid)] == ["pending"]


def test_the_interrupted_round_of_a_fork_of_a_fork_is_named_as_the_reader_names_it(writer, reader) -> None:
    """The round id in the interruption record follows the whole fork lineage (the round was first
    written by the oldest source), as ListRounds names it."""
    sid = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    append(writer, sid, msg("user", "a"), msg("assistant", "b"), msg("user", "c"))
    child = writer.Fork(writer_pb2.ForkRequest(session_id=sid, at_seq=3)).session_id
    grandchild = writer.Fork(writer_pb2.ForkRequest(session_id=child, at_seq=3)).session_id
    (_, source_round) = _rounds(reader, sid)
    resumed = writer.Resume(writer_pb2.ResumeRequest(session_id=grandchild))
    assert resumed.interrupted_round_id == source_round.round_id
    assert [r.round_id for r in _rounds(reader, grandchild)][-1] == source_round.round_id


@pytest.mark.parametrize("deleted", [("child",), ("child", "source")], ids=["middle", "middle-and-source"])
def test_the_interrupted_round_of_a_fork_of_a_deleted_fork_is_named_as_the_reader_names_it(
    writer, reader, deleted: tuple[str, ...]
) -> None:
    """The middle session of a lineage (and then its source too) is deleted before the last fork
    is resumed: the writer walks through the deletion records (docs/deletion.md §1.2) as the
    reader does, so the interruption record names the round by the session that first wrote its
    trigger, and GetRound finds it by that id, held by the sessions still holding it."""
    sid = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    append(writer, sid, msg("user", "a"), msg("assistant", "b"), msg("user", "c"))
    child = writer.Fork(writer_pb2.ForkRequest(session_id=sid, at_seq=3)).session_id
    grandchild = writer.Fork(writer_pb2.ForkRequest(session_id=child, at_seq=3)).session_id
    (_, source_round) = _rounds(reader, sid)
    assert source_round.round_id == round_id(sid, 3)
    names = {"child": child, "source": sid}
    for name in deleted:
        writer.DeleteSession(writer_pb2.DeleteSessionRequest(session_id=names[name]))
    resumed = writer.Resume(writer_pb2.ResumeRequest(session_id=grandchild))
    assert resumed.interrupted_round_id == source_round.round_id
    (_, last) = _rounds(reader, grandchild)
    assert (last.round_id, last.status) == (source_round.round_id, "interrupted")
    found = reader.GetRound(reader_pb2.GetRoundRequest(round_id=source_round.round_id))
    holding = 1 if "source" in deleted else 2
    assert (found.round.round_id, found.held_by) == (source_round.round_id, holding)
    assert found.session_id == (grandchild if "source" in deleted else sid)
    by_session = reader.GetRound(
        reader_pb2.GetRoundRequest(round_id=source_round.round_id, session_id=grandchild)
    )
    assert (by_session.round.status, by_session.held_by) == ("interrupted", holding)
