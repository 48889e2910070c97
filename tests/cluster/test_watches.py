"""Watches against a real etcd: changes in order, resumed across a member's restart, compaction."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from tests.cluster.etcd import EtcdCluster
from writer_service.coordination import (
    ClusterKeys,
    EtcdClient,
    EventKind,
    KeyEvent,
    OwnerRecord,
    Watch,
    WatchCompactedError,
)
from writer_service.coordination.protocol import etcd_rpc

KEYS = ClusterKeys("test")
OWNER = OwnerRecord("127.0.0.1:50051", "w-1")


async def _next(watch: Watch) -> KeyEvent:
    return await asyncio.wait_for(anext(watch), 60)


def _changes(events: list[KeyEvent]) -> list[tuple[EventKind, str, int]]:
    return [(event.kind, event.key, event.create_revision) for event in events]


def test_a_watch_delivers_puts_and_deletes_in_revision_order(etcd1: EtcdCluster):
    """A watch delivers each put and delete under its prefix once, in revision order, with the owner and epoch."""

    async def scenario():
        async with EtcdClient(etcd1.endpoints) as etcd:
            lease = await etcd.grant_lease(30)
            start = (await etcd.owners(KEYS.shards)).revision + 1
            async with etcd.watch(KEYS.shards, start_revision=start) as watch:
                first = await etcd.try_acquire(KEYS.shard(1), lease, OWNER)
                await etcd.try_acquire(KEYS.writer("w-1"), lease, OWNER)  # outside the prefix
                second = await etcd.try_acquire(KEYS.shard(2), lease, OWNER)
                assert first is not None
                assert second is not None
                await etcd.release(KEYS.shard(1), first)
                events = [await _next(watch) for _ in range(3)]
                assert _changes(events) == [
                    (EventKind.PUT, KEYS.shard(1), first),
                    (EventKind.PUT, KEYS.shard(2), second),
                    (EventKind.DELETE, KEYS.shard(1), first),
                ]
                assert events[0].revision == first
                assert OwnerRecord.decode(events[2].key, events[2].value) == OWNER
                assert events[2].lease_id == lease.id
                assert watch.next_revision == events[2].revision + 1

    asyncio.run(scenario())


def test_a_watch_resumes_after_its_member_restarts(etcd3: EtcdCluster):
    """Killing the watch's member and restarting it loses and repeats no change: the watch resumes at its revision elsewhere."""

    async def scenario():
        async with EtcdClient(etcd3.endpoints) as watcher:
            watched = etcd3.index_of(watcher.endpoint)
            others = ",".join(
                member.endpoint for index, member in enumerate(etcd3.members) if index != watched
            )
            async with EtcdClient(others) as writer:
                lease = await writer.grant_lease(30)
                start = (await writer.owners(KEYS.shards)).revision + 1
                async with watcher.watch(KEYS.shards, start_revision=start) as watch:
                    epochs = [await writer.try_acquire(KEYS.shard(0), lease, OWNER)]
                    events = [await _next(watch)]
                    await asyncio.to_thread(etcd3.kill, watched)
                    epochs.append(await writer.try_acquire(KEYS.shard(1), lease, OWNER))
                    events.append(await _next(watch))  # from another member
                    epochs.append(await writer.try_acquire(KEYS.shard(2), lease, OWNER))
                    await asyncio.to_thread(etcd3.restart, watched)
                    epochs.append(await writer.try_acquire(KEYS.shard(3), lease, OWNER))
                    events += [await _next(watch) for _ in range(2)]
                    assert _changes(events) == [
                        (EventKind.PUT, KEYS.shard(shard), epoch) for shard, epoch in enumerate(epochs)
                    ]

    asyncio.run(scenario())


def test_a_watch_resumes_after_the_only_member_restarts(etcd1: EtcdCluster):
    """A watch on a one-member cluster waits out the member's restart and goes on from the next revision."""

    async def scenario():
        async with EtcdClient(etcd1.endpoints) as etcd:
            lease = await etcd.grant_lease(60)
            first = await etcd.try_acquire(KEYS.shard(0), lease, OWNER)
            async with etcd.watch(KEYS.shards, start_revision=first) as watch:
                assert (await _next(watch)).create_revision == first
                await asyncio.to_thread(etcd1.restart, 0)
                second = await etcd.try_acquire(KEYS.shard(1), lease, OWNER)
                event = await _next(watch)
                assert (event.key, event.create_revision) == (KEYS.shard(1), second)
                assert watch.next_revision == event.revision + 1

    asyncio.run(scenario())


def test_a_watch_from_a_compacted_revision_says_so(etcd1: EtcdCluster):
    """A watch that must start at a compacted revision raises WatchCompactedError naming the compaction."""

    async def scenario():
        async with EtcdClient(etcd1.endpoints) as etcd:
            lease = await etcd.grant_lease(30)
            first = await etcd.try_acquire(KEYS.shard(0), lease, OWNER)
            assert first is not None
            await etcd.release(KEYS.shard(0), first)
            latest = await etcd.try_acquire(KEYS.shard(0), lease, OWNER)
            async with grpc.aio.insecure_channel(etcd1.members[0].endpoint) as channel:
                await etcd_rpc.KVStub(channel).Compact(
                    etcd_rpc.CompactionRequest(revision=latest, physical=True)
                )
            with pytest.raises(WatchCompactedError, match=f"compacted its history up to revision {latest}"):
                async with etcd.watch(KEYS.shards, start_revision=first) as watch:
                    await _next(watch)

    asyncio.run(scenario())


def test_a_watch_moves_on_from_a_member_that_stopped_answering(etcd3: EtcdCluster):
    """A watch whose member is stopped (SIGSTOP) notices by its pings and resumes on another member, missing nothing."""

    async def scenario():
        async with EtcdClient(etcd3.endpoints) as watcher:
            watched = etcd3.index_of(watcher.endpoint)
            others = ",".join(
                member.endpoint for index, member in enumerate(etcd3.members) if index != watched
            )
            async with EtcdClient(others) as writer:
                lease = await writer.grant_lease(60)
                start = (await writer.owners(KEYS.shards)).revision + 1
                async with watcher.watch(KEYS.shards, start_revision=start) as watch:
                    first = await writer.try_acquire(KEYS.shard(0), lease, OWNER)
                    assert (await _next(watch)).create_revision == first
                    etcd3.pause(watched)
                    try:
                        second = await writer.try_acquire(KEYS.shard(1), lease, OWNER)
                        event = await _next(watch)
                        assert (event.key, event.create_revision) == (KEYS.shard(1), second)
                        assert etcd3.index_of(watcher.endpoint) != watched
                    finally:
                        etcd3.resume(watched)

    asyncio.run(scenario())
