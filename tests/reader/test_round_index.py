"""GetRound by round id alone and the sessions holding a round (issue 24): a fork keeps its
source's round ids before its point, and GetRound counts every session holding the round."""

from __future__ import annotations

import grpc
import pytest

from rollout.v1 import reader_pb2, records_pb2, writer_pb2
from shared.rounds import round_id


def _msg(role: str, text: str) -> writer_pb2.AppendRecord:
    return writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role=role, text=text))


def _get(reader, rid: str, session_id: str = "") -> reader_pb2.GetRoundResponse:
    return reader.GetRound(reader_pb2.GetRoundRequest(round_id=rid, session_id=session_id))


def test_a_fork_shares_the_rounds_before_its_point_and_each_is_held_by_every_session_holding_it(
    writer, reader
) -> None:
    """Source: rounds 1 and 2 (seqs 1 and 3). A fork after round 2, then a round of its own; a fork
    of the fork after round 1. Looked up by id alone with nothing read before (the reader's
    index finds it), each round says how many sessions hold it, and is read from the session
    that wrote its trigger; with a session named, from that one, with the same count."""
    source = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    writer.Append(
        writer_pb2.AppendRequest(
            session_id=source,
            records=[
                _msg("user", "one"),
                _msg("assistant", "1"),
                _msg("user", "two"),
                _msg("assistant", "2"),
            ],
        )
    )
    fork = writer.Fork(writer_pb2.ForkRequest(session_id=source, at_seq=4)).session_id
    writer.Append(writer_pb2.AppendRequest(session_id=fork, records=[_msg("user", "three")]))
    fork_of_fork = writer.Fork(writer_pb2.ForkRequest(session_id=fork, at_seq=2)).session_id
    first, second = round_id(source, 1), round_id(source, 3)

    found = _get(reader, first)
    assert (found.held_by, found.session_id, found.round.question) == (3, source, "one")
    assert [record.seq for record in found.records] == [1, 2]
    assert (_get(reader, second).held_by, _get(reader, second).session_id) == (2, source)
    own = reader.ListRounds(reader_pb2.ListRoundsRequest(session_id=fork)).rounds
    assert [r.round_id for r in own[:2]] == [first, second]
    third = _get(reader, own[2].round_id)
    assert (third.held_by, third.session_id, third.round.question) == (1, fork, "three")
    from_fork = _get(reader, first, session_id=fork_of_fork)
    assert (from_fork.held_by, from_fork.session_id, from_fork.round.question) == (3, fork_of_fork, "one")
    assert [
        r.round_id for r in reader.ListRounds(reader_pb2.ListRoundsRequest(session_id=fork_of_fork)).rounds
    ] == [first]


def test_a_round_id_no_session_holds_is_not_found(writer, reader) -> None:
    sid = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    writer.Append(writer_pb2.AppendRequest(session_id=sid, records=[_msg("user", "one")]))
    with pytest.raises(grpc.RpcError) as caught:
        _get(reader, round_id(sid, 2))
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    assert "in any session the caller sees" in caught.value.details()
    with pytest.raises(grpc.RpcError) as caught:
        _get(reader, round_id(sid, 2), session_id=sid)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


def test_a_round_stays_held_by_the_forks_of_deleted_forks(writer, reader) -> None:
    """Source, two forks in a chain and a last fork, all copying round 1. With both middle forks
    deleted, the round is held by the source and the last fork (the deletion records carry the
    chain); with the source deleted too, it is found by id alone in the last fork alone. A round
    a deleted middle fork wrote is held by the last fork alone."""
    source = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    writer.Append(
        writer_pb2.AppendRequest(session_id=source, records=[_msg("user", "one"), _msg("assistant", "1")])
    )
    first = writer.Fork(writer_pb2.ForkRequest(session_id=source, at_seq=2)).session_id
    writer.Append(
        writer_pb2.AppendRequest(session_id=first, records=[_msg("user", "mid"), _msg("assistant", "m")])
    )
    second = writer.Fork(writer_pb2.ForkRequest(session_id=first, at_seq=5)).session_id
    last = writer.Fork(writer_pb2.ForkRequest(session_id=second, at_seq=5)).session_id
    rid = round_id(source, 1)
    assert _get(reader, rid).held_by == 4
    for session_id in (first, second):
        writer.DeleteSession(writer_pb2.DeleteSessionRequest(session_id=session_id))
    found = _get(reader, rid)
    assert (found.held_by, found.session_id) == (2, source)
    assert _get(reader, rid, session_id=last).held_by == 2
    mid = _get(reader, round_id(first, 4), session_id=last)
    assert (mid.held_by, mid.round.question) == (1, "mid")
    writer.DeleteSession(writer_pb2.DeleteSessionRequest(session_id=source))
    alone = _get(reader, rid)
    assert (alone.held_by, alone.session_id, alone.round.question) == (1, last, "one")


def test_a_round_a_fork_copied_reads_as_in_its_source(writer, reader) -> None:
    """A complete round, then a fork after it and a resume of the source: the fork's copy and the
    source's round have one range and one set of metrics (the fork's own forked event and the
    source's resumed event are no work of the round: they end it no later)."""
    source = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    writer.Append(
        writer_pb2.AppendRequest(session_id=source, records=[_msg("user", "one"), _msg("assistant", "1")])
    )
    fork = writer.Fork(writer_pb2.ForkRequest(session_id=source, at_seq=2)).session_id
    writer.Stop(
        writer_pb2.StopRequest(session_id=source, stop_kind=records_pb2.STOP_KIND_PAUSED, reason="later")
    )
    writer.Resume(writer_pb2.ResumeRequest(session_id=source))

    def first(session_id: str) -> reader_pb2.Round:
        return reader.ListRounds(reader_pb2.ListRoundsRequest(session_id=session_id)).rounds[0]

    copied, original = first(fork), first(source)
    assert copied.round_id == original.round_id
    assert (copied.end_seq, copied.ended_at, copied.duration_s, copied.message_count) == (
        original.end_seq,
        original.ended_at,
        original.duration_s,
        original.message_count,
    )
    assert original.end_seq == 2
