"""Rotation over the members of a three-member etcd: one member down, a silent member, no quorum."""

from __future__ import annotations

import asyncio

import pytest

from tests.cluster.etcd import EtcdCluster
from tests.cluster.waits import wait_until
from writer_service.coordination import (
    ClusterKeys,
    EtcdClient,
    EtcdUnavailableError,
    Lease,
    LeaseState,
    OwnerRecord,
)

KEYS = ClusterKeys("test")
OWNER = OwnerRecord("127.0.0.1:50051", "w-1")


def test_with_one_member_killed_grants_keepalives_and_transactions_go_on(etcd3: EtcdCluster):
    """Killing the member in use moves every request to another: grants, keepalives and transactions go on."""

    async def scenario():
        lost: list[Lease] = []
        async with EtcdClient(etcd3.endpoints) as etcd:
            lease = await etcd.grant_lease(6, on_lost=lost.append)
            first = await etcd.try_acquire(KEYS.shard(0), lease, OWNER)
            killed = etcd3.index_of(etcd.endpoint)
            await asyncio.to_thread(etcd3.kill, killed)
            renewals = lease.renewals
            second_lease = await etcd.grant_lease(6)
            second = await etcd.try_acquire(KEYS.shard(1), second_lease, OWNER)
            await wait_until(lambda: lease.renewals >= renewals + 3, "keepalives answered by another member")
            assert etcd3.index_of(etcd.endpoint) != killed
            assert second is not None
            assert first is not None
            assert second > first
            assert lease.alive()
            assert second_lease.alive()
            assert lost == []
            assert {held.epoch for held in (await etcd.owners(KEYS.shards)).owners.values()} == {
                first,
                second,
            }

    asyncio.run(scenario())


def test_a_request_moves_on_from_a_member_that_stopped_answering(etcd3: EtcdCluster):
    """A stopped (SIGSTOP) member holds a request no longer than one attempt: it is answered by another member."""

    async def scenario():
        async with EtcdClient(etcd3.endpoints, attempt_timeout=1.0, request_timeout=60.0) as etcd:
            lease = await etcd.grant_lease(6)
            stopped = etcd3.index_of(etcd.endpoint)
            etcd3.pause(stopped)
            try:
                renewals = lease.renewals
                epoch = await etcd.try_acquire(KEYS.shard(0), lease, OWNER)
                assert epoch is not None
                assert etcd3.index_of(etcd.endpoint) != stopped
                await wait_until(
                    lambda: lease.renewals >= renewals + 2, "keepalives answered by another member"
                )
                assert (await etcd.owners(KEYS.shards)).owners[KEYS.shard(0)].epoch == epoch
            finally:
                etcd3.resume(stopped)

    asyncio.run(scenario())


def test_without_quorum_the_lease_lapses_and_comes_back_with_quorum(etcd3: EtcdCluster):
    """With two of three members killed keepalives fail and the lease lapses; once quorum returns it is alive again, its key kept."""

    async def scenario():
        lost: list[Lease] = []
        async with EtcdClient(etcd3.endpoints) as etcd:
            lease = await etcd.grant_lease(3, on_lost=lost.append)
            epoch = await etcd.try_acquire(KEYS.shard(0), lease, OWNER)
            in_use = etcd3.index_of(etcd.endpoint)
            killed = [(in_use + 1) % 3, in_use]
            for index in killed:
                await asyncio.to_thread(etcd3.kill, index)
            await asyncio.wait_for(lease.wait_lost(), 60)
            assert not lease.alive()
            assert lease.state is LeaseState.LAPSED
            assert lost == [lease]
            with pytest.raises(EtcdUnavailableError, match="no etcd member answered"):
                await etcd.try_acquire(KEYS.shard(1), lease, OWNER, timeout=3)
            await asyncio.to_thread(etcd3.restart, killed[0])
            await wait_until(lease.alive, "the lease kept alive again once quorum returned")
            assert lease.state is LeaseState.ALIVE
            assert (await etcd.owners(KEYS.shards)).owners[KEYS.shard(0)].epoch == epoch

    asyncio.run(scenario())
