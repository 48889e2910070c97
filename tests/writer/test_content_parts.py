"""Each content part of a message is an object (records.proto, ChatMessage.parts), on every path that
accepts messages: Append, AppendStream, a compaction's replacement history, ImportSessions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from rollout.v1 import records_pb2, writer_pb2
from shared.errors import RecordValidationError
from shared.records import validate_message

SESSION = "01938a4b-2222-7000-8000-000000000001"


def parts(*items: Any) -> struct_pb2.ListValue:
    values = struct_pb2.ListValue()
    values.extend(items)
    return values


def user_parts(*items: Any) -> writer_pb2.AppendRecord:
    return writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="user", parts=parts(*items)))


def compaction_with(*items: Any) -> writer_pb2.AppendRecord:
    history = records_pb2.ReplacementHistory(
        messages=[
            records_pb2.ChatMessage(role="user", text="before"),
            records_pb2.ChatMessage(role="user", parts=parts(*items)),
        ]
    )
    return writer_pb2.AppendRecord(compacted=records_pb2.Compacted(summary="s", replacement_history=history))


def refused_field(error: grpc.RpcError) -> str:
    """The field the BadRequest of a refusal names."""
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    status = rpc_status.from_call(error)
    assert status is not None
    bad_request = error_details_pb2.BadRequest()
    assert status.details[0].Unpack(bad_request)
    return str(bad_request.field_violations[0].field)


@pytest.mark.parametrize(
    "part", ["text", 3, None, True, ["nested"]], ids=["string", "number", "null", "boolean", "list"]
)
def test_a_part_that_is_not_an_object_is_refused_by_append_naming_it(writer, part: Any) -> None:
    """Append and AppendStream refuse a message whose content[1] is not an object: INVALID_ARGUMENT
    naming records[i].message.content[1]; nothing lands, objects still do."""
    session_id = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    good = user_parts({"type": "text", "text": "fine"})
    bad = user_parts({"type": "text", "text": "fine"}, part)
    request = writer_pb2.AppendRequest(session_id=session_id, records=[good, bad])
    calls: list[Callable[[], object]] = [
        lambda: writer.Append(request),
        lambda: list(writer.AppendStream(iter([request]))),
    ]
    for call in calls:
        with pytest.raises(grpc.RpcError) as caught:
            call()
        assert refused_field(caught.value) == "records[1].message.content[1]"
        assert "is an object" in (caught.value.details() or "")
    ack = writer.Append(writer_pb2.AppendRequest(session_id=session_id, records=[good]))
    assert list(ack.seqs) == [1]


def test_a_replacement_history_part_that_is_not_an_object_is_refused(writer) -> None:
    """A compaction whose replacement history holds a message with a text part is refused, naming
    records[0].compacted.replacement_history[1].content[0]."""
    session_id = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    request = writer_pb2.AppendRequest(session_id=session_id, records=[compaction_with("text")])
    with pytest.raises(grpc.RpcError) as caught:
        writer.Append(request)
    assert refused_field(caught.value) == "records[0].compacted.replacement_history[1].content[0]"


def test_an_import_with_a_part_that_is_not_an_object_is_refused_and_keeps_nothing(writer) -> None:
    """ImportSessions refuses the stream, naming sessions[0].records[1].message.content[0]; the id
    stays free."""
    stream = [
        writer_pb2.ImportSessionsRequest(create=writer_pb2.CreateSessionRequest(session_id=SESSION)),
        writer_pb2.ImportSessionsRequest(
            records=writer_pb2.ImportRecords(records=[user_parts({"type": "text"}), user_parts("text")])
        ),
        writer_pb2.ImportSessionsRequest(
            stop=writer_pb2.StopRequest(stop_kind=records_pb2.STOP_KIND_COMPLETED)
        ),
    ]
    with pytest.raises(grpc.RpcError) as caught:
        writer.ImportSessions(iter(stream))
    assert refused_field(caught.value) == "sessions[0].records[1].message.content[0]"
    stream[1] = writer_pb2.ImportSessionsRequest(
        records=writer_pb2.ImportRecords(records=[user_parts({"type": "text"})])
    )
    [result] = writer.ImportSessions(iter(stream)).sessions
    assert (result.session_id, result.already_present) == (SESSION, False)


def test_the_rule_names_the_first_part_that_is_not_an_object() -> None:
    """validate_message: content text, a list of objects and an empty list pass; the first other
    part is named with its position, whatever the field prefix."""
    for content in ("text", [], [{"type": "text"}, {}]):
        validate_message({"role": "user", "content": content}, 0, set())
    with pytest.raises(RecordValidationError) as caught:
        validate_message(
            {"role": "user", "content": [{}, "a", 1]}, 4, set(), "compacted.replacement_history[2]"
        )
    assert (caught.value.index, caught.value.field) == (4, "compacted.replacement_history[2].content[1]")
