"""A sharded data root as both services use it: each session in the folder its shard names, found
there by the reader, listed over every shard (docs/spec.md §7; shared.shards, shared.layout)."""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import pytest

from rollout.v1 import reader_pb2, reader_pb2_grpc, records_pb2, writer_pb2, writer_pb2_grpc
from shared.naming import build_file_name
from shared.records import encode_line, format_timestamp
from tests.conftest import start_service

BASE = datetime(2026, 3, 1, tzinfo=UTC)


def shard_folder(data_dir: Path, session_id: str, shards: int) -> Path:
    """Where the documented rule puts a session's file, written out here: BLAKE2b-64, big-endian,
    modulo the count, three digits (not through shared.shards or shared.layout)."""
    shard = int(hashlib.blake2b(session_id.encode(), digest_size=8).hexdigest(), 16) % shards
    return data_dir / "shards" / f"{shard:03d}" / "sessions"


def user(text: str) -> writer_pb2.AppendRecord:
    return writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="user", text=text))


def test_a_new_root_records_its_shards_and_each_session_file_is_in_its_shard_folder(data_dir) -> None:
    """The writer creates cluster.json with 256 shards and puts each session where the rule says;
    the root holds no flat sessions folder."""
    writer = start_service("writer", data_dir)
    try:
        with grpc.insecure_channel(writer.address) as channel:
            stub = writer_pb2_grpc.RolloutWriterStub(channel)
            ids = [stub.CreateSession(writer_pb2.CreateSessionRequest()).session_id for _ in range(12)]
            stub.Append(writer_pb2.AppendRequest(session_id=ids[0], records=[user("hello")]))
    finally:
        writer.stop()
    assert json.loads((data_dir / "cluster.json").read_text()) == {"hash": "blake2b-64", "shards": 256}
    for session_id in ids:
        assert len(list(shard_folder(data_dir, session_id, 256).glob(f"*_{session_id}.jsonl"))) == 1
    assert not (data_dir / "sessions").exists()
    assert len({shard_folder(data_dir, session_id, 256) for session_id in ids}) > 1


def test_the_shard_count_is_set_once_when_the_root_is_created(data_dir) -> None:
    """--shards sets a new root's count; a writer started later with another count keeps the recorded one."""
    for shards in (8, 16):
        writer = start_service("writer", data_dir, "--shards", str(shards))
        try:
            with grpc.insecure_channel(writer.address) as channel:
                stub = writer_pb2_grpc.RolloutWriterStub(channel)
                session_id = stub.CreateSession(writer_pb2.CreateSessionRequest()).session_id
        finally:
            writer.stop()
        assert json.loads((data_dir / "cluster.json").read_text())["shards"] == 8
        assert len(list(shard_folder(data_dir, session_id, 8).glob(f"*_{session_id}.jsonl"))) == 1


def test_the_reader_looks_a_session_up_in_its_shard_folder_only(data_dir, reader) -> None:
    """A file placed where the rule puts it is replayed and listed; the same kind of file in another
    shard's folder is no session of the root: not found by its id, not listed."""
    (data_dir / "cluster.json").write_text('{"hash":"blake2b-64","shards":16}')
    placed, misplaced = str(uuid.uuid4()), str(uuid.uuid4())
    for number, session_id in enumerate((placed, misplaced)):
        created = BASE + timedelta(seconds=number)
        folder = shard_folder(data_dir, session_id, 16)
        if session_id == misplaced:
            folder = folder.parent.parent / f"{(int(folder.parent.name) + 1) % 16:03d}" / "sessions"
        folder.mkdir(parents=True, exist_ok=True)
        meta = {"session_id": session_id, "tenant": "", "created_at": format_timestamp(created)}
        body = encode_line(0, format_timestamp(created), "session_meta", meta)
        body += encode_line(1, format_timestamp(created), "message", {"role": "user", "content": "hi"})
        (folder / build_file_name(created, session_id)).write_bytes(body)
    replay = reader.GetReplay(reader_pb2.ReplayRequest(session_id=placed))
    assert [message.text for message in replay.messages] == ["hi"]
    with pytest.raises(grpc.RpcError) as caught:
        reader.GetReplay(reader_pb2.ReplayRequest(session_id=misplaced))
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    listed = reader.ListSessions(reader_pb2.ListSessionsRequest()).sessions
    assert [summary.session_id for summary in listed] == [placed]


def _pages(reader: reader_pb2_grpc.RolloutReaderStub, **filters: str) -> list[str]:
    """Every session id of a listing with ``filters``, walked in pages of 7."""
    seen: list[str] = []
    token = ""
    while True:
        page = reader.ListSessions(reader_pb2.ListSessionsRequest(page_size=7, page_token=token, **filters))
        seen += [summary.session_id for summary in page.sessions]
        token = page.next_page_token
        if not token:
            return seen


def test_listings_filter_and_page_over_every_shard(data_dir, writer, reader) -> None:
    """Forty sessions spread over shards: pages of 7 list each once, newest first, with tenant, agent,
    parent and date filters; delegations are found both ways across shards."""
    parent = writer.CreateSession(
        writer_pb2.CreateSessionRequest(tenant="t0", created_at=format_timestamp(BASE))
    ).session_id
    writer.Append(
        writer_pb2.AppendRequest(
            session_id=parent,
            records=[
                writer_pb2.AppendRecord(
                    message=records_pb2.ChatMessage(
                        role="assistant",
                        tool_calls=[
                            records_pb2.ToolCall(
                                id=f"call_{n}",
                                type="function",
                                function=records_pb2.FunctionCall(name="delegate", arguments="{}"),
                            )
                            for n in range(1, 40, 4)
                        ],
                    )
                )
            ],
        )
    )
    made: list[tuple[str, str, str, str]] = [(parent, "t0", "", "")]
    for number in range(1, 40):
        child = number % 4 == 1
        request = writer_pb2.CreateSessionRequest(
            tenant=f"t{number % 3}",
            agent_name="coder" if number % 2 else "",
            created_at=format_timestamp(BASE + timedelta(seconds=number)),
            parent_session_id=parent if child else "",
            delegation_id=f"call_{number}" if child else "",
            role=writer_pb2.SESSION_ROLE_UNSPECIFIED if child else writer_pb2.SESSION_ROLE_ROOT,
        )
        session_id = writer.CreateSession(request).session_id
        made.append((session_id, request.tenant, request.agent_name, request.parent_session_id))
    newest_first = [session_id for session_id, *_ in reversed(made)]
    assert len({shard_folder(data_dir, session_id, 256) for session_id in newest_first}) > 20
    assert _pages(reader) == newest_first
    assert _pages(reader, tenant="t1") == [s for s, tenant, *_ in reversed(made) if tenant == "t1"]
    assert _pages(reader, agent_name="coder") == [s for s, _, agent, _ in reversed(made) if agent == "coder"]
    children = [s for s, *_, of in reversed(made) if of == parent]
    assert _pages(reader, parent_session_id=parent) == children
    window = _pages(
        reader,
        created_after=format_timestamp(BASE + timedelta(seconds=10)),
        created_before=format_timestamp(BASE + timedelta(seconds=20)),
    )
    assert window == newest_first[19:30]
    found = reader.FindDelegations(reader_pb2.FindDelegationsRequest(parent_session_id=parent)).delegations
    assert sorted(link.child_session_id for link in found) == sorted(children)
    for child in children:
        (link,) = reader.FindDelegations(
            reader_pb2.FindDelegationsRequest(child_session_id=child)
        ).delegations
        assert link.parent_session_id == parent
    markers = shard_folder(data_dir, parent, 256).parent / "delegations" / parent
    assert len(list(markers.iterdir())) == len(children)
