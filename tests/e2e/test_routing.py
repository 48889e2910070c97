"""Routing across writers (docs/cluster.md §4): 2-3 writer processes on one data root, each owning
the shards a static map gives it. A writer asked about another's shard answers UNAVAILABLE with
ErrorInfo NOT_OWNER naming the owner and its epoch; GetShardMap tells every owner; CreateSession
without an id picks one in a shard the writer owns; Fork lands its new session in a shard of the
writer that owns the source; the SDK follows the map and the redirects, exactly once across an
owner change."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2

from rollout.v1 import records_pb2, writer_pb2, writer_pb2_grpc
from rollout_client import (
    AsyncRolloutClient,
    InvalidArgumentError,
    RetryPolicy,
    RolloutClient,
    delegation,
    user,
)
from rollout_client._appends import PendingAppend
from rollout_client._records import append_record, record_lines
from shared.naming import session_id_for_key
from shared.reasons import NOT_OWNER, OWNER_ADDRESS, OWNER_EPOCH
from shared.shards import shard_of
from tests.client.conftest import TEST_RETRY
from tests.conftest import start_service
from tests.e2e.static_cluster import StaticCluster, id_in_shard
from tests.processes import ServiceProcess
from writer_service.server import reachable_address

SHARDS = 16


def user_record(text: str) -> writer_pb2.AppendRecord:
    return writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="user", text=text))


def not_owner_of(error: grpc.RpcError) -> dict[str, str]:
    """The NOT_OWNER ErrorInfo metadata of an UNAVAILABLE status (AssertionError otherwise)."""
    assert error.code() is grpc.StatusCode.UNAVAILABLE, error
    (raw,) = [value for key, value in error.trailing_metadata() if key == "grpc-status-details-bin"]
    status = status_pb2.Status.FromString(raw)
    for detail in status.details:
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info) and info.reason == NOT_OWNER:
            return dict(info.metadata)
    raise AssertionError(f"no NOT_OWNER in {status}")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[StaticCluster]:
    """Two writers on one root of 16 shards: even shards to the first, odd to the second."""
    made = StaticCluster.create(tmp_path, writers=2, shards=SHARDS)
    made.start()
    try:
        yield made
    finally:
        made.stop()


def stub_of(channel: grpc.Channel) -> writer_pb2_grpc.RolloutWriterStub:
    return writer_pb2_grpc.RolloutWriterStub(channel)


def test_every_writer_serves_the_shard_map_it_knows(cluster: StaticCluster) -> None:
    """GetShardMap: shard count, hash name, every shard's owner and epoch, the writer's own address."""
    expected = [(shard, *cluster.owners[shard]) for shard in range(SHARDS)]
    for address in cluster.addresses:
        with grpc.insecure_channel(address) as channel:
            answer = stub_of(channel).GetShardMap(writer_pb2.GetShardMapRequest(), timeout=30)
        assert (answer.shard_count, answer.hash, answer.address) == (SHARDS, "blake2b-64", address)
        assert [(owner.shard, owner.address, owner.epoch) for owner in answer.owners] == expected


def test_the_embedded_writer_maps_every_shard_to_itself(writer_process: ServiceProcess) -> None:
    """Without a static map, the writer owns every shard at epoch 1 under its bound address."""
    address = writer_process.address
    with grpc.insecure_channel(address) as channel:
        answer = stub_of(channel).GetShardMap(writer_pb2.GetShardMapRequest(), timeout=30)
    assert answer.address == address
    assert answer.shard_count == 256
    assert {(owner.address, owner.epoch) for owner in answer.owners} == {(address, 1)}
    assert [owner.shard for owner in answer.owners] == list(range(256))


def test_a_writer_redirects_calls_about_another_writers_shard(cluster: StaticCluster) -> None:
    """CreateSession with an id, Append, Stop, Resume and Fork of a session in the other writer's
    shard: UNAVAILABLE, NOT_OWNER naming that writer and its epoch (this writer's epoch empty:
    nothing done); an unknown id of the writer's own shard stays NOT_FOUND."""
    first, second = cluster.addresses
    theirs, ours = id_in_shard(1, SHARDS), id_in_shard(0, SHARDS)
    with grpc.insecure_channel(first) as channel, grpc.insecure_channel(second) as other:
        stub = stub_of(channel)
        stub_of(other).CreateSession(writer_pb2.CreateSessionRequest(session_id=theirs), timeout=30)
        calls = [
            lambda: stub.CreateSession(writer_pb2.CreateSessionRequest(session_id=id_in_shard(3, SHARDS))),
            lambda: stub.Append(writer_pb2.AppendRequest(session_id=theirs, records=[user_record("x")])),
            lambda: stub.Stop(
                writer_pb2.StopRequest(session_id=theirs, stop_kind=records_pb2.STOP_KIND_PAUSED)
            ),
            lambda: stub.Resume(writer_pb2.ResumeRequest(session_id=theirs)),
            lambda: stub.Fork(writer_pb2.ForkRequest(session_id=theirs, at_seq=0)),
        ]
        for call in calls:
            with pytest.raises(grpc.RpcError) as refused:
                call()
            info = not_owner_of(refused.value)
            assert info[OWNER_ADDRESS] == second
            assert info[OWNER_EPOCH] == "1"
            assert info["epoch"] == ""
        with pytest.raises(grpc.RpcError) as unknown:
            stub.Append(writer_pb2.AppendRequest(session_id=ours, records=[user_record("x")]))
        assert unknown.value.code() is grpc.StatusCode.NOT_FOUND


def test_create_session_without_an_id_picks_one_in_a_shard_the_writer_owns(cluster: StaticCluster) -> None:
    """Every id a writer picks is in one of its shards (each writer, 20 sessions)."""
    for address in cluster.addresses:
        with grpc.insecure_channel(address) as channel:
            stub = stub_of(channel)
            ids = [
                stub.CreateSession(writer_pb2.CreateSessionRequest(), timeout=30).session_id
                for _ in range(20)
            ]
        assert {cluster.owner(session_id) for session_id in ids} == {address}


def test_a_fork_lands_in_a_shard_of_the_writer_that_owns_the_source(cluster: StaticCluster) -> None:
    """Fork is done by the source's owner; the new session's id is in one of that writer's shards,
    its file in that shard's folder, and it takes appends there."""
    _, second = cluster.addresses
    source = id_in_shard(1, SHARDS)
    with grpc.insecure_channel(second) as channel:
        stub = stub_of(channel)
        stub.CreateSession(writer_pb2.CreateSessionRequest(session_id=source), timeout=30)
        stub.Append(
            writer_pb2.AppendRequest(session_id=source, records=[user_record("one"), user_record("two")]),
            timeout=30,
        )
        forks = [stub.Fork(writer_pb2.ForkRequest(session_id=source, at_seq=1), timeout=30) for _ in range(6)]
        for fork in forks:
            assert cluster.owner(fork.session_id) == second
            stub.Append(
                writer_pb2.AppendRequest(session_id=fork.session_id, records=[user_record("after")]),
                timeout=30,
            )
            folder = cluster.data_dir / "shards" / f"{shard_of(fork.session_id, SHARDS):03d}" / "sessions"
            assert len(list(folder.glob(f"*_{fork.session_id}.jsonl"))) == 1


def test_a_keyed_fork_is_made_only_by_the_owner_of_its_keys_shard(cluster: StaticCluster) -> None:
    """A keyed fork's id is fixed by its key: the source's owner makes it when it also owns that
    id's shard, and refuses it (NOT_OWNER, naming the owner) when another writer does."""
    _, second = cluster.addresses
    source = id_in_shard(1, SHARDS)
    keys = {key: session_id_for_key("default", key) for key in (f"thread-{n}" for n in range(64))}
    mine = next(key for key, made in keys.items() if cluster.owner(made) == second)
    theirs = next(key for key, made in keys.items() if cluster.owner(made) != second)
    with grpc.insecure_channel(second) as channel:
        stub = stub_of(channel)
        stub.CreateSession(writer_pb2.CreateSessionRequest(session_id=source), timeout=30)
        stub.Append(writer_pb2.AppendRequest(session_id=source, records=[user_record("one")]), timeout=30)
        made = stub.Fork(writer_pb2.ForkRequest(session_id=source, at_seq=1, session_key=mine), timeout=30)
        assert made.session_id == keys[mine]
        with pytest.raises(grpc.RpcError) as refused:
            stub.Fork(writer_pb2.ForkRequest(session_id=source, at_seq=1, session_key=theirs), timeout=30)
        assert not_owner_of(refused.value)
        folder = cluster.data_dir / "shards" / f"{shard_of(keys[theirs], SHARDS):03d}" / "sessions"
        assert list(folder.glob(f"*_{keys[theirs]}.jsonl")) == []


# -- the SDK ------------------------------------------------------------------------------------


def lines_holding(cluster: StaticCluster, session_id: str, text: str) -> int:
    """How many lines of the session's file hold ``text``."""
    folder = cluster.data_dir / "shards" / f"{shard_of(session_id, SHARDS):03d}" / "sessions"
    (path,) = folder.glob(f"*_{session_id}.jsonl")
    return sum(text in line for line in path.read_text().splitlines())


@pytest.fixture
def reader_of(cluster: StaticCluster) -> Iterator[str]:
    """A reader over the cluster's data root (every shard); its address."""
    service = start_service("reader", cluster.data_dir)
    try:
        yield service.address
    finally:
        service.stop()


def test_the_client_sends_each_session_to_its_shards_owner(cluster: StaticCluster, reader_of: str) -> None:
    """Given both writers (a comma list), the client asks the shard map first and sends every call
    of each session (create, append, stop, resume, fork) to its shard's owner: no NOT_OWNER at all
    over 16 sessions spread across both writers' shards; every session verifies."""
    writers = ",".join(cluster.addresses)
    with RolloutClient(writers, reader_of, retry=TEST_RETRY) as client:
        sessions = [client.create_session(session_id=id_in_shard(shard, SHARDS)) for shard in range(SHARDS)]
        for session in sessions:
            session.append(user(f"hello {session.id}"))
        for session in sessions[:4]:
            session.stop("paused")
            session.resume()
            fork = session.fork(at_seq=1)
            assert cluster.owner(fork.id) == cluster.owner(session.id)
            fork.append(user("on the fork"))
        assert client.core.routing.redirects == 0
        assert client.core.routing.shard_count == SHARDS
        assert all(session.verify().ok for session in sessions)
    for session in sessions:
        assert lines_holding(cluster, session.id, f"hello {session.id}") == 1


def test_a_writer_that_never_answers_first_in_the_list_does_not_stall_the_client(
    cluster: StaticCluster, reader_of: str
) -> None:
    """The first writer given accepts connections and never answers (a paused process). The client
    asks every writer for the map at once and takes the first answer, so its calls, several at
    once on one event loop, reach their owners well within their deadline (all of which the old
    one-after-the-other ask spent on the silent writer): every session is written once, no call
    goes to the silent writer."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        paused = f"127.0.0.1:{silent.getsockname()[1]}"
        writers = ",".join([paused, *cluster.addresses])
        retry = RetryPolicy(deadline=30.0, initial_backoff=0.02, max_backoff=0.5)

        async def agents() -> list[str]:
            async with AsyncRolloutClient(writers, reader_of, retry=retry) as client:

                async def agent(shard: int) -> str:
                    session = await client.create_session(session_id=id_in_shard(shard, SHARDS), root=True)
                    await session.append(user(f"hello {session.id}"))
                    return session.id

                made = await asyncio.gather(*(agent(shard) for shard in range(SHARDS)))
                assert client.routing.shard_count == SHARDS
                assert paused not in {address for address, _ in client.routing.owners.values()}
                return made

        sessions = asyncio.run(agents())
    for session_id in sessions:
        assert lines_holding(cluster, session_id, f"hello {session_id}") == 1


def test_a_client_given_one_writer_follows_redirects_to_the_owner(
    cluster: StaticCluster, reader_of: str
) -> None:
    """Given only the first writer, the client's first call about the second writer's shard is
    redirected (NOT_OWNER names the owner), then it learns the map: create, append, stop, resume
    and fork of a session owned elsewhere all succeed, and a later session goes straight there."""
    first, second = cluster.addresses
    with RolloutClient(first, reader_of, retry=TEST_RETRY) as client:
        session = client.create_session(session_id=id_in_shard(1, SHARDS))
        assert client.core.routing.redirects == 1
        session.append(user("elsewhere"))
        session.stop("paused")
        session.resume()
        fork = session.fork(at_seq=1)
        assert cluster.owner(fork.id) == second
        fork.append(user("forked elsewhere"))
        later = client.create_session(session_id=id_in_shard(3, SHARDS))
        later.append(user("straight there"))
        assert client.core.routing.redirects == 1
        # a session key: the writer derives the id, so the client cannot route it; redirected once
        key = next(
            key for key in map(str, range(100)) if cluster.owner(session_id_for_key("default", key)) == second
        )
        keyed = client.create_session(session_key=key)
        assert keyed.id == session_id_for_key("default", key)
        assert client.core.routing.redirects == 2
        assert session.verify().ok
        assert fork.verify().ok
    assert lines_holding(cluster, session.id, "elsewhere") == 1


def test_an_append_retried_across_an_owner_change_is_answered_not_written_twice(tmp_path: Path) -> None:
    """Exactly once across owners: an Append lands on the shard's owner and its answer is lost;
    the shard moves to another writer (both restarted with a new map, epoch 2; a third writer
    keeps the old map); the client sends the same request (same id) to its old owner, is
    redirected to the new one, which answers it from the request mark in the file: the same
    seqs, nothing written twice. A client given only the stale writer gets there too."""
    cluster = StaticCluster.create(tmp_path, writers=3, shards=SHARDS)
    cluster.start()
    try:
        old, new, stale = cluster.addresses
        shard = cluster.shards_of(old)[0]
        with RolloutClient(",".join(cluster.addresses), retry=TEST_RETRY) as client:
            session = client.create_session(session_id=id_in_shard(shard, SHARDS))
            session.append(user("before"))
            record = user("exactly once")
            pending = PendingAppend(
                session.id, [append_record(record, 0)], [record_lines(record)], session.next_seq or 0
            )
            with grpc.insecure_channel(old) as channel:  # the first attempt, whose answer is lost
                first = stub_of(channel).Append(pending.request(), timeout=30)
            cluster.stop(old, new)
            cluster.move(shard, new)
            cluster.start(old, new)
            redirects = client.core.routing.redirects
            again = client.run(client.core.append(pending))
            assert (list(again.seqs), again.next_seq) == (list(first.seqs), first.next_seq)
            assert client.core.routing.redirects == redirects + 1
            assert client.core.routing.owners[shard] == (new, 2)
            session.append(user("after"))
        with RolloutClient(stale, retry=TEST_RETRY) as late:
            late.session(session.id).append(user("from a client of the stale writer"))
            assert late.core.routing.redirects == 2  # the stale writer, then the old owner
        # Stop, Resume and Fork from clients that know only the stale writer: each redirected twice
        with RolloutClient(stale, retry=TEST_RETRY) as late:
            late.session(session.id).stop("paused")
            assert late.core.routing.redirects == 2
        with RolloutClient(stale, retry=TEST_RETRY) as late:
            late.session(session.id).resume()
            assert late.core.routing.redirects == 2
        with RolloutClient(stale, retry=TEST_RETRY) as late:
            fork = late.session(session.id).fork(at_seq=2)
            assert late.core.routing.redirects == 2
            assert cluster.owner(fork.id) == new  # the source's owner wrote it, in its own shard
            fork.append(user("forked after the move"))
        assert lines_holding(cluster, session.id, "exactly once") == 1
        assert lines_holding(cluster, session.id, "after") == 1
    finally:
        cluster.stop()


def test_a_child_may_name_a_parent_in_another_writers_shard(cluster: StaticCluster, reader_of: str) -> None:
    """A child created on one writer whose parent lives in the other writer's shard: the parent is
    found in its shard's folder, the child's marker is written in the parent's shard (a create-only
    file of its own), and the reader finds the child from the parent."""
    first, second = cluster.addresses
    with RolloutClient(",".join(cluster.addresses), reader_of, retry=TEST_RETRY) as client:
        parent = client.create_session(session_id=id_in_shard(0, SHARDS), root=True)
        with delegation(parent=parent, tool_call_id="call-1"):
            child = client.create_session("helper", session_id=id_in_shard(1, SHARDS))
        assert (cluster.owner(parent.id), cluster.owner(child.id)) == (first, second)
        (link,) = client.find_children(parent.id)
        assert (link.child_session_id, link.delegation_id) == (child.id, "call-1")
        unknown_parent = delegation(parent=id_in_shard(0, SHARDS), tool_call_id="call-2")
        with pytest.raises(InvalidArgumentError, match="parent_session_id"), unknown_parent:
            client.create_session("helper", session_id=id_in_shard(1, SHARDS))


def test_a_writer_bound_to_every_interface_names_no_address() -> None:
    """A wildcard bind cannot be dialled: the embedded writer then advertises none (GetShardMap names
    no owner, and clients keep the address they were given)."""
    assert reachable_address("0.0.0.0:50051") == ""
    assert reachable_address("[::]:50051") == ""
    assert reachable_address("127.0.0.1:50051") == "127.0.0.1:50051"
    assert reachable_address("writer-0.ledger:50051") == "writer-0.ledger:50051"
