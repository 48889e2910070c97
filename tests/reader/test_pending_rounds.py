"""ListPendingRounds (issue 24): the rounds a crash left pending, newest first by last append,
bounded by ``since`` and ``limit``, with precise refusals of bad arguments."""

from __future__ import annotations

import os

import grpc
import pytest

from rollout.v1 import reader_pb2, records_pb2, writer_pb2
from tests.data_roots import session_file

#: Modification times given to the session files (seconds since the epoch): long idle, in order.
HOUR = 3600
BASE = 1_790_000_000


def _msg(role: str, text: str) -> writer_pb2.AppendRecord:
    return writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role=role, text=text))


def _session(writer, *records: writer_pb2.AppendRecord) -> str:
    sid = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    writer.Append(writer_pb2.AppendRequest(session_id=sid, records=list(records)))
    return str(sid)


def _last_appended(data_dir, sid: str, seconds: int) -> None:
    os.utime(session_file(data_dir, sid), (seconds, seconds))


def _listed(reader, **fields) -> list[str]:
    reply = reader.ListPendingRounds(reader_pb2.ListPendingRoundsRequest(**fields))
    return [pending.session_id for pending in reply.rounds]


def test_pending_rounds_are_listed_newest_first_within_since_and_limit(writer, reader, data_dir) -> None:
    """Three sessions left mid-round at BASE, +1 h, +2 h; one answered and one stopped, both older:
    newest first, ``limit`` keeps the newest, ``since`` drops what was last appended before it, and
    each entry carries its round and when it was last appended to."""
    oldest = _session(writer, _msg("user", "one"))
    middle = _session(writer, _msg("user", "two"), _msg("assistant", "thinking"), _msg("user", "more"))
    newest = _session(writer, _msg("user", "three"))
    answered = _session(writer, _msg("user", "four"), _msg("assistant", "done"))
    stopped = _session(writer, _msg("user", "five"))
    writer.Stop(
        writer_pb2.StopRequest(session_id=stopped, stop_kind=records_pb2.STOP_KIND_PAUSED, reason="pause")
    )
    for sid, seconds in ((oldest, BASE), (middle, BASE + HOUR), (newest, BASE + 2 * HOUR)):
        _last_appended(data_dir, sid, seconds)
    for sid in (answered, stopped):
        _last_appended(data_dir, sid, BASE - HOUR)

    assert _listed(reader) == [newest, middle, oldest]
    assert _listed(reader, limit=2) == [newest, middle]
    assert _listed(reader, since="2026-09-21T14:30:00Z") == [newest, middle]  # BASE is 14:13:20Z
    reply = reader.ListPendingRounds(reader_pb2.ListPendingRoundsRequest(limit=1))
    (first,) = reply.rounds
    assert (first.round.status, first.round.question) == ("pending", "three")
    assert first.last_append_at == "2026-09-21T16:13:20.000000Z"
    middle_round = reader.ListPendingRounds(reader_pb2.ListPendingRoundsRequest()).rounds[1].round
    assert (middle_round.number, middle_round.question) == (2, "more")  # "two" was answered


def test_a_session_appended_to_within_the_idle_time_is_not_listed(writer, reader, data_dir) -> None:
    """An open session written to a moment ago is not left by a crash: not listed with the
    default idle time (300 s)."""
    sid = _session(writer, _msg("user", "still working"))
    assert sid not in _listed(reader)


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"limit": 1001}, "limit"),
        ({"limit": -1}, "limit"),
        ({"idle_seconds": -1}, "idle_seconds"),
        ({"since": "yesterday"}, "since"),
    ],
)
def test_bad_arguments_are_invalid_argument_naming_the_field(reader, fields, field) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        reader.ListPendingRounds(reader_pb2.ListPendingRoundsRequest(**fields))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in caught.value.details()
