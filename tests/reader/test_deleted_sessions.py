"""A deleted session vanishes from every reader RPC and index (issue 25, docs/deletion.md §1):
each call naming it answers NOT_FOUND, each listing and lookup leaves it out, a live follower
ends NOT_FOUND, and the content index holds no row of it (its SQLite tables read directly)."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from reader_service.search_index import INDEX_FILE
from rollout.v1 import reader_pb2, reader_pb2_grpc, records_pb2, writer_pb2, writer_pb2_grpc
from rollout_client import NotFoundError, RolloutClient
from rollout_memory.sources import read_source_records
from tests.conftest import start_service
from tests.data_roots import session_file

#: A word no other session holds (the content index is searched for it).
WORD = "quokkaflummox"
#: Seconds a condition is waited for (generous: the machine may be loaded).
BOUND = 60.0


def _message(role: str, text: str) -> writer_pb2.AppendRecord:
    return writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role=role, text=text))


def _session(writer: writer_pb2_grpc.RolloutWriterStub, *texts: str, parent: str = "") -> str:
    """A session holding user messages ``texts`` (a child of ``parent`` when given)."""
    request = writer_pb2.CreateSessionRequest(role=writer_pb2.SESSION_ROLE_ROOT)
    if parent:
        request = writer_pb2.CreateSessionRequest(
            agent_name="helper",
            parent_session_id=parent,
            delegation_id="call_1",
            role=writer_pb2.SESSION_ROLE_CHILD,
        )
    session_id = str(writer.CreateSession(request).session_id)
    records = [_message("user", text) for text in texts]
    writer.Append(writer_pb2.AppendRequest(session_id=session_id, records=records))
    return session_id


def _code(call: Callable[..., Any]) -> grpc.StatusCode | None:
    """The status a call ends with (None when it succeeds; a stream is read to its end)."""
    try:
        result = call()
        if hasattr(result, "__next__"):
            list(result)
    except grpc.RpcError as error:
        return error.code()
    return None


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + BOUND
    while not condition():
        assert time.monotonic() < deadline, f"waited {BOUND} s for {what}"
        time.sleep(0.05)


def _index_rows(index_dir: Path, session_id: str) -> tuple[int, int]:
    """(rows of ``sessions`` naming the session, FTS rows holding :data:`WORD`), read from the
    content index's file itself."""
    with sqlite3.connect(f"file:{index_dir / INDEX_FILE}?mode=ro", uri=True) as connection:
        sessions = connection.execute(
            "SELECT count(*) FROM sessions WHERE session_id = ?", (session_id,)
        ).fetchone()[0]
        records = connection.execute(
            "SELECT count(*) FROM records WHERE records MATCH ?", (f'"{WORD}"',)
        ).fetchone()[0]
    connection.close()
    return int(sessions), int(records)


@pytest.fixture
def pair(data_dir: Path, tmp_path: Path) -> Iterator[tuple[Any, Any, Path, str, str]]:
    """A writer, a reader with its content index in a known folder, that folder, and both addresses."""
    index_dir = tmp_path / "search"
    writer_process = start_service("writer", data_dir)
    reader_process = start_service("reader", data_dir, "--search-index-dir", str(index_dir))
    try:
        with (
            grpc.insecure_channel(writer_process.address) as writer_channel,
            grpc.insecure_channel(reader_process.address) as reader_channel,
        ):
            yield (
                writer_pb2_grpc.RolloutWriterStub(writer_channel),
                reader_pb2_grpc.RolloutReaderStub(reader_channel),
                index_dir,
                writer_process.address,
                reader_process.address,
            )
    finally:
        reader_process.stop()
        writer_process.stop()


def test_a_deleted_session_vanishes_from_every_reader_rpc_and_index(pair, data_dir: Path) -> None:
    """Before the delete every lookup finds the target (so each row below can fail); after it,
    each NOT_FOUND row answers NOT_FOUND and each listing or lookup leaves it out."""
    writer, reader, index_dir, writer_address, reader_address = pair
    parent = _session(writer, "the parent asks")
    target = _session(writer, f"a {WORD} question", "left without an answer", parent=parent)
    grandchild = _session(writer, "a child of the target", parent=target)
    hour_ago = time.time() - 3600
    os.utime(session_file(data_dir, target), (hour_ago, hour_ago))  # idle: its round is pending

    (round_,) = reader.ListRounds(reader_pb2.ListRoundsRequest(session_id=target)).rounds
    follower = reader.WatchSession(reader_pb2.WatchSessionRequest(session_id=target), timeout=BOUND * 2)
    assert next(follower).records  # the follower is live before the delete
    ended: list[grpc.StatusCode] = []
    reading = threading.Thread(target=lambda: ended.append(_code(lambda: follower)))  # type: ignore[arg-type]
    reading.start()

    def searched() -> list[str]:
        reply = reader.SearchSessions(reader_pb2.SearchSessionsRequest(query=WORD))
        return [hit.session_id for hit in reply.hits]

    def listed() -> list[str]:
        reply = reader.ListSessions(reader_pb2.ListSessionsRequest(page_size=100))
        return [summary.session_id for summary in reply.sessions]

    def children() -> list[str]:
        reply = reader.FindDelegations(reader_pb2.FindDelegationsRequest(parent_session_id=parent))
        return [link.child_session_id for link in reply.delegations]

    def pending() -> list[str]:
        reply = reader.ListPendingRounds(reader_pb2.ListPendingRoundsRequest())
        return [found.session_id for found in reply.rounds]

    def provenance() -> list[str]:
        with RolloutClient(writer_address, reader_address) as client:
            try:
                records = read_source_records(client, target, 1, tenant="default")
            except NotFoundError:
                return []
        return [target] if records else []

    omitted: list[tuple[str, Callable[[], list[str]]]] = [
        ("SearchSessions", searched),
        ("ListSessions", listed),
        ("FindDelegations(parent)", children),
        ("ListPendingRounds", pending),
        ("memory provenance (read_source_records)", provenance),
    ]
    not_found: list[tuple[str, Callable[[], Any]]] = [
        ("GetReplay", lambda: reader.GetReplay(reader_pb2.ReplayRequest(session_id=target))),
        ("StreamReplay", lambda: reader.StreamReplay(reader_pb2.ReplayRequest(session_id=target))),
        (
            "GetRecentMessages",
            lambda: reader.GetRecentMessages(reader_pb2.RecentMessagesRequest(session_id=target)),
        ),
        ("GetMemoryView", lambda: reader.GetMemoryView(reader_pb2.MemoryViewRequest(session_id=target))),
        (
            "StreamMemoryView",
            lambda: reader.StreamMemoryView(reader_pb2.MemoryViewRequest(session_id=target)),
        ),
        ("VerifySession", lambda: reader.VerifySession(reader_pb2.VerifyRequest(session_id=target))),
        ("GetStopFacts", lambda: reader.GetStopFacts(reader_pb2.StopFactsRequest(session_id=target))),
        ("ListRounds", lambda: reader.ListRounds(reader_pb2.ListRoundsRequest(session_id=target))),
        (
            "GetRound(session, id)",
            lambda: reader.GetRound(reader_pb2.GetRoundRequest(session_id=target, round_id=round_.round_id)),
        ),
        ("GetRound(id)", lambda: reader.GetRound(reader_pb2.GetRoundRequest(round_id=round_.round_id))),
        ("WatchSession", lambda: reader.WatchSession(reader_pb2.WatchSessionRequest(session_id=target))),
        (
            "FindDelegations(child)",
            lambda: reader.FindDelegations(reader_pb2.FindDelegationsRequest(child_session_id=target)),
        ),
        (
            "FindDelegations(parent: the deleted one)",
            lambda: reader.FindDelegations(reader_pb2.FindDelegationsRequest(parent_session_id=target)),
        ),
    ]

    _wait_for(lambda: target in searched(), "the content index to hold the target")
    for name, found in omitted:
        assert target in found(), name
    for name, call in not_found:
        if name != "WatchSession":  # a stream of an open session does not end by itself
            assert _code(call) is None, name
    assert _index_rows(index_dir, target) == (1, 1)

    writer.DeleteSession(writer_pb2.DeleteSessionRequest(session_id=target))

    for name, found in omitted:  # at once: no lag of an index is waited for
        assert target not in found(), name
    for name, call in not_found:
        assert _code(call) == grpc.StatusCode.NOT_FOUND, name
    reading.join(BOUND)
    assert ended == [grpc.StatusCode.NOT_FOUND]  # the follower live before the delete
    _wait_for(lambda: _index_rows(index_dir, target) == (0, 0), "the index's rows of the target to go")
    # What stays: its child (a session of its own, still naming its deleted parent).
    (link,) = reader.FindDelegations(
        reader_pb2.FindDelegationsRequest(child_session_id=grandchild)
    ).delegations
    assert link.parent_session_id == target
