"""DeleteSession: the session and everything derived from it go, the id is never used again, an
audit record says who and when, forks stay, and a kill -9 leaves each session whole or gone
(writer_service.deletion, docs/deletion.md)."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path

import grpc
import orjson
import pytest
from prometheus_client import REGISTRY

from rollout.v1 import reader_pb2, reader_pb2_grpc, records_pb2, writer_pb2, writer_pb2_grpc
from shared.deletions import DELETIONS_FILE
from shared.errors import SessionBusyError, SessionExistsError, SessionNotFoundError
from shared.layout import DataRoot
from shared.naming import session_file_name
from shared.rounds import round_id
from shared.session_meta import SessionRole, SessionSpec
from tests.conftest import start_service
from tests.data_roots import session_file
from writer_service import resume_fork, saved_state, sessions
from writer_service.deletion import KILL_AT_ENV, KILL_POINTS, TRASH_DIR
from writer_service.saved_state import SAVE_EVERY_BYTES
from writer_service.server import append_payloads
from writer_service.sessions import SessionLedger, WriterConfig

PAUSED = records_pb2.STOP_KIND_PAUSED


def _user(text: str) -> writer_pb2.AppendRecord:
    return writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="user", text=text))


def _assistant(text: str) -> writer_pb2.AppendRecord:
    return writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="assistant", text=text))


def _session(writer, *texts: str, parent: str = "") -> str:
    request = writer_pb2.CreateSessionRequest(role=writer_pb2.SESSION_ROLE_ROOT)
    if parent:
        request = writer_pb2.CreateSessionRequest(
            agent_name="helper",
            parent_session_id=parent,
            delegation_id="call_1",
            role=writer_pb2.SESSION_ROLE_CHILD,
        )
    session_id = str(writer.CreateSession(request).session_id)
    records = [_user(text) if index % 2 == 0 else _assistant(text) for index, text in enumerate(texts)]
    if records:
        writer.Append(writer_pb2.AppendRequest(session_id=session_id, records=records))
    return session_id


def _deletions(data_dir: Path) -> list[dict]:
    return [
        orjson.loads(line)
        for path in sorted(data_dir.rglob(DELETIONS_FILE))
        for line in path.read_bytes().splitlines()
    ]


def _leftovers(data_dir: Path, session_id: str) -> list[Path]:
    """Every file or folder under the data root that names the session (its deletion record aside)."""
    return [path for path in data_dir.rglob(f"*{session_id}*") if path.name != DELETIONS_FILE]


def _code(call, request) -> grpc.StatusCode | None:
    """The status a call ends with (None when it succeeds; a stream is read to its end)."""
    try:
        result = call(request)
        if hasattr(result, "__next__"):  # a streaming reply: its status comes with its end
            list(result)
    except grpc.RpcError as error:
        return error.code()
    return None


def test_a_deleted_session_is_gone_from_every_rpc_and_its_id_never_comes_back(
    writer, reader, data_dir
) -> None:
    """After DeleteSession: no file, marker, saved state or sidecar names the session; every reader
    RPC answers NOT_FOUND and listings and delegation lookups leave it out; CreateSession with its
    id is ALREADY_EXISTS; a retried delete answers already_deleted with the first time."""
    parent = _session(writer, "hello parent")
    target = _session(writer, "secret words", "answer", parent=parent)
    grandchild = _session(writer, "child of the target", parent=target)
    # The reader has the session in its caches before the delete.
    assert reader.GetReplay(reader_pb2.ReplayRequest(session_id=target)).messages
    assert reader.ListRounds(reader_pb2.ListRoundsRequest(session_id=target)).rounds
    listed = reader.ListSessions(reader_pb2.ListSessionsRequest(page_size=100))
    assert target in {summary.session_id for summary in listed.sessions}

    deleted = writer.DeleteSession(writer_pb2.DeleteSessionRequest(session_id=target))
    assert (deleted.session_id, deleted.already_deleted) == (target, False)
    assert deleted.deleted_at.endswith("Z")

    assert _leftovers(data_dir, target) == []
    not_found = grpc.StatusCode.NOT_FOUND
    for call, request in (
        (reader.GetReplay, reader_pb2.ReplayRequest(session_id=target)),
        (reader.StreamReplay, reader_pb2.ReplayRequest(session_id=target)),
        (reader.GetStopFacts, reader_pb2.StopFactsRequest(session_id=target)),
        (reader.VerifySession, reader_pb2.VerifyRequest(session_id=target)),
        (reader.ListRounds, reader_pb2.ListRoundsRequest(session_id=target)),
        (reader.GetRecentMessages, reader_pb2.RecentMessagesRequest(session_id=target)),
        (reader.GetMemoryView, reader_pb2.MemoryViewRequest(session_id=target)),
        (reader.WatchSession, reader_pb2.WatchSessionRequest(session_id=target)),
        (reader.FindDelegations, reader_pb2.FindDelegationsRequest(child_session_id=target)),
        (writer.Append, writer_pb2.AppendRequest(session_id=target, records=[_user("more")])),
        (writer.Stop, writer_pb2.StopRequest(session_id=target, stop_kind=PAUSED)),
        (writer.Resume, writer_pb2.ResumeRequest(session_id=target)),
        (writer.Fork, writer_pb2.ForkRequest(session_id=target, at_seq=1)),
    ):
        assert _code(call, request) == not_found, call
    listed = reader.ListSessions(reader_pb2.ListSessionsRequest(page_size=100))
    assert target not in {summary.session_id for summary in listed.sessions}
    children = reader.FindDelegations(reader_pb2.FindDelegationsRequest(parent_session_id=parent))
    assert target not in {link.child_session_id for link in children.delegations}
    # Its own child is a session of its own and stays.
    assert reader.GetReplay(reader_pb2.ReplayRequest(session_id=grandchild)).messages

    again = writer.DeleteSession(writer_pb2.DeleteSessionRequest(session_id=target))
    assert (again.already_deleted, again.deleted_at) == (True, deleted.deleted_at)
    reuse = writer_pb2.CreateSessionRequest(session_id=target, role=writer_pb2.SESSION_ROLE_ROOT)
    assert _code(writer.CreateSession, reuse) == grpc.StatusCode.ALREADY_EXISTS
    (record,) = _deletions(data_dir)
    assert record == {
        "session_id": target,
        "tenant": "default",
        "deleted_by": "anonymous",
        "deleted_at": deleted.deleted_at,
        "cause": "request",
    }


def test_an_unknown_or_malformed_id_is_refused(writer) -> None:
    """An id no session ever had is NOT_FOUND; a malformed one INVALID_ARGUMENT."""
    unknown = writer_pb2.DeleteSessionRequest(session_id="01a22c15-89a6-7d3d-b5b7-165622bd350c")
    assert _code(writer.DeleteSession, unknown) == grpc.StatusCode.NOT_FOUND
    bad = writer_pb2.DeleteSessionRequest(session_id="../x")
    assert _code(writer.DeleteSession, bad) == grpc.StatusCode.INVALID_ARGUMENT


def test_a_fork_of_a_deleted_session_stays_and_still_replays_and_verifies(writer, reader) -> None:
    """A fork holds copies of its source's records: deleting the source leaves it whole (replay,
    verify, rounds: its lineage walk ends at the missing source)."""
    source = _session(writer, "question", "answer", "second question", "second answer")
    fork = writer.Fork(writer_pb2.ForkRequest(session_id=source, at_seq=2)).session_id
    before = reader.GetReplay(reader_pb2.ReplayRequest(session_id=fork))
    rounds_before = reader.ListRounds(reader_pb2.ListRoundsRequest(session_id=fork))
    writer.DeleteSession(writer_pb2.DeleteSessionRequest(session_id=source))
    after = reader.GetReplay(reader_pb2.ReplayRequest(session_id=fork))
    assert after == before
    assert reader.VerifySession(reader_pb2.VerifyRequest(session_id=fork)).ok
    rounds_after = reader.ListRounds(reader_pb2.ListRoundsRequest(session_id=fork))
    assert [r.round_id for r in rounds_after.rounds] == [r.round_id for r in rounds_before.rounds]
    writer.Append(writer_pb2.AppendRequest(session_id=fork, records=[_user("go on")]))


def test_appends_before_a_delete_are_acknowledged_and_later_ones_refused(writer, data_dir) -> None:
    """A session with appends in flight is drained (each acknowledged), then deleted; an append
    after the delete is NOT_FOUND."""
    target = _session(writer)
    futures = [
        writer.Append.future(writer_pb2.AppendRequest(session_id=target, records=[_user(f"m{n}")]))
        for n in range(20)
    ]
    deleted = writer.DeleteSession(writer_pb2.DeleteSessionRequest(session_id=target))
    assert not deleted.already_deleted
    # Each append was acknowledged, or arrived after the delete began (ABORTED, then NOT_FOUND).
    outcomes = {future.exception() and future.exception().code() for future in futures}
    assert outcomes <= {None, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.ABORTED}
    assert _leftovers(data_dir, target) == []
    late = writer_pb2.AppendRequest(session_id=target, records=[_user("late")])
    assert _code(writer.Append, late) == grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize("step", KILL_POINTS)
def test_a_kill_during_a_delete_leaves_the_session_gone_once_the_writer_is_back(
    data_dir, monkeypatch, step
) -> None:
    """kill -9 at each step after the deletion record is durable: the next start finishes the
    delete (nothing of the session is left: file, trash, marker, state); the other sessions are
    whole; the id stays refused."""
    monkeypatch.setenv(KILL_AT_ENV, step)
    process = start_service("writer", data_dir)
    with grpc.insecure_channel(process.address) as channel:
        writer = writer_pb2_grpc.RolloutWriterStub(channel)
        parent = _session(writer, "keep me")
        target = _session(writer, "delete me", parent=parent)
        with pytest.raises(grpc.RpcError):
            writer.DeleteSession(writer_pb2.DeleteSessionRequest(session_id=target))
    assert process.process.wait(60) == -signal.SIGKILL
    process.stop()
    if step == "recorded":
        assert session_file(data_dir, target).exists(), "killed before the file moved: still there"
    monkeypatch.delenv(KILL_AT_ENV)
    process = start_service("writer", data_dir)
    try:
        assert _leftovers(data_dir, target) == []
        assert not any(os.listdir(folder) for folder in data_dir.rglob(TRASH_DIR))
        with grpc.insecure_channel(process.address) as channel:
            writer = writer_pb2_grpc.RolloutWriterStub(channel)
            again = writer.DeleteSession(writer_pb2.DeleteSessionRequest(session_id=target))
            assert again.already_deleted
            writer.Append(writer_pb2.AppendRequest(session_id=parent, records=[_assistant("still here")]))
            reuse = writer_pb2.CreateSessionRequest(session_id=target, role=writer_pb2.SESSION_ROLE_ROOT)
            assert _code(writer.CreateSession, reuse) == grpc.StatusCode.ALREADY_EXISTS
    finally:
        process.stop()


def test_a_torn_deletion_record_leaves_the_session_whole(data_dir) -> None:
    """A crash while the deletion record was written (its line torn) is a delete that never
    happened: the start-up cuts the torn bytes and the session serves, unchanged."""
    process = start_service("writer", data_dir)
    with grpc.insecure_channel(process.address) as channel:
        writer = writer_pb2_grpc.RolloutWriterStub(channel)
        kept = _session(writer, "one", "two")
        gone = _session(writer, "three")
        writer.DeleteSession(writer_pb2.DeleteSessionRequest(session_id=gone))
    process.stop()
    root = DataRoot(data_dir)
    shard_dir = root.shard_dir(root.shard_of(kept))
    before = session_file(data_dir, kept).read_bytes()
    deletions = shard_dir / DELETIONS_FILE
    with deletions.open("ab") as handle:
        handle.write(b'{"session_id":"' + kept.encode() + b'","tenant":"def')
    process = start_service("writer", data_dir)
    try:
        assert session_file(data_dir, kept).read_bytes() == before
        assert kept.encode() not in deletions.read_bytes(), "the torn record is cut away"
        with grpc.insecure_channel(process.address) as channel:
            writer = writer_pb2_grpc.RolloutWriterStub(channel)
            writer.Append(writer_pb2.AppendRequest(session_id=kept, records=[_user("three")]))
    finally:
        process.stop()


def test_a_file_in_the_trash_without_a_deletion_record_is_put_back(data_dir) -> None:
    """Only a recorded deletion removes a session: a file found in a trash folder that no record
    names (which the order of the steps rules out) is moved back and serves."""
    process = start_service("writer", data_dir)
    with grpc.insecure_channel(process.address) as channel:
        writer = writer_pb2_grpc.RolloutWriterStub(channel)
        kept = _session(writer, "one")
    process.stop()
    path = session_file(data_dir, kept)
    trash = path.parent.parent / TRASH_DIR
    trash.mkdir()
    path.rename(trash / path.name)
    assert session_file_name(path.name) is not None
    process = start_service("writer", data_dir)
    try:
        assert path.exists()
        with grpc.insecure_channel(process.address) as channel:
            writer = writer_pb2_grpc.RolloutWriterStub(channel)
            writer.Append(writer_pb2.AppendRequest(session_id=kept, records=[_assistant("two")]))
    finally:
        process.stop()


def test_an_import_of_a_deleted_id_is_skipped_and_writes_nothing(writer, data_dir) -> None:
    """A repeated import after a deletion does not bring the session back: its id is reported as
    already present and its records are dropped."""
    target = _session(writer, "imported once")
    writer.DeleteSession(writer_pb2.DeleteSessionRequest(session_id=target))
    create = writer_pb2.CreateSessionRequest(session_id=target, role=writer_pb2.SESSION_ROLE_ROOT)
    stream = [
        writer_pb2.ImportSessionsRequest(create=create),
        writer_pb2.ImportSessionsRequest(records=writer_pb2.ImportRecords(records=[_user("again")])),
        writer_pb2.ImportSessionsRequest(stop=writer_pb2.StopRequest(stop_kind=PAUSED)),
    ]
    (result,) = writer.ImportSessions(iter(stream)).sessions
    assert (result.session_id, result.already_present) == (target, True)
    assert _leftovers(data_dir, target) == []


def test_deletions_are_counted_by_cause(data_dir) -> None:
    """rollout_deleted_sessions_total{cause="request"} counts each DeleteSession that deleted (a
    retried one that finds the session deleted counts nothing)."""

    async def scenario() -> None:
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        try:
            session_id, _ = await ledger.create_session(SessionSpec(role=SessionRole.ROOT))
            before = REGISTRY.get_sample_value("rollout_deleted_sessions_total", {"cause": "request"}) or 0.0
            assert not (await ledger.delete(session_id)).already_deleted
            assert (await ledger.delete(session_id)).already_deleted
            after = REGISTRY.get_sample_value("rollout_deleted_sessions_total", {"cause": "request"})
            assert after == before + 1
        finally:
            await ledger.close()

    asyncio.run(scenario())


def test_a_legacy_data_root_keeps_its_deletion_records_at_its_top(data_dir) -> None:
    """In a data root of the layout before shards (one folder), the deletion records and the trash
    are at its top, and a restarted writer still refuses the deleted id."""
    (data_dir / "sessions").mkdir()

    async def scenario() -> str:
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        try:
            session_id, _ = await ledger.create_session(SessionSpec(role=SessionRole.ROOT))
            await ledger.delete(session_id)
            return session_id
        finally:
            await ledger.close()

    session_id = asyncio.run(scenario())
    assert not DataRoot(data_dir).sharded
    assert [path.relative_to(data_dir) for path in data_dir.rglob(DELETIONS_FILE)] == [Path(DELETIONS_FILE)]
    assert _leftovers(data_dir, session_id) == []

    async def again() -> None:
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        try:
            assert (await ledger.delete(session_id)).already_deleted
            with pytest.raises(SessionExistsError):
                await ledger.create_session(SessionSpec(session_id=session_id, role=SessionRole.ROOT))
        finally:
            await ledger.close()

    asyncio.run(again())


def test_a_state_saved_as_the_session_is_deleted_is_not_left_behind(data_dir, monkeypatch) -> None:
    """A session grown past the save threshold has its state saved on an I/O thread after its
    append is durable; a delete meanwhile waits for that save, then removes the state too. The
    save is held with its session file open (released when the delete returns, or after 2 s)
    so that, without the wait, it would write the state after the delete removed it."""
    big = [append_payloads(_user("x" * (SAVE_EVERY_BYTES + 1024)), 0)]
    gate = threading.Event()
    check = saved_state._check

    def held_check(fd: int, offset: int) -> str | None:
        gate.wait(2)
        return check(fd, offset)

    monkeypatch.setattr(saved_state, "_check", held_check)

    async def scenario() -> str:
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        try:
            session_id, _ = await ledger.create_session(SessionSpec(role=SessionRole.ROOT))
            await ledger.append(session_id, big)
            await ledger.delete(session_id)
            gate.set()
            return session_id
        finally:
            await ledger.close()

    session_id = asyncio.run(scenario())
    assert _leftovers(data_dir, session_id) == []


def _round_ids(data_dir: Path, session_id: str) -> list[str]:
    """The round ids of a session, as a reader started now (no cache) lists them."""
    process = start_service("reader", data_dir)
    try:
        with grpc.insecure_channel(process.address) as channel:
            reader = reader_pb2_grpc.RolloutReaderStub(channel)
            page = reader.ListRounds(reader_pb2.ListRoundsRequest(session_id=session_id, page_size=100))
            return [found.round_id for found in page.rounds]
    finally:
        process.stop()


def test_a_fork_of_a_fork_keeps_its_round_ids_when_the_middle_session_is_deleted(writer, data_dir) -> None:
    """Round ids follow a fork's lineage to the session that first wrote each round; the deletion
    record of a deleted fork keeps its own forked_from, so the walk goes on through it and the
    rounds copied from the first source keep their ids."""
    source = _session(writer, "q1", "a1", "q2", "a2")
    middle = writer.Fork(writer_pb2.ForkRequest(session_id=source, at_seq=4)).session_id
    writer.Append(writer_pb2.AppendRequest(session_id=middle, records=[_user("q3"), _assistant("a3")]))
    last = writer.Fork(writer_pb2.ForkRequest(session_id=middle, at_seq=7)).session_id
    before = _round_ids(data_dir, last)
    assert before[0] == round_id(source, 1)
    assert len(before) == 3
    writer.DeleteSession(writer_pb2.DeleteSessionRequest(session_id=middle))
    (record,) = [record for record in _deletions(data_dir) if record["session_id"] == middle]
    assert record["forked_from"] == {"session_id": source, "seq": 4}
    assert _round_ids(data_dir, last) == before
    writer.DeleteSession(writer_pb2.DeleteSessionRequest(session_id=source))
    assert _round_ids(data_dir, last) == before


# -- calls racing a delete: each ends as if it came wholly before or after it (docs/deletion.md §1.4)


async def _until(condition: Callable[[], bool]) -> None:
    """Wait for ``condition`` (generous bound: a loaded machine is slow, never this slow)."""
    for _ in range(6000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the condition never held")


def _held(
    monkeypatch: pytest.MonkeyPatch, module: object, name: str
) -> tuple[threading.Event, threading.Event]:
    """Hold ``module.name`` (a function run on an I/O thread) until the second event is set; the
    first is set when a call is held."""
    entered, go = threading.Event(), threading.Event()
    real = getattr(module, name)

    def held(*args: object) -> object:
        entered.set()
        go.wait(60)
        return real(*args)

    monkeypatch.setattr(module, name, held)
    return entered, go


def _lines(data_dir: Path, session_id: str) -> list[dict]:
    return [orjson.loads(line) for line in session_file(data_dir, session_id).read_bytes().splitlines()]


def _payloads(*texts: str) -> list:
    return [append_payloads(_user(text), 0) for text in texts]


def test_a_fork_reading_its_source_when_a_delete_begins_is_made_first(data_dir, monkeypatch) -> None:
    """The fork reads its source on an I/O thread when the source's delete begins: the delete waits
    for the fork to finish (its file is held), then deletes; the fork has the source's records.
    Without the hold the file went from under the fork (an UNAVAILABLE 'No such file')."""
    entered, go = _held(monkeypatch, resume_fork, "_plan_fork")

    async def scenario() -> None:
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        try:
            source, _ = await ledger.create_session(SessionSpec(role=SessionRole.ROOT))
            await ledger.append(source, _payloads("a", "b"))
            fork = asyncio.create_task(ledger.fork(source, 2, None))
            await _until(entered.is_set)
            delete = asyncio.create_task(ledger.delete(source))
            await _until(lambda: delete.done() or source in ledger._unheld)
            go.set()
            forked = await fork
            await delete
            assert [line["payload"].get("content") for line in _lines(data_dir, forked.session_id)][1:3] == [
                "a",
                "b",
            ]
            assert _leftovers(data_dir, source) == []
        finally:
            go.set()
            await ledger.close()

    asyncio.run(scenario())


def test_a_fork_of_a_source_deleted_while_its_queue_drained_is_not_found(data_dir, monkeypatch) -> None:
    """The delete ends between the fork's drain of the source and its read: NOT_FOUND."""

    async def scenario() -> None:
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        try:
            source, _ = await ledger.create_session(SessionSpec(role=SessionRole.ROOT))
            await ledger.append(source, _payloads("a"))
            drained = ledger.drained_path

            async def drained_then_deleted(session_id: str) -> Path:
                path = await drained(session_id)
                await ledger.delete(session_id)
                return path

            monkeypatch.setattr(ledger, "drained_path", drained_then_deleted)
            with pytest.raises(SessionNotFoundError):
                await ledger.fork(source, 1, None)
        finally:
            await ledger.close()

    asyncio.run(scenario())


def test_a_source_file_gone_under_a_fork_is_not_found(data_dir, monkeypatch) -> None:
    """A source file that vanishes while a fork reads it (removed by other means than this
    writer's Delete) is NOT_FOUND naming the source, never a storage failure."""
    entered, go = _held(monkeypatch, resume_fork, "_plan_fork")

    async def scenario() -> None:
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        try:
            source, _ = await ledger.create_session(SessionSpec(role=SessionRole.ROOT))
            await ledger.append(source, _payloads("a"))
            fork = asyncio.create_task(ledger.fork(source, 1, None))
            await _until(entered.is_set)
            session_file(data_dir, source).unlink()
            go.set()
            with pytest.raises(SessionNotFoundError, match="went while the fork read it"):
                await fork
        finally:
            go.set()
            await ledger.close()

    asyncio.run(scenario())


@pytest.mark.parametrize("look_back", ["resolve_retractions", "find_request"])
def test_an_append_reading_back_when_a_delete_begins_is_aborted_then_not_found(
    data_dir, monkeypatch, look_back: str
) -> None:
    """An Append that reads the session file back (a retraction's references; a request id looked
    up from request_since_seq; both after a restart, so that nothing the writer remembers
    answers) when the session's delete begins: the delete waits for the read, the Append is
    ABORTED (a Delete in progress), the next one NOT_FOUND. Without the hold the read failed on
    a missing file (UNAVAILABLE, or an internal error)."""
    entered, go = _held(monkeypatch, sessions, look_back)

    async def scenario() -> None:
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        session_id, _ = await ledger.create_session(SessionSpec(role=SessionRole.ROOT))
        await ledger.append(session_id, _payloads("a"))
        _, _, durable = await ledger.enqueue(session_id, _payloads("b"), request_id="r1")
        await durable
        await ledger.close()  # a retraction of records queued since the start is answered from memory
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        try:
            if look_back == "resolve_retractions":
                refs = [records_pb2.MessageRef(seq=1)]
                retraction = writer_pb2.AppendRecord(
                    retraction=records_pb2.Retraction(messages=refs, reason="r")
                )
                append = asyncio.create_task(ledger.append(session_id, [append_payloads(retraction, 0)]))
            else:
                append = asyncio.create_task(
                    ledger.enqueue(session_id, _payloads("c"), request_id="r2", request_since_seq=1)
                )
            await _until(entered.is_set)
            delete = asyncio.create_task(ledger.delete(session_id))
            await _until(lambda: delete.done() or session_id in ledger._unheld)
            go.set()
            with pytest.raises(SessionBusyError):
                await append
            await delete
            with pytest.raises(SessionNotFoundError):
                await ledger.append(session_id, _payloads("d"))
        finally:
            go.set()
            await ledger.close()

    asyncio.run(scenario())


def test_a_delete_whose_caller_is_cancelled_while_the_file_goes_is_finished(tmp_path, monkeypatch) -> None:
    """A Delete whose caller is cancelled (a client's deadline, a dropped connection) while the
    session's file is being removed on an I/O thread is finished all the same: the session leaves
    the writer's index, an append to it is NOT_FOUND and a second Delete answers already_deleted.
    (The cancelled caller left the session indexed and open over its removed file: an append was
    acknowledged into the removed file, lost.)"""
    from shared.wire import append_payloads
    from writer_service.sessions import SessionLedger, WriterConfig

    started = threading.Event()
    release = threading.Event()
    removed = threading.Event()
    remove_session = sessions.remove_session

    def held(*args):  # the removal waits until the test lets it run
        started.set()
        release.wait(timeout=600)
        try:
            return remove_session(*args)
        finally:
            removed.set()

    async def scenario() -> None:
        data_dir = tmp_path / "data"
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        try:
            sid, _ = await ledger.create_session(SessionSpec())
            await ledger.append(sid, [append_payloads(_user("kept"), 0)])
            monkeypatch.setattr(sessions, "remove_session", held)
            deleting = asyncio.ensure_future(ledger.delete(sid))
            await asyncio.to_thread(started.wait, 600)
            deleting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await deleting
            release.set()
            await asyncio.to_thread(removed.wait, 600)
            for _ in range(60_000):  # the deletion's own task finishes on the loop
                if sid not in ledger._deleting:
                    break
                await asyncio.sleep(0.01)
            assert ledger.index.get(sid) is None
            with pytest.raises(SessionNotFoundError):
                await ledger.append(sid, [append_payloads(_user("after"), 0)])
            assert (await ledger.delete(sid)).already_deleted
        finally:
            release.set()
            await ledger.close()

    asyncio.run(scenario())
