"""Source times on Append and Stop, and records of real sizes (tens of MB) kept whole or refused whole."""

from __future__ import annotations

from pathlib import Path

import grpc
import orjson
import pytest

from rollout.v1 import reader_pb2, records_pb2, writer_pb2
from shared.records import DEFAULT_MAX_RECORD_BYTES
from tests.data_roots import session_file


def lines_of(data_dir: Path, session_id: str) -> list[dict]:
    return [orjson.loads(line) for line in session_file(data_dir, session_id).read_bytes().splitlines()]


def test_append_keeps_each_records_source_time_and_its_reasoning_shares_it(writer, data_dir) -> None:
    """A record's ts is stored normalized; its reasoning records get the same time; an earlier time is kept."""
    sid = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    answer = records_pb2.ChatMessage(
        role="assistant",
        text="a",
        reasoning_blocks=[records_pb2.Reasoning(content="r1"), records_pb2.Reasoning(content="r2")],
    )
    writer.Append(
        writer_pb2.AppendRequest(
            session_id=sid,
            records=[
                writer_pb2.AppendRecord(
                    message=records_pb2.ChatMessage(role="user", text="q"), ts="2024-06-01T12:00:00.5+02:00"
                ),
                writer_pb2.AppendRecord(message=answer, ts="2024-06-01T09:59:59Z"),
                writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="user", text="now")),
            ],
        )
    )
    stored = lines_of(data_dir, sid)
    assert [line["ts"] for line in stored[1:5]] == [
        "2024-06-01T10:00:00.500000Z",
        "2024-06-01T09:59:59.000000Z",
        "2024-06-01T09:59:59.000000Z",
        "2024-06-01T09:59:59.000000Z",
    ]
    assert stored[5]["ts"] > "2026"  # no time given: the writer's clock
    assert [line["seq"] for line in stored] == list(range(6))


def test_a_time_that_is_not_rfc3339_refuses_the_whole_request(writer, data_dir) -> None:
    """An ISO week date is not RFC 3339: INVALID_ARGUMENT naming records[1].ts, nothing written."""
    sid = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    before = session_file(data_dir, sid).read_bytes()
    with pytest.raises(grpc.RpcError) as caught:
        writer.Append(
            writer_pb2.AppendRequest(
                session_id=sid,
                records=[
                    writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="user", text="ok")),
                    writer_pb2.AppendRecord(
                        message=records_pb2.ChatMessage(role="user", text="x"), ts="2026-W48-1T10:00:00Z"
                    ),
                ],
            )
        )
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details().startswith("record 1: ts: ")
    assert session_file(data_dir, sid).read_bytes() == before


def test_stop_takes_a_source_time_for_its_checkpoint_and_stop(writer, data_dir) -> None:
    """Stop's ts stamps both the checkpoint and the stop record."""
    sid = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    writer.Stop(
        writer_pb2.StopRequest(
            session_id=sid, stop_kind=records_pb2.STOP_KIND_PAUSED, ts="2025-12-31T23:59:60Z"
        )
    )
    assert [line["ts"] for line in lines_of(data_dir, sid)[-2:]] == ["2025-12-31T23:59:60.000000Z"] * 2


def test_a_12_mb_tool_output_is_kept_and_replayed_byte_for_byte(writer, reader) -> None:
    """A 12 MB output goes in under the default limit and comes back whole, unary and streamed."""
    sid = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    output = "".join(f"line {n:07d}: {'x' * 40} ✓\n" for n in range(12 * 1024 * 1024 // 56))
    call = records_pb2.ChatMessage(role="assistant")
    call.tool_calls.add(
        id="c1", type="function", function=records_pb2.FunctionCall(name="cat", arguments="{}")
    )
    writer.Append(
        writer_pb2.AppendRequest(
            session_id=sid,
            records=[
                writer_pb2.AppendRecord(message=call),
                writer_pb2.AppendRecord(
                    message=records_pb2.ChatMessage(role="tool", tool_call_id="c1", text=output)
                ),
            ],
        )
    )
    assert len(output.encode()) > 12 * 1024 * 1024
    replay = reader.GetReplay(reader_pb2.ReplayRequest(session_id=sid))
    assert replay.messages[1].text == output
    streamed = [
        m for chunk in reader.StreamReplay(reader_pb2.ReplayRequest(session_id=sid)) for m in chunk.messages
    ]
    assert streamed[1].text == output


def test_an_80_mb_record_is_refused_naming_the_limit_and_nothing_is_written(writer, data_dir) -> None:
    """Over the 64 MiB default a record is refused whole (INVALID_ARGUMENT, the limit named); the file is unchanged."""
    sid = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    before = session_file(data_dir, sid).read_bytes()
    huge = records_pb2.ChatMessage(role="user", text="y" * (80 * 1000 * 1000))
    with pytest.raises(grpc.RpcError) as caught:
        writer.Append(
            writer_pb2.AppendRequest(session_id=sid, records=[writer_pb2.AppendRecord(message=huge)])
        )
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"over the limit of {DEFAULT_MAX_RECORD_BYTES} bytes" in caught.value.details()
    assert session_file(data_dir, sid).read_bytes() == before
    ok = writer.Append(
        writer_pb2.AppendRequest(
            session_id=sid,
            records=[writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="user", text="z"))],
        )
    )
    assert list(ok.seqs) == [1]


def test_the_record_limit_is_the_line_length_exactly(data_dir) -> None:
    """A record whose line is within the limit is kept; the same record under a limit a few bytes
    below its line length is refused (the limit counts the line's bytes, newline and check included)."""
    import asyncio

    from shared.errors import RecordValidationError
    from shared.session_meta import SessionSpec
    from shared.wire import append_payloads
    from writer_service.sessions import SessionLedger, WriterConfig

    record = append_payloads(
        writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="user", text="x" * 5000)), 0
    )

    async def line_length() -> int:
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        try:
            session_id, _ = await ledger.create_session(SessionSpec())
            await ledger.append(session_id, [record])
        finally:
            await ledger.close()
        return len(session_file(data_dir, session_id).read_bytes().splitlines(keepends=True)[1])

    async def append_under(limit: int, root: Path) -> None:
        ledger = SessionLedger(WriterConfig(data_dir=root, max_record_bytes=limit))
        try:
            session_id, _ = await ledger.create_session(SessionSpec())
            await ledger.append(session_id, [record])
        finally:
            await ledger.close()

    length = asyncio.run(line_length())
    asyncio.run(append_under(length + 12, data_dir.parent / "roomy"))  # the check's digits vary by a few
    with pytest.raises(RecordValidationError, match="over the limit"):
        asyncio.run(append_under(length - 12, data_dir.parent / "tight"))
