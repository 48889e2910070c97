"""Routing across the writers of a cluster on a real etcd (docs/cluster.md §4): NOT_OWNER and
GetShardMap name the owners the owner keys in etcd advertise, and the SDK given one writer's
address is sent on to the owner of a session's shard."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import grpc
import pytest

from rollout.v1 import writer_pb2
from rollout_client import RetryPolicy, RolloutClient, delegation, user
from shared.reasons import OWNER_ADDRESS, OWNER_EPOCH
from shared.shards import shard_of
from tests.client.conftest import TEST_RETRY
from tests.cluster.cluster_writers import not_owner_metadata
from tests.cluster.etcd import EtcdCluster
from tests.cluster.test_writers import SHARDS, Writer, balanced, id_in_shard, owners, start_writer
from tests.cluster.waits import wait_until
from writer_service.coordination import EtcdClient


def not_owner_info(error: grpc.RpcError) -> dict[str, str]:
    """The NOT_OWNER ErrorInfo metadata of an UNAVAILABLE status (AssertionError otherwise)."""
    info = not_owner_metadata(error)
    assert info is not None, f"no UNAVAILABLE NOT_OWNER in {error}"
    return info


async def shard_map(writer: Writer) -> dict[int, tuple[str, int]]:
    answer = await writer.stub.GetShardMap(writer_pb2.GetShardMapRequest(), timeout=30)
    assert answer.shard_count == SHARDS
    return {owner.shard: (owner.address, owner.epoch) for owner in answer.owners}


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    root.mkdir()
    return root


def test_a_client_given_one_writer_is_sent_to_the_owner_etcd_names(
    etcd1: EtcdCluster, data_dir: Path, tmp_path: Path
) -> None:
    """Two writers split the shards in etcd. Each one's GetShardMap lists the owners etcd holds;
    the writer not owning a shard answers NOT_OWNER naming the owner and its epoch; a client
    given only that writer's address is redirected once, then writes, stops, resumes and forks
    at the owner, and a child it creates there names a parent of the other writer's shard.
    CreateSession without an id on either writer lands in one of its own shards."""
    one = Writer(start_writer(data_dir, tmp_path / "one.log", etcd1.endpoints))
    two = Writer(start_writer(data_dir, tmp_path / "two.log", etcd1.endpoints))
    held: dict[int, tuple[str, int]] = {}

    async def settle() -> None:
        async with EtcdClient(etcd1.endpoints) as etcd:

            async def split() -> bool:
                nonlocal held
                held = await owners(etcd)
                if not balanced(held, [one.address, two.address]):
                    return False
                return await shard_map(one) == held and await shard_map(two) == held

            await wait_until(split, "both writers serve the shard map etcd holds")

        shard = next(s for s, (address, _) in held.items() if address == two.address)
        with pytest.raises(grpc.RpcError) as refused:
            await one.create(id_in_shard(shard))
        info = not_owner_info(refused.value)
        assert (info[OWNER_ADDRESS], info[OWNER_EPOCH]) == (two.address, str(held[shard][1]))
        for writer in (one, two):
            for _ in range(10):
                made = await writer.stub.CreateSession(writer_pb2.CreateSessionRequest(), timeout=30)
                assert held[shard_of(made.session_id, SHARDS)][0] == writer.address
        await one.close()
        await two.close()

    asyncio.run(settle())
    theirs = next(s for s, (address, _) in held.items() if address == two.address)
    ours = next(s for s, (address, _) in held.items() if address == one.address)
    with RolloutClient(one.address, retry=TEST_RETRY) as client:
        session = client.create_session(session_id=id_in_shard(theirs), root=True)
        assert client.core.routing.redirects == 1
        assert client.core.routing.owners[theirs] == held[theirs]
        session.append(user("at the owner"))
        session.stop("paused")
        session.resume()
        fork = session.fork(at_seq=1)
        assert held[shard_of(fork.id, SHARDS)][0] == two.address
        with delegation(parent=session, tool_call_id="call-1"):
            child = client.create_session("helper", session_id=id_in_shard(ours))
        child.append(user("a child in the other writer's shard"))
    (path,) = data_dir.glob(f"shards/*/sessions/*{session.id}.jsonl")
    assert path.read_text().count("at the owner") == 1
    assert one.process.stop() == 0
    assert two.process.stop() == 0


def test_clients_follow_a_dead_owners_shards_to_the_writer_that_takes_them(
    etcd1: EtcdCluster, data_dir: Path, tmp_path: Path
) -> None:
    """The owner of a session's shard is killed (SIGKILL). A client that had reached it, and one
    made afterwards (which never reached it), each append to the session once the other writer
    has taken the shard: a call that cannot connect to the owner its map names asks for the map
    again within its deadline, rather than waiting for the dead writer (or failing at once)."""
    one = Writer(start_writer(data_dir, tmp_path / "one.log", etcd1.endpoints, "--lease-ttl", "2"))
    two = Writer(start_writer(data_dir, tmp_path / "two.log", etcd1.endpoints, "--lease-ttl", "2"))
    held: dict[int, tuple[str, int]] = {}

    async def split() -> bool:
        nonlocal held
        async with EtcdClient(etcd1.endpoints) as etcd:
            held = await owners(etcd)
        return balanced(held, [one.address, two.address]) and await shard_map(two) == held

    asyncio.run(wait_until(split, "both writers serve the shard map etcd holds"))
    shard = next(s for s, (address, _) in held.items() if address == one.address)
    retry = RetryPolicy(deadline=120.0, max_backoff=0.5)
    both = f"{one.address},{two.address}"
    with RolloutClient(both, retry=retry) as client:
        session = client.create_session(session_id=id_in_shard(shard), root=True)
        assert session.append(user("before")).seqs == (1,)
        one.process.stop(signal.SIGKILL)
        assert session.append(user("after")).seqs == (2,)
        assert client.core.routing.owners[shard][0] == two.address
    with RolloutClient(both, retry=retry) as fresh:
        assert fresh.session(session.id).append(user("fresh")).seqs == (3,)
    (path,) = data_dir.glob(f"shards/*/sessions/*{session.id}.jsonl")
    assert [path.read_text().count(text) for text in ("before", "after", "fresh")] == [1, 1, 1]
    assert two.process.stop() == 0
