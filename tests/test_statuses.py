"""Hostile input gets the status the protos document: clipped quotes, real field paths, RFC 3339 times."""

from __future__ import annotations

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from rollout.v1 import reader_pb2, records_pb2, writer_pb2

HUGE = "x" * 20_000
PAUSED = records_pb2.STOP_KIND_PAUSED
UNKNOWN_ID = "01a22c15-89a6-7d3d-b5b7-165622bd350c"


def refused(call, request) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        call(request)
    return caught.value


def field_paths(error: grpc.RpcError) -> list[str]:
    """The fields a refusal's google.rpc.BadRequest detail names."""
    status = rpc_status.from_call(error)
    assert status is not None, error.details()
    paths = []
    for detail in status.details:
        bad_request = error_details_pb2.BadRequest()
        if detail.Unpack(bad_request):
            paths += [violation.field for violation in bad_request.field_violations]
    return paths


def call_with_id(call_id: str) -> writer_pb2.AppendRecord:
    message = records_pb2.ChatMessage(role="assistant")
    message.tool_calls.add(id=call_id, type="function", function=records_pb2.FunctionCall(name="run"))
    return writer_pb2.AppendRecord(message=message)


def test_long_client_input_is_quoted_clipped_and_keeps_the_documented_status(writer, reader) -> None:
    """Hole 4: 20 KB in a listing filter or a tool call id gets INVALID_ARGUMENT / FAILED_PRECONDITION
    with a short message saying where it was clipped, never RESOURCE_EXHAUSTED from gRPC's metadata limit."""
    for request, field in (
        (reader_pb2.ListSessionsRequest(stop_state=HUGE), "stop_state"),
        (reader_pb2.ListSessionsRequest(created_after=HUGE), "created_after"),
        (reader_pb2.ListSessionsRequest(created_before="é" * 20_000), "created_before"),
        (reader_pb2.ListSessionsRequest(page_token=HUGE), "page_token"),
    ):
        error = refused(reader.ListSessions, request)
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (field, error.details()[:200])
        assert len(error.details().encode()) <= 1024
        assert field_paths(error) == [field]
    error = refused(reader.ListSessions, reader_pb2.ListSessionsRequest(stop_state=HUGE))
    assert "clipped to 100 of 20000 characters" in error.details()

    sid = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    writer.Append(writer_pb2.AppendRequest(session_id=sid, records=[call_with_id(HUGE)]))
    output = records_pb2.ChatMessage(role="tool", text="done", tool_call_id=HUGE)
    writer.Append(writer_pb2.AppendRequest(session_id=sid, records=[writer_pb2.AppendRecord(message=output)]))
    error = refused(writer.Fork, writer_pb2.ForkRequest(session_id=sid, at_seq=1))
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "falls between tool call" in error.details()
    assert len(error.details()) < 600


def test_badrequest_details_name_the_field_the_client_set(writer, reader) -> None:
    """Hole 4: Stop's stop_kind is `stop_kind`, an empty Append is `records`, a bad parent or child id is
    `parent_session_id` / `child_session_id`, in every RPC that takes one."""
    sid = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    cases = [
        (writer.Stop, writer_pb2.StopRequest(session_id=sid), ["stop_kind"]),
        (writer.Stop, writer_pb2.StopRequest(session_id=sid, stop_kind=99), ["stop_kind"]),
        (writer.Append, writer_pb2.AppendRequest(session_id=sid), ["records"]),
        (
            writer.CreateSession,
            writer_pb2.CreateSessionRequest(parent_session_id="../x", delegation_id="call_1"),
            ["parent_session_id"],
        ),
        (
            reader.ListSessions,
            reader_pb2.ListSessionsRequest(parent_session_id="NOT-A-UUID"),
            ["parent_session_id"],
        ),
        (
            reader.FindDelegations,
            reader_pb2.FindDelegationsRequest(parent_session_id="x"),
            ["parent_session_id"],
        ),
        (
            reader.FindDelegations,
            reader_pb2.FindDelegationsRequest(child_session_id="x"),
            ["child_session_id"],
        ),
    ]
    for call, request, fields in cases:
        error = refused(call, request)
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (request, error.details())
        assert field_paths(error) == fields, request

    stream = iter(
        [
            writer_pb2.ImportSessionsRequest(create=writer_pb2.CreateSessionRequest(session_id=UNKNOWN_ID)),
            writer_pb2.ImportSessionsRequest(stop=writer_pb2.StopRequest(ts="2026-W48-1T10:00:00Z")),
        ]
    )
    assert field_paths(refused(writer.ImportSessions, stream)) == ["sessions[0].ts"]
    stream = iter(
        [
            writer_pb2.ImportSessionsRequest(create=writer_pb2.CreateSessionRequest(session_id=UNKNOWN_ID)),
            writer_pb2.ImportSessionsRequest(stop=writer_pb2.StopRequest()),
        ]
    )
    assert field_paths(refused(writer.ImportSessions, stream)) == ["sessions[0].stop_kind"]


def test_page_size_says_what_zero_means(reader) -> None:
    """Hole 4: a page size out of range names the range 0..1000 and that 0 means the default."""
    error = refused(reader.ListSessions, reader_pb2.ListSessionsRequest(page_size=1001))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "between 0 and 1000 (0: the default, 50)" in error.details()
    assert reader.ListSessions(reader_pb2.ListSessionsRequest(page_size=0)).next_page_token == ""


def test_times_are_rfc_3339_leap_second_included_with_a_reason_on_refusal(writer, reader) -> None:
    """Hole 4: a leap second is accepted wherever a time is given; ISO week and basic forms are refused
    with the reason and the field."""
    leap = "2016-12-31T23:59:60Z"
    writer.CreateSession(writer_pb2.CreateSessionRequest(created_at=leap))
    reader.ListSessions(reader_pb2.ListSessionsRequest(created_after=leap, created_before=leap))
    sid = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    record = writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="user", text="a"), ts=leap)
    writer.Append(writer_pb2.AppendRequest(session_id=sid, records=[record]))
    writer.Stop(writer_pb2.StopRequest(session_id=sid, stop_kind=PAUSED, ts=leap))
    for bad in ("2026-W48-1T10:00:00Z", "20261130T101530Z", "2026-11-30T10:15:30"):
        for call, request, field in (
            (writer.CreateSession, writer_pb2.CreateSessionRequest(created_at=bad), "created_at"),
            (reader.ListSessions, reader_pb2.ListSessionsRequest(created_after=bad), "created_after"),
            (writer.Stop, writer_pb2.StopRequest(session_id=sid, stop_kind=PAUSED, ts=bad), "ts"),
        ):
            error = refused(call, request)
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (bad, field)
            assert field_paths(error) == [field]
            assert "is not an RFC 3339 date-time" in error.details(), error.details()
