"""Ownership keys and the cluster record against a real etcd."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from tests.cluster.etcd import EtcdCluster
from tests.cluster.waits import wait_until
from writer_service.coordination import (
    MAX_TXN_KEYS,
    ClusterKeys,
    EtcdClient,
    LeaseGoneError,
    OwnerRecord,
    ShardCountMismatchError,
)
from writer_service.coordination.protocol import etcd_rpc

KEYS = ClusterKeys("test")
FIRST = OwnerRecord("127.0.0.1:50051", "w-1")
SECOND = OwnerRecord("127.0.0.1:50052", "w-2")


def test_one_of_two_contenders_gets_each_key(etcd1: EtcdCluster):
    """Two writers racing for the same keys: each key goes to exactly one, the other gets None."""

    async def scenario():
        async with EtcdClient(etcd1.endpoints) as one, EtcdClient(etcd1.endpoints) as two:
            lease_one, lease_two = await one.grant_lease(30), await two.grant_lease(30)
            for shard in range(20):
                key = KEYS.shard(shard)
                got = await asyncio.gather(
                    one.try_acquire(key, lease_one, FIRST), two.try_acquire(key, lease_two, SECOND)
                )
                assert sorted(epoch is None for epoch in got) == [False, True], got
                winner = FIRST if got[0] is not None else SECOND
                held = (await one.owners(key)).owners[key]
                assert held.owner == winner
                assert held.epoch == next(epoch for epoch in got if epoch is not None)
                assert held.lease_id == (lease_one.id if winner == FIRST else lease_two.id)

    asyncio.run(scenario())


def test_many_keys_are_acquired_in_one_transaction_all_or_none(etcd1: EtcdCluster):
    """try_acquire_all: every key or none; a set with one key held by another changes nothing; the
    same set asked again by its holder answers the same epochs (a retried transaction that had
    landed); MAX_TXN_KEYS keys go in one transaction (etcd's default --max-txn-ops), one more is
    refused before anything is sent."""

    async def scenario():
        async with EtcdClient(etcd1.endpoints) as one, EtcdClient(etcd1.endpoints) as two:
            lease_one, lease_two = await one.grant_lease(30), await two.grant_lease(30)
            assert await two.try_acquire(KEYS.shard(5), lease_two, SECOND) is not None
            contested = [KEYS.shard(shard) for shard in range(10)]
            assert await one.try_acquire_all(contested, lease_one, FIRST) is None
            assert set((await one.owners(KEYS.shards)).owners) == {KEYS.shard(5)}
            free = [KEYS.shard(shard) for shard in range(10, 10 + MAX_TXN_KEYS)]
            epochs = await one.try_acquire_all(free, lease_one, FIRST)
            assert epochs is not None
            assert set(epochs) == set(free)
            held = (await one.owners(KEYS.shards)).owners
            assert all(held[key].epoch == epochs[key] and held[key].owner == FIRST for key in free)
            assert await one.try_acquire_all(free, lease_one, FIRST) == epochs
            assert await two.try_acquire_all(free[:3], lease_two, SECOND) is None
            with pytest.raises(ValueError, match="distinct keys"):
                await one.try_acquire_all(
                    [KEYS.shard(shard) for shard in range(MAX_TXN_KEYS + 1)], lease_one, FIRST
                )
            with pytest.raises(ValueError, match="distinct keys"):
                await one.try_acquire_all([KEYS.shard(1), KEYS.shard(1)], lease_one, FIRST)

    asyncio.run(scenario())


def test_a_later_owner_gets_a_larger_epoch_once_the_first_lease_ends(etcd1: EtcdCluster):
    """After the first owner's lease ends by its TTL, the second acquires the key with a larger epoch."""

    async def scenario():
        async with EtcdClient(etcd1.endpoints) as one, EtcdClient(etcd1.endpoints) as two:
            first_lease, second_lease = await one.grant_lease(2), await two.grant_lease(30)
            key = KEYS.shard(7)
            first = await one.try_acquire(key, first_lease, FIRST)
            assert first is not None
            for shard in range(3):  # other changes move the store's revision on meanwhile
                await two.try_acquire(KEYS.shard(100 + shard), second_lease, SECOND)
            assert await two.try_acquire(key, second_lease, SECOND) is None
            await first_lease.abandon()  # as a crashed owner: etcd ends the lease by its TTL
            second = None

            async def acquired() -> bool:
                nonlocal second
                second = await two.try_acquire(key, second_lease, SECOND)
                return second is not None

            await wait_until(acquired, "the key free once the first lease ended")
            assert second is not None
            assert second > first
            assert (await two.owners(key)).owners[key].epoch == second

    asyncio.run(scenario())


def test_release_deletes_only_its_own_epoch(etcd1: EtcdCluster):
    """Releasing at a stale epoch leaves the new owner's key; releasing at the current epoch deletes it."""

    async def scenario():
        async with EtcdClient(etcd1.endpoints) as etcd:
            key = KEYS.shard(3)
            old_lease = await etcd.grant_lease(30)
            old = await etcd.try_acquire(key, old_lease, FIRST)
            assert old is not None
            await old_lease.release()
            new_lease = await etcd.grant_lease(30)
            new = await etcd.try_acquire(key, new_lease, SECOND)
            assert new is not None
            assert new > old
            assert await etcd.release(key, old) is False
            assert (await etcd.owners(key)).owners[key].epoch == new
            assert await etcd.release(key, new) is True
            assert key not in (await etcd.owners(key)).owners
            assert await etcd.release(key, new) is False

    asyncio.run(scenario())


def test_acquiring_a_key_already_held_by_the_same_lease_and_owner_returns_its_epoch(etcd1: EtcdCluster):
    """A retried acquisition that had landed returns the key's epoch; another owner record under the lease gets None."""

    async def scenario():
        async with EtcdClient(etcd1.endpoints) as etcd:
            lease = await etcd.grant_lease(30)
            key = KEYS.shard(4)
            epoch = await etcd.try_acquire(key, lease, FIRST)
            assert epoch is not None
            assert await etcd.try_acquire(key, lease, FIRST) == epoch
            assert await etcd.try_acquire(key, lease, SECOND) is None

    asyncio.run(scenario())


def test_owners_lists_every_key_under_a_prefix_with_its_epoch(etcd1: EtcdCluster):
    """owners() returns each held key under the prefix with owner, epoch and lease, and nothing outside it."""

    async def scenario():
        async with EtcdClient(etcd1.endpoints) as etcd:
            lease = await etcd.grant_lease(30)
            epochs = {
                KEYS.shard(shard): await etcd.try_acquire(KEYS.shard(shard), lease, FIRST)
                for shard in (0, 5, 9)
            }
            await etcd.try_acquire(KEYS.writer("w-1"), lease, FIRST)
            await etcd.try_acquire(ClusterKeys("other").shard(0), lease, FIRST)
            snapshot = await etcd.owners(KEYS.shards)
            assert {key: held.epoch for key, held in snapshot.owners.items()} == epochs
            assert all(held.owner == FIRST and held.lease_id == lease.id for held in snapshot.owners.values())
            assert snapshot.revision >= max(epoch or 0 for epoch in epochs.values())

    asyncio.run(scenario())


def test_a_gone_lease_cannot_acquire(etcd1: EtcdCluster):
    """Acquiring under a released lease, or one etcd revoked behind our back, raises LeaseGoneError and writes nothing."""

    async def scenario():
        async with EtcdClient(etcd1.endpoints) as etcd:
            released = await etcd.grant_lease(30)
            await released.release()
            with pytest.raises(LeaseGoneError):
                await etcd.try_acquire(KEYS.shard(1), released, FIRST)
            revoked = await etcd.grant_lease(30)
            async with grpc.aio.insecure_channel(etcd1.members[0].endpoint) as channel:
                await etcd_rpc.LeaseStub(channel).LeaseRevoke(etcd_rpc.LeaseRevokeRequest(ID=revoked.id))
            with pytest.raises(LeaseGoneError, match=f"{revoked.id:x}"):
                await etcd.try_acquire(KEYS.shard(1), revoked, FIRST)
            assert (await etcd.owners(KEYS.shards)).owners == {}

    asyncio.run(scenario())


def test_the_cluster_record_is_stored_once(etcd1: EtcdCluster):
    """The first writer records the shard count; later ones get it back, and another count is refused."""

    async def scenario():
        async with EtcdClient(etcd1.endpoints) as one, EtcdClient(etcd1.endpoints) as two:
            first = await asyncio.gather(one.ensure_cluster("prod", 256), two.ensure_cluster("prod", 256))
            assert first == [256, 256]
            with pytest.raises(ShardCountMismatchError, match="created with 256 shards, not 128") as refused:
                await two.ensure_cluster("prod", 128)
            assert (refused.value.stored, refused.value.asked) == (256, 128)
            assert await one.ensure_cluster("staging", 8) == 8
            with pytest.raises(ValueError, match="1 to 65536 shards"):
                await one.ensure_cluster("prod", 0)

    asyncio.run(scenario())
