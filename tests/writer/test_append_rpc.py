"""The writer's gRPC surface: appends, bad input, unknown sessions, the single-writer lock."""

from __future__ import annotations

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from rollout.v1 import reader_pb2, records_pb2, writer_pb2, writer_pb2_grpc
from tests.conftest import run_rollout, start_service
from tests.data_roots import session_file


def user(text: str) -> writer_pb2.AppendRecord:
    return writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="user", text=text))


def tool_output(call_id: str, text: str) -> writer_pb2.AppendRecord:
    return writer_pb2.AppendRecord(
        message=records_pb2.ChatMessage(role="tool", tool_call_id=call_id, text=text)
    )


def test_append_acknowledges_contiguous_seqs(writer, data_dir) -> None:
    """Append answers with one seq per record, contiguous after session_meta, and the file holds them."""
    created = writer.CreateSession(writer_pb2.CreateSessionRequest(tenant="t1"))
    assert created.next_seq == 1
    first = writer.Append(
        writer_pb2.AppendRequest(session_id=created.session_id, records=[user("a"), user("b")])
    )
    second = writer.Append(writer_pb2.AppendRequest(session_id=created.session_id, records=[user("c")]))
    assert list(first.seqs) == [1, 2]
    assert first.next_seq == 3
    assert list(second.seqs) == [3]
    assert second.next_seq == 4
    lines = session_file(data_dir, created.session_id).read_bytes().splitlines()
    assert len(lines) == 4


def test_message_with_reasoning_takes_two_seqs(writer, data_dir) -> None:
    """An assistant message carrying reasoning is stored as a reasoning record then the message."""
    created = writer.CreateSession(writer_pb2.CreateSessionRequest())
    message = records_pb2.ChatMessage(
        role="assistant", text="answer", reasoning=records_pb2.Reasoning(content="thought", signature="sig")
    )
    ack = writer.Append(
        writer_pb2.AppendRequest(
            session_id=created.session_id, records=[writer_pb2.AppendRecord(message=message)]
        )
    )
    assert list(ack.seqs) == [2]
    assert ack.next_seq == 3
    text = session_file(data_dir, created.session_id).read_text()
    assert text.index('"type":"reasoning"') < text.index('"type":"message"')


def test_invalid_record_is_rejected_naming_index_and_field_and_nothing_is_written(writer, data_dir) -> None:
    """One invalid record refuses the whole request with INVALID_ARGUMENT naming its index and field."""
    created = writer.CreateSession(writer_pb2.CreateSessionRequest())
    path = session_file(data_dir, created.session_id)
    before = path.read_bytes()
    records = [user("fine"), user("also fine"), tool_output("call_missing", "orphan")]
    with pytest.raises(grpc.RpcError) as caught:
        writer.Append(writer_pb2.AppendRequest(session_id=created.session_id, records=records))
    error = caught.value
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "record 2" in error.details()
    assert "message.tool_call_id" in error.details()
    status = rpc_status.from_call(error)
    assert status is not None
    bad_request = error_details_pb2.BadRequest()
    assert status.details[0].Unpack(bad_request)
    assert bad_request.field_violations[0].field == "records[2].message.tool_call_id"
    assert path.read_bytes() == before
    ack = writer.Append(writer_pb2.AppendRequest(session_id=created.session_id, records=[user("next")]))
    assert list(ack.seqs) == [1], "the refused request consumed no seq"


def test_tool_output_may_answer_a_call_earlier_in_the_same_request(writer) -> None:
    """A tool output is accepted when its call is earlier in the same request."""
    created = writer.CreateSession(writer_pb2.CreateSessionRequest())
    call = records_pb2.ChatMessage(role="assistant")
    call.tool_calls.add(
        id="call_1", type="function", function=records_pb2.FunctionCall(name="ls", arguments="{}")
    )
    ack = writer.Append(
        writer_pb2.AppendRequest(
            session_id=created.session_id,
            records=[writer_pb2.AppendRecord(message=call), tool_output("call_1", "a b c")],
        )
    )
    assert list(ack.seqs) == [1, 2]


def test_oversized_record_is_rejected_not_truncated(data_dir) -> None:
    """A record over the configured size limit is refused with the limit in the message."""
    import asyncio

    from shared.errors import RecordValidationError
    from shared.session_meta import SessionSpec
    from shared.wire import append_payloads
    from writer_service.sessions import SessionLedger, WriterConfig

    async def scenario() -> None:
        ledger = SessionLedger(WriterConfig(data_dir=data_dir, max_record_bytes=1024))
        try:
            session_id, _ = await ledger.create_session(SessionSpec())
            with pytest.raises(RecordValidationError, match="over the limit of 1024 bytes"):
                await ledger.append(session_id, [append_payloads(user("x" * 2000), 0)])
            seqs, _ = await ledger.append(session_id, [append_payloads(user("small"), 0)])
            assert seqs == [1]
        finally:
            await ledger.close()

    asyncio.run(scenario())


def test_unknown_session_is_not_found(writer, reader) -> None:
    """Appending to, stopping or reading an unknown session answers NOT_FOUND."""
    missing = "01933333-3333-7333-8333-333333333333"
    calls = [
        lambda: writer.Append(writer_pb2.AppendRequest(session_id=missing, records=[user("x")])),
        lambda: writer.Stop(
            writer_pb2.StopRequest(session_id=missing, stop_kind=records_pb2.STOP_KIND_PAUSED)
        ),
        lambda: reader.GetReplay(reader_pb2.ReplayRequest(session_id=missing)),
        lambda: reader.GetStopFacts(reader_pb2.StopFactsRequest(session_id=missing)),
    ]
    for call in calls:
        with pytest.raises(grpc.RpcError) as caught:
            call()
        assert caught.value.code() == grpc.StatusCode.NOT_FOUND
        assert missing in caught.value.details()


def test_a_session_file_that_cannot_be_read_gets_a_precise_status(writer, reader, data_dir) -> None:
    """A session file deleted outside the ledger answers NOT_FOUND; one that cannot be read (here a
    directory in its place) answers UNAVAILABLE with ErrorInfo naming the errno; never INTERNAL."""
    gone = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    writer.Append(writer_pb2.AppendRequest(session_id=gone, records=[user("x")]))
    unreadable = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    (gone_file,) = data_dir.rglob(f"*{gone}*.jsonl")
    (unreadable_file,) = data_dir.rglob(f"*{unreadable}*.jsonl")
    gone_file.unlink()
    unreadable_file.unlink()
    unreadable_file.mkdir()

    with pytest.raises(grpc.RpcError) as caught:
        writer.Stop(writer_pb2.StopRequest(session_id=gone, stop_kind=records_pb2.STOP_KIND_PAUSED))
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    assert f"session file {gone_file.name} is gone" in caught.value.details()

    for call in (
        lambda: reader.GetReplay(reader_pb2.ReplayRequest(session_id=unreadable)),
        lambda: reader.GetMemoryView(reader_pb2.MemoryViewRequest(session_id=unreadable)),
    ):
        with pytest.raises(grpc.RpcError) as caught:
            call()
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE, caught.value.details()
        assert (
            f"reading {unreadable_file.name} failed (read failed: Is a directory)" in caught.value.details()
        )
        (detail,) = rpc_status.from_call(caught.value).details
        info = error_details_pb2.ErrorInfo()
        assert detail.Unpack(info)
        assert (info.reason, info.metadata["operation"]) == ("EISDIR", "read")


def test_malformed_session_id_is_invalid_argument(writer) -> None:
    """A session id that is not a lowercase UUID is INVALID_ARGUMENT, not NOT_FOUND."""
    with pytest.raises(grpc.RpcError) as caught:
        writer.Append(writer_pb2.AppendRequest(session_id="../etc/passwd", records=[user("x")]))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_stopped_session_refuses_appends(writer) -> None:
    """After Stop, Append answers FAILED_PRECONDITION naming the stop kind."""
    created = writer.CreateSession(writer_pb2.CreateSessionRequest())
    writer.Stop(writer_pb2.StopRequest(session_id=created.session_id, stop_kind=records_pb2.STOP_KIND_PAUSED))
    with pytest.raises(grpc.RpcError) as caught:
        writer.Append(writer_pb2.AppendRequest(session_id=created.session_id, records=[user("late")]))
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "stopped (paused)" in caught.value.details()


def test_append_stream_acks_in_order_and_ends_at_the_first_bad_request(writer, data_dir) -> None:
    """AppendStream acks each request in order; a bad request ends the stream and nothing after it lands."""
    created = writer.CreateSession(writer_pb2.CreateSessionRequest())
    sid = created.session_id
    requests = [
        writer_pb2.AppendRequest(session_id=sid, records=[user("0a"), user("0b")]),
        writer_pb2.AppendRequest(session_id=sid, records=[user("1a")]),
        writer_pb2.AppendRequest(session_id=sid, records=[tool_output("nope", "orphan")]),
        writer_pb2.AppendRequest(session_id=sid, records=[user("3a")]),
    ]
    acks = []
    stream = writer.AppendStream(iter(requests))
    acks.append(next(stream))
    acks.append(next(stream))
    with pytest.raises(grpc.RpcError) as caught:
        next(stream)
    assert [list(ack.seqs) for ack in acks] == [[1, 2], [3]]
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "request 2 of the stream" in caught.value.details()
    text = session_file(data_dir, sid).read_text()
    assert '"3a"' not in text
    assert text.count("\n") == 4


def test_second_writer_on_the_same_root_fails_fast(writer_process, data_dir) -> None:
    """A second writer process on a locked data root exits at once with a clear message."""
    result = run_rollout("serve-writer", "--data-dir", str(data_dir), "--address", "127.0.0.1:0")
    assert result.returncode != 0
    assert "already in use by another writer process" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_record_provably_over_the_limit_is_refused_from_the_request_bytes() -> None:
    """A request holding a record whose encoding is over 6x the line limit is refused from its bytes,
    never decoded, naming the record's index and kind; smaller or malformed bytes go to the decoder."""
    from serving.status import RefusedRequest, _tolerant_deserializer
    from shared.errors import RecordValidationError
    from writer_service.server import oversized_record

    limit = 1024
    big = writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="user", text="x" * 7000))
    request = writer_pb2.AppendRequest(
        session_id="01933333-3333-7333-8333-333333333333",
        records=[user("a"), user("b"), big],
        expected_next_seq=4,
        request_id="r",
    )
    raw = request.SerializeToString()

    class NeverDecoded:
        @staticmethod
        def FromString(raw: bytes) -> None:
            raise AssertionError("a request with an oversized record was decoded")

    refused = _tolerant_deserializer(NeverDecoded, lambda raw: oversized_record(raw, limit))(raw)
    assert isinstance(refused, RefusedRequest)
    assert isinstance(refused.error, RecordValidationError)
    assert (refused.error.index, refused.error.field) == (2, "message")
    assert f"record is {big.ByteSize()} bytes encoded" in str(refused.error)
    # At most 6x the limit: left to the decoder and the line check.
    small = writer_pb2.AppendRequest(records=[user("x" * 5000)]).SerializeToString()
    assert oversized_record(small, limit) is None
    # Many records each under the bound, together over it: not refused.
    many = writer_pb2.AppendRequest(records=[user("x" * 3000)] * 4).SerializeToString()
    assert len(many) > 6 * limit
    assert oversized_record(many, limit) is None
    # Malformed bytes (a length past the end): the decoder names the problem.
    assert oversized_record(raw[: 6 * limit + 10], limit) is None


@pytest.fixture
def writer_with_a_small_limit(data_dir):
    """A writer whose record limit is 64 KiB: a 1 MB record is over 6 x it, yet its request is
    within the writer's gRPC limit (twice the record limit plus 4 MiB)."""
    service = start_service("writer", data_dir, "--max-record-bytes", str(64 * 1024))
    with grpc.insecure_channel(service.address) as channel:
        yield writer_pb2_grpc.RolloutWriterStub(channel)
    service.stop()


def test_an_oversized_record_over_grpc_is_invalid_argument_naming_it(writer_with_a_small_limit) -> None:
    """Through gRPC, a record far over the limit is INVALID_ARGUMENT with a BadRequest naming
    records[i].<kind>, for Append and for AppendStream."""
    writer = writer_with_a_small_limit
    created = writer.CreateSession(writer_pb2.CreateSessionRequest())
    huge = writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="user", text="x" * 1_000_000))
    request = writer_pb2.AppendRequest(session_id=created.session_id, records=[user("a"), huge])
    for call in (lambda: writer.Append(request), lambda: list(writer.AppendStream(iter([request])))):
        with pytest.raises(grpc.RpcError) as caught:
            call()
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "record 1: message: record is 10000" in caught.value.details()
        (detail,) = rpc_status.from_call(caught.value).details
        violation = error_details_pb2.BadRequest()
        assert detail.Unpack(violation)
        assert violation.field_violations[0].field == "records[1].message"
    ack = writer.Append(writer_pb2.AppendRequest(session_id=created.session_id, records=[user("b")]))
    assert list(ack.seqs) == [1]
