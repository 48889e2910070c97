"""Leases against a real etcd: keepalive on one stream, the deadline, lapse before etcd ends it."""

from __future__ import annotations

import asyncio
import itertools
import math
import time

import grpc

from tests.cluster.etcd import EtcdCluster
from tests.cluster.proxy import TcpRelay
from tests.cluster.waits import wait_until
from writer_service.coordination import ClusterKeys, EtcdClient, Lease, LeaseState, OwnerRecord
from writer_service.coordination.protocol import etcd_rpc

OWNER = OwnerRecord("127.0.0.1:50051", "w-1")
KEY = ClusterKeys("test").shard(1)


def _no_other_task() -> bool:
    return asyncio.all_tasks() == {asyncio.current_task()}


async def _held(etcd: EtcdClient, key: str) -> bool:
    return key in (await etcd.owners(key)).owners


def test_keepalive_keeps_a_lease_alive_past_several_ttls(etcd1: EtcdCluster):
    """A lease kept alive stays alive (and its key stays) for over three TTLs, never lost."""

    async def scenario():
        lost: list[Lease] = []
        async with EtcdClient(etcd1.endpoints) as etcd:
            lease = await etcd.grant_lease(2, on_lost=lost.append)
            epoch = await etcd.try_acquire(KEY, lease, OWNER)
            until = time.monotonic() + 3.5 * lease.ttl
            await wait_until(
                lambda: time.monotonic() > until and lease.renewals >= 8, "three TTLs of keepalives"
            )
            assert lease.alive()
            assert lease.state is LeaseState.ALIVE
            assert lost == []
            assert (await etcd.owners(KEY)).owners[KEY].epoch == epoch
            assert (await etcd.remaining_ttl(lease.id) or 0) >= 1

    asyncio.run(scenario())


def test_deadline_moves_forward_with_each_answered_keepalive(etcd1: EtcdCluster):
    """Each answered keepalive moves the deadline later, never past send time + TTL - margin."""

    async def scenario():
        async with EtcdClient(etcd1.endpoints) as etcd:
            lease = await etcd.grant_lease(2)
            margin = etcd.drift_bound * lease.ttl + etcd.deadline_slack
            deadlines = [lease.deadline()]
            while len(deadlines) < 6:
                seen = lease.renewals
                await wait_until(lambda: lease.renewals > seen, "a keepalive answered")  # noqa: B023
                deadlines.append(lease.deadline())
                assert deadlines[-1] <= time.monotonic() + lease.ttl - margin
            assert all(later > earlier for earlier, later in itertools.pairwise(deadlines))
            assert lease.alive()

    asyncio.run(scenario())


def test_deadline_is_never_later_than_etcds_expiry(etcd1: EtcdCluster):
    """The deadline falls before etcd ends the lease even when answers arrive a second late (it counts from the send)."""
    # The answers come a second after etcd renewed; once the keepalives stop reaching etcd,
    # the last answer arrives with etcd's expiry already a second nearer than its TTL.

    async def scenario():
        relay = TcpRelay(etcd1.members[0].client_port, reply_delay=1.0)
        await relay.start()
        try:
            async with (
                EtcdClient(relay.endpoint, deadline_slack=0.3) as slow,
                EtcdClient(etcd1.endpoints) as direct,
            ):
                lease = await slow.grant_lease(3)
                await slow.try_acquire(KEY, lease, OWNER)
                await wait_until(lambda: lease.renewals >= 2, "two keepalives answered")
                relay.hold(replies=False)  # no keepalive reaches etcd now; answers still come
                # etcd answers floor(expiry - t) for some t after the question was sent: while
                # that is >= 1, expiry >= sent + answer. The best of many asks is close to it.
                expiry_at_least = -math.inf
                while True:
                    sent = time.monotonic()
                    left = await direct.remaining_ttl(lease.id)
                    if left is None:
                        break
                    if left >= 1:
                        expiry_at_least = max(expiry_at_least, sent + left)
                gone_by = time.monotonic()
                assert not await _held(direct, KEY)
                assert lease.deadline() <= expiry_at_least < gone_by
                assert not lease.alive()
        finally:
            await relay.close()

    asyncio.run(scenario())


def test_lease_lapses_before_etcd_deletes_its_owner_key(etcd1: EtcdCluster):
    """Cut off from etcd, the lease stops being alive while its owner key still exists; etcd deletes the key after."""

    async def scenario():
        relay = TcpRelay(etcd1.members[0].client_port)
        await relay.start()
        lost: list[Lease] = []
        try:
            async with (
                EtcdClient(relay.endpoint, deadline_slack=1.0) as cut_off,
                EtcdClient(etcd1.endpoints) as direct,
            ):
                lease = await cut_off.grant_lease(3, on_lost=lost.append)
                epoch = await cut_off.try_acquire(KEY, lease, OWNER)
                await wait_until(lambda: lease.renewals >= 1, "a keepalive answered")
                relay.hold()
                await asyncio.wait_for(lease.wait_lost(), 60)
                owners = (await direct.owners(KEY)).owners
                assert owners.get(KEY) is not None, "etcd deleted the owner key before the lease lapsed here"
                assert owners[KEY].epoch == epoch
                assert not lease.alive()
                assert lease.state is LeaseState.LAPSED
                assert lost == [lease]
                await wait_until(
                    lambda: _not_held(direct, KEY), "etcd deleting the key of the lease it ended"
                )
        finally:
            await relay.close()

    asyncio.run(scenario())


async def _not_held(etcd: EtcdClient, key: str) -> bool:
    return not await _held(etcd, key)


def test_a_lease_etcd_ended_is_gone_and_reported(etcd1: EtcdCluster):
    """A lease revoked behind our back is reported lost and GONE at its next keepalive, for good."""

    async def scenario():
        lost: list[Lease] = []
        async with EtcdClient(etcd1.endpoints) as etcd:
            lease = await etcd.grant_lease(2, on_lost=lost.append)
            async with grpc.aio.insecure_channel(etcd1.members[0].endpoint) as channel:
                await etcd_rpc.LeaseStub(channel).LeaseRevoke(etcd_rpc.LeaseRevokeRequest(ID=lease.id))
            await asyncio.wait_for(lease.wait_lost(), 60)
            assert lease.state is LeaseState.GONE
            assert not lease.alive()
            assert lost == [lease]

    asyncio.run(scenario())


def test_release_revokes_the_lease_and_its_keys(etcd1: EtcdCluster):
    """Releasing a lease revokes it: etcd deletes its keys at once, and it is GONE without a loss report."""

    async def scenario():
        lost: list[Lease] = []
        async with EtcdClient(etcd1.endpoints) as etcd:
            lease = await etcd.grant_lease(60, on_lost=lost.append)
            await etcd.try_acquire(KEY, lease, OWNER)
            await lease.release()
            assert lease.state is LeaseState.GONE
            assert not lease.alive()
            assert not await _held(etcd, KEY)
            assert await etcd.remaining_ttl(lease.id) is None
            assert lost == []

    asyncio.run(scenario())


def test_close_stops_every_task_and_revokes_leases(etcd1: EtcdCluster):
    """Closing the client leaves no task running and revokes its leases (or leaves them to their TTL if asked)."""

    async def scenario():
        async with EtcdClient(etcd1.endpoints) as observer:
            etcd = EtcdClient(etcd1.endpoints)
            kept = EtcdClient(etcd1.endpoints)
            revoked, left = await etcd.grant_lease(60), await kept.grant_lease(60)
            epoch = await etcd.try_acquire(KEY, revoked, OWNER)
            assert epoch is not None
            watch = etcd.watch(KEY, start_revision=epoch)
            assert (await asyncio.wait_for(anext(watch), 60)).revision == epoch
            await etcd.close()
            await kept.close(revoke_leases=False)
            await wait_until(_no_other_task, "every other task ended")  # gRPC's own end shortly after a call
            assert await observer.remaining_ttl(revoked.id) is None
            assert (await observer.remaining_ttl(left.id) or 0) >= 50
            assert revoked.state is LeaseState.GONE
            assert left.state is LeaseState.GONE

    asyncio.run(scenario())


def test_abandon_ends_a_keepalive_stream_that_is_answering(etcd1: EtcdCluster):
    """Abandoning a lease whose keepalives are answered back to back ends its keepalive task every time."""

    async def scenario():
        async with EtcdClient(etcd1.endpoints) as etcd:
            for _ in range(30):
                lease = await etcd.grant_lease(60, interval=0.0)
                seen = lease.renewals
                await wait_until(lambda: lease.renewals >= seen + 50, "keepalives answered")  # noqa: B023
                await asyncio.wait_for(lease.abandon(), 30)
                assert lease.state is LeaseState.GONE
                renewals = lease.renewals
                await asyncio.sleep(0)
                assert lease.renewals == renewals
            await wait_until(_no_other_task, "every other task ended")  # gRPC's own end shortly after a call

    asyncio.run(scenario())
