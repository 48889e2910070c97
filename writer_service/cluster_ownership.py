"""A writer's shards in a cluster: owned through leases in etcd, fenced by the lease deadline,
balanced across the cluster's writers (docs/cluster.md §2).

:class:`EtcdOwnership` implements writer_service.ownership's ServedOwnership over the
coordination layer (writer_service.coordination: the only code here that speaks to etcd):

* **joining**: the cluster record's shard count must equal the data root's (else the writer
  refuses to start); a lease of ``lease_ttl`` seconds is granted and kept alive on one stream;
  the writer's presence key is put under it;
* **taking shards**: one transaction creates the keys of several free shards under the lease
  if none of them exists (all or none); a key's create revision is its shard's epoch. The ledger
  indexes each shard afresh from its folder (:meth:`ShardKeeper.take_shard`), the shards of a
  transaction concurrently, before :meth:`EtcdOwnership.owns` answers its epoch;
* **fencing**: :meth:`~EtcdOwnership.owns` answers only while ``time.monotonic()`` is before
  the lease's deadline (the send time of its last answered keepalive plus the TTL, minus the
  drift margin: writer_service.coordination.leases), and :meth:`~EtcdOwnership.may_acknowledge`
  only for a batch durable before it. Once the lease is lost (its deadline passed unanswered,
  or etcd ended it) every shard is dropped at once; the lease is given up (revoked when etcd
  answers) and shards are taken again only under a new lease, by new transactions: new epochs;
* **balancing**: every change under the cluster's prefix (and every third of a TTL) the writer
  reads the writers and owners (the owners of other writers' shards also follow each watched
  change) and aims at ``ceil(N / writers)`` shards (``floor`` while
  another writer holds fewer than ``floor``: a newcomer gets its share), taking free shards
  and releasing its surplus. A release first stops new writes (``owns`` answers None), lets
  the shard's in-flight batches finish (they may still be acknowledged under the deadline),
  then deletes the key at its epoch;
* **draining** (SIGTERM: :meth:`~EtcdOwnership.stop`; ``rollout cluster drain``: a drain key
  for this writer): every shard is released so, then the lease is revoked.

Until each epoch writes its own segment (docs/cluster.md §3), two owners of a shard in
sequence append to the same session files; only the lease holder acknowledges.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import re
import socket
import time
from collections import Counter
from dataclasses import dataclass, field

from writer_service import metrics
from writer_service.coordination import (
    MAX_TXN_KEYS,
    ClusterKeys,
    ClusterRecord,
    CoordinationError,
    EtcdClient,
    EventKind,
    KeyEvent,
    Lease,
    LeaseState,
    OwnerRecord,
    OwnershipSnapshot,
    RecordFormatError,
    ShardCountMismatchError,
)
from writer_service.ownership import OwnershipStartError, ShardKeeper, SharedRootLock

log = logging.getLogger(__name__)

#: Default seconds of a writer's lease (``--lease-ttl``).
DEFAULT_LEASE_TTL = 10
#: Longest pause (seconds) between two attempts to get a lease while etcd does not answer.
RETRY_PAUSE_MAX = 2.0
#: Seconds a stopping writer gives etcd to take its releases before it leaves them to its TTL.
STOP_RELEASE_TIMEOUT = 5.0
#: Transactions one look at the cluster tries when taking free shards (each refused one means
#: another writer took some of them first; the next look takes the rest).
TAKE_ATTEMPTS = 4


def new_writer_id() -> str:
    """A writer id unique to this process: ``<host>-<pid>-<6 hex>`` (a valid etcd key name)."""
    host = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname())[:40]
    if not host or not host[0].isalnum():
        host = f"w{host}"
    return f"{host}-{os.getpid()}-{os.urandom(3).hex()}"


@dataclass(frozen=True)
class ClusterSettings:
    """How a writer joins a cluster (``serve-writer --etcd ... --cluster ...``).

    ``etcd``: ``HOST:PORT[,...]``; ``cluster``: its name (1-63 of ``[A-Za-z0-9._-]``);
    ``lease_ttl``: seconds (>= 1); ``advertise``: the address clients reach this writer at
    (None: the bound address); ``writer_id``: unique per process.
    """

    etcd: str
    cluster: str
    lease_ttl: int = DEFAULT_LEASE_TTL
    advertise: str | None = None
    writer_id: str = field(default_factory=new_writer_id)


def shard_share(shards: int, held: dict[str, int], me: str) -> int:
    """How many of ``shards`` writer ``me`` aims to own, ``held`` mapping every present writer
    (``me`` included) to the shards it owns: ``ceil(shards / writers)``, or ``floor`` while
    another writer holds fewer than ``floor`` (so that a writer that joins gets its share)."""
    writers = len(held.keys() | {me})
    low, high = shards // writers, -(-shards // writers)
    starved = any(count < low for writer, count in held.items() if writer != me)
    return low if starved else high


def _first_choice(writer_id: str, shards: int) -> int:
    """Where ``writer_id`` starts looking for free shards (spreads contenders over the ring)."""
    return int.from_bytes(hashlib.blake2b(writer_id.encode(), digest_size=8).digest(), "big") % shards


class EtcdOwnership:
    """The shards this writer owns in cluster ``settings.cluster`` (module docstring).

    ``shard_count``: the data root's (shared.shards); the cluster record must hold the same.
    ``root_lock``: the data root's lock held shared, released by :meth:`close`.
    ``owns``, ``may_acknowledge`` and ``owner_of`` answer from memory, from any thread.
    """

    def __init__(
        self, settings: ClusterSettings, shard_count: int, root_lock: SharedRootLock | None = None
    ) -> None:
        if settings.lease_ttl < 1:
            raise ValueError(f"a lease TTL is a whole number of seconds >= 1, not {settings.lease_ttl}")
        self.settings = settings
        self.shard_count = shard_count
        self._root_lock = root_lock
        self.keys = ClusterKeys(settings.cluster)
        self.writer_id = settings.writer_id
        self.keys.writer(self.writer_id)  # ValueError for a bad id, now
        self.address = settings.advertise or ""
        # Replaced whole, never changed in place: readers on other threads see one or the other.
        self._owned: dict[int, tuple[int, Lease]] = {}  # written and acknowledged
        self._releasing: dict[int, tuple[int, Lease]] = {}  # in-flight batches acknowledged only
        self._owners: dict[int, tuple[str, int]] = {}  # every owner, as last read or watched
        self._owners_revision: dict[int, int] = {}  # the etcd revision each shard's entry is of
        self._lease: Lease | None = None
        self._etcd: EtcdClient | None = None
        self._keeper: ShardKeeper | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._changed: asyncio.Event | None = None
        self._drained: asyncio.Event | None = None
        self._draining = False
        self._drain_requested = False
        self.acquisitions = 0
        self.releases = 0
        self.lease_losses = 0

    # -- the Ownership protocol (any thread, from memory) ---------------------------------

    def owns(self, shard: int) -> int | None:
        held = self._owned.get(shard)
        if held is None or time.monotonic() >= held[1].deadline():
            return None
        return held[0]

    def may_acknowledge(self, shard: int, epoch: int, durable_at: float) -> bool:
        held = self._owned.get(shard)
        if held is None or held[0] != epoch:
            held = self._releasing.get(shard)
        if held is None or held[0] != epoch:
            return False
        lease = held[1]
        return lease.state is not LeaseState.GONE and durable_at < lease.deadline()

    def owner_of(self, shard: int) -> tuple[str, int] | None:
        """(address, epoch) of ``shard``'s owner: this writer's own while it owns it, else the owner
        key last read from etcd; None when unknown or the owner advertises no address."""
        epoch = self.owns(shard)
        owner = (self.address, epoch) if epoch is not None else self._owners.get(shard)
        return owner if owner is not None and owner[0] else None

    @property
    def owned_shards(self) -> list[int]:
        """The shards this writer writes now, in order."""
        return sorted(shard for shard in self._owned if self.owns(shard) is not None)

    def lease_remaining(self) -> float:
        """Seconds until the current lease's deadline (0 without a live lease)."""
        lease = self._lease
        if lease is None or lease.state is LeaseState.GONE:
            return 0.0
        return max(0.0, lease.deadline() - time.monotonic())

    # -- life cycle ------------------------------------------------------------------------

    async def start(self, address: str, keeper: ShardKeeper) -> None:
        """Join the cluster advertising ``address`` (unless ``advertise`` was given), then take
        shards in the background. Raises OwnershipStartError when etcd does not answer or its
        cluster record holds another shard count than the data root."""
        self.address = self.settings.advertise or address
        self._keeper = keeper
        self._changed = asyncio.Event()
        self._drained = asyncio.Event()
        etcd = EtcdClient(self.settings.etcd)
        try:
            await etcd.ensure_cluster(self.keys.name, self.shard_count)
        except ShardCountMismatchError as error:
            await etcd.close()
            raise OwnershipStartError(
                f"cluster {error.cluster!r} in etcd has {error.stored} shards but this data root has"
                f" {error.asked} (its cluster.json): a cluster's writers share one data root and one"
                " shard count; point --data-dir at the cluster's data root or name another --cluster"
            ) from error
        except CoordinationError as error:
            await etcd.close()
            raise OwnershipStartError(
                f"cannot join cluster {self.keys.name!r} in etcd at {self.settings.etcd}: {error}"
            ) from error
        self._etcd = etcd
        metrics.watch_ownership(self)
        self._tasks = [
            asyncio.create_task(self._follow(), name="cluster changes"),
            asyncio.create_task(self._run(), name="cluster shards"),
        ]
        log.info(
            "writer %s joined cluster %r (%d shards, lease TTL %d s) advertising %s",
            self.writer_id,
            self.keys.name,
            self.shard_count,
            self.settings.lease_ttl,
            self.address,
        )

    async def wait_drained(self) -> None:
        """Return once a drain asked through etcd (``rollout cluster drain``) has released everything."""
        assert self._drained is not None, "start() first"
        await self._drained.wait()
        while not self._drain_requested:  # a stop() drained it: nothing asked from outside
            await asyncio.Event().wait()

    async def stop(self) -> None:
        """Drain: release every shard (in-flight batches finish first), revoke the lease, leave.
        When that takes longer than :data:`STOP_RELEASE_TIMEOUT` plus the TTL (etcd does not
        answer), the shards are dropped here and their keys left to the lease's TTL."""
        if self._etcd is None:
            return
        self._draining = True
        self._wake()
        run = self._tasks[1] if len(self._tasks) > 1 else None
        if run is not None and not run.done():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(STOP_RELEASE_TIMEOUT + self.settings.lease_ttl):
                    await asyncio.shield(run)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self._drop_all()

    async def close(self) -> None:
        """Close the etcd client, revoking the lease if it is still held (after :meth:`stop`)."""
        etcd, self._etcd = self._etcd, None
        try:
            if etcd is not None:
                await etcd.close(revoke_leases=True)
        finally:
            if self._root_lock is not None:
                self._root_lock.release()

    # -- the background work ---------------------------------------------------------------

    def _wake(self) -> None:
        if self._changed is not None:
            self._changed.set()

    def _learn_owners(self, revision: int, owners: dict[int, tuple[str, int] | None]) -> None:
        """Take ``owners`` (shard -> (address, epoch), None: no owner) as etcd held them at
        ``revision``, for each shard whose entry is not of a later revision already (a watched
        change may come before or after a read of the same revision)."""
        seen = self._owners_revision
        newer = {shard: owner for shard, owner in owners.items() if seen.get(shard, 0) <= revision}
        if not newer:
            return
        updated = dict(self._owners)
        for shard, owner in newer.items():
            seen[shard] = revision
            if owner is None:
                updated.pop(shard, None)
            else:
                updated[shard] = owner
        self._owners = updated

    def _read_owners(self, snapshot: OwnershipSnapshot) -> dict[int, tuple[str, int]]:
        """Every shard's owner (address, epoch) in a read of the shard keys, which
        :meth:`owner_of` then answers (:meth:`_learn_owners`)."""
        owners = {
            self.keys.shard_of(key): (record.owner.address, record.epoch)
            for key, record in snapshot.owners.items()
        }
        self._learn_owners(snapshot.revision, {shard: owners.get(shard) for shard in range(self.shard_count)})
        return owners

    def _watched_owner(self, event: KeyEvent) -> None:
        """Take a watched change of a shard's owner key (a key or value this version does not
        write is left to the next read of the owners, which refuses it)."""
        try:
            shard = self.keys.shard_of(event.key)
            if event.kind is EventKind.DELETE:
                self._learn_owners(event.revision, {shard: None})
                return
            owner = OwnerRecord.decode(event.key, event.value)
        except (ValueError, RecordFormatError):
            return
        self._learn_owners(event.revision, {shard: (owner.address, event.create_revision)})

    async def _follow(self) -> None:
        """Wake the balancing on every change under the cluster's prefix, and keep the owners of
        other writers' shards (:meth:`owner_of`) as the changes come."""
        assert self._etcd is not None
        keys = self.keys
        while True:
            try:
                async for event in self._etcd.watch(keys.prefix):
                    if event.key.startswith(keys.shards):
                        self._watched_owner(event)
                    self._wake()
            except CoordinationError as error:  # compacted, refused: watch again from now
                log.warning("cluster watch ended (%s); watching again", error)
                self._wake()
                await asyncio.sleep(RETRY_PAUSE_MAX)

    async def _run(self) -> None:
        """One lease after another until drained."""
        pause = 0.1
        while True:
            try:
                if await self._serve_lease():
                    return
                pause = 0.1
            except CoordinationError as error:
                log.warning("cluster %r: %s; trying again", self.keys.name, error)
                await self._drop_all()
                await asyncio.sleep(pause)
                pause = min(pause * 2, RETRY_PAUSE_MAX)

    async def _serve_lease(self) -> bool:
        """Hold one lease: balance shards under it until it is lost (False) or drained (True)."""
        assert self._etcd is not None
        assert self._changed is not None
        lost = asyncio.Event()

        def on_lost(lease: Lease) -> None:
            if lease is self._lease:
                self._owned, self._releasing = {}, {}  # nothing more written or acknowledged
                self.lease_losses += 1
                metrics.LEASE_LOSSES.inc()
            lost.set()
            self._wake()

        lease = await self._etcd.grant_lease(self.settings.lease_ttl, on_lost=on_lost)
        self._lease = lease
        log.info("writer %s holds lease %x (TTL %d s)", self.writer_id, lease.id, lease.ttl)
        try:
            while not lost.is_set():
                self._changed.clear()
                if await self._balance(lease):
                    await self._leave(lease)
                    return True
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(lease.interval):
                        await self._changed.wait()
            log.warning("writer %s lost lease %x: its shards are dropped", self.writer_id, lease.id)
        finally:
            if lost.is_set() or not lease.alive():
                await self._drop_all()
                with contextlib.suppress(CoordinationError):
                    await lease.release(timeout=self.settings.lease_ttl)  # its keys go at once
        return self._draining and await self._finish_drain()

    async def _balance(self, lease: Lease) -> bool:
        """Read the cluster and move toward this writer's share; True once drained."""
        assert self._etcd is not None
        assert self._keeper is not None
        etcd, keys = self._etcd, self.keys
        me = OwnerRecord(self.address, self.writer_id)
        await etcd.try_acquire(keys.writer(self.writer_id), lease, me)
        writers = await etcd.owners(keys.writers)
        shards = await etcd.owners(keys.shards)
        if keys.drain(self.writer_id) in await etcd.values(keys.drains):
            self._drain_requested = self._draining = True
        held: dict[str, int] = {record.owner.writer_id: 0 for record in writers.owners.values()}
        mine_in_etcd: dict[int, int] = {}
        for key, record in shards.owners.items():
            if record.owner.writer_id in held:
                held[record.owner.writer_id] += 1
            if record.lease_id == lease.id:
                mine_in_etcd[keys.shard_of(key)] = record.epoch
        owners = self._read_owners(shards)
        for shard, (epoch, _) in list(self._owned.items()):
            if mine_in_etcd.get(shard) != epoch:  # etcd says it is not ours (any more)
                log.warning("shard %d (epoch %d) is no longer this writer's in etcd: dropped", shard, epoch)
                self._owned = {s: h for s, h in self._owned.items() if s != shard}
                await self._keeper.release_shard(shard)
        for shard, epoch in mine_in_etcd.items():
            if shard not in self._owned and shard not in self._releasing:  # a release cut short
                await etcd.release(keys.shard(shard), epoch)
        share = 0 if self._draining else shard_share(self.shard_count, held, self.writer_id)
        for shard in sorted(self._owned, reverse=True)[: max(0, len(self._owned) - share)]:
            await self._release(shard)
        wanted = share - len(self._owned)
        if wanted > 0 and lease.alive():
            await self._take_free(wanted, owners, lease, me)
        return self._draining and not self._owned and not self._releasing

    async def _take_free(
        self, wanted: int, owners: dict[int, tuple[str, int]], lease: Lease, me: OwnerRecord
    ) -> None:
        """Take up to ``wanted`` of the shards free in ``owners``, along the ring from this writer's
        first choice, :data:`MAX_TXN_KEYS` at most per transaction (all or none of them). A
        transaction that finds one of its shards held reads the owners again and chooses again,
        :data:`TAKE_ATTEMPTS` times at most (the next look takes the rest). Each shard taken is
        indexed at once, concurrently with the others and the next transaction, and answered as
        soon as its own index is done."""
        assert self._etcd is not None
        etcd, keys = self._etcd, self.keys
        began = time.monotonic()
        start = _first_choice(self.writer_id, self.shard_count)
        ring = [(start + step) % self.shard_count for step in range(self.shard_count)]
        taken: dict[int, int] = {}
        indexing: list[asyncio.Task[bool]] = []
        transactions = 0
        for _ in range(TAKE_ATTEMPTS):
            free = [shard for shard in ring if shard not in owners and shard not in taken]
            chosen = free[: min(wanted - len(taken), MAX_TXN_KEYS)]
            if not chosen or not lease.alive():
                break
            transactions += 1
            epochs = await etcd.try_acquire_all([keys.shard(shard) for shard in chosen], lease, me)
            if epochs is None:  # another writer took one of them first
                owners = self._read_owners(await etcd.owners(keys.shards))
                continue
            for shard in chosen:
                taken[shard] = epochs[keys.shard(shard)]
                indexing.append(asyncio.create_task(self._answer_taken(shard, taken[shard], lease)))
            if len(taken) >= wanted:
                break
        answered = sum(await asyncio.gather(*indexing))
        if taken:
            log.info(
                "writer %s took %d shards in %d transactions and answers %d of them after %.0f ms",
                self.writer_id,
                len(taken),
                transactions,
                answered,
                (time.monotonic() - began) * 1000,
            )

    async def _answer_taken(self, shard: int, epoch: int, lease: Lease) -> bool:
        """Index ``shard``, just taken at ``epoch`` under ``lease``, then answer it; a shard that
        cannot be indexed is given back. Returns whether it is answered."""
        assert self._etcd is not None
        assert self._keeper is not None
        try:
            await self._keeper.take_shard(shard)
        except Exception:
            log.exception("shard %d could not be indexed: given back", shard)
            with contextlib.suppress(CoordinationError):
                await self._etcd.release(self.keys.shard(shard), epoch)
            return False
        if lease is not self._lease or not lease.alive():
            return False  # lost meanwhile: the key goes with the lease
        self._owned = {**self._owned, shard: (epoch, lease)}
        self.acquisitions += 1
        metrics.SHARD_ACQUISITIONS.inc()
        log.info("writer %s owns shard %d at epoch %d", self.writer_id, shard, epoch)
        return True

    async def _release(self, shard: int) -> None:
        """Stop writing ``shard``, let its in-flight batches finish, delete its key at its epoch."""
        assert self._etcd is not None
        assert self._keeper is not None
        held = self._owned[shard]
        self._releasing = {**self._releasing, shard: held}
        self._owned = {s: h for s, h in self._owned.items() if s != shard}
        try:
            await self._keeper.release_shard(shard)
            await self._etcd.release(self.keys.shard(shard), held[0])
        finally:
            self._releasing = {s: h for s, h in self._releasing.items() if s != shard}
        self.releases += 1
        metrics.SHARD_RELEASES.inc()
        log.info("writer %s released shard %d (epoch %d)", self.writer_id, shard, held[0])

    async def _drop_all(self) -> None:
        """Stop writing every shard here at once and close their sessions (no etcd involved)."""
        dropped = sorted(self._owned.keys() | self._releasing.keys())
        self._owned, self._releasing = {}, {}
        if self._keeper is not None:
            for shard in dropped:
                await self._keeper.release_shard(shard)

    async def _leave(self, lease: Lease) -> None:
        """Drained: revoke the lease (the presence key goes with it)."""
        with contextlib.suppress(CoordinationError):
            await lease.release(timeout=STOP_RELEASE_TIMEOUT)
        await self._finish_drain()

    async def _finish_drain(self) -> bool:
        assert self._etcd is not None
        assert self._drained is not None
        if self._drain_requested:
            with contextlib.suppress(CoordinationError):
                await self._etcd.delete(self.keys.drain(self.writer_id), timeout=STOP_RELEASE_TIMEOUT)
        log.info("writer %s drained: it owns no shard", self.writer_id)
        self._drained.set()
        return True


# -- what operators ask (``rollout cluster status`` / ``drain``) -----------------------------


@dataclass(frozen=True)
class ShardOwner:
    """One shard's owner as etcd holds it (None fields: no owner)."""

    shard: int
    address: str | None
    writer_id: str | None
    epoch: int | None
    lease_left: int | None


@dataclass(frozen=True)
class WriterPresence:
    """One writer present in the cluster: its id, address, shards owned and lease seconds left
    (etcd's count, whole seconds)."""

    writer_id: str
    address: str
    shards: int
    lease_left: int | None


@dataclass(frozen=True)
class ClusterView:
    """A cluster as etcd holds it at one revision: its shard count (None: never created), writers
    and the owner of every shard."""

    name: str
    shard_count: int | None
    revision: int
    writers: list[WriterPresence]
    shards: list[ShardOwner]


async def read_cluster(endpoints: str, name: str) -> ClusterView:
    """The state of cluster ``name`` in the etcd at ``endpoints``. Raises CoordinationError when
    etcd does not answer or holds values this version does not write, ValueError for a bad name."""
    keys = ClusterKeys(name)
    async with EtcdClient(endpoints) as etcd:
        record = (await etcd.values(keys.record)).get(keys.record)
        writers = await etcd.owners(keys.writers)
        shards = await etcd.owners(keys.shards)
        leases = {held.lease_id for held in (*writers.owners.values(), *shards.owners.values())}
        left = {lease_id: await etcd.remaining_ttl(lease_id) for lease_id in leases}
    count = None if record is None else ClusterRecord.decode(keys.record, record).shard_count
    held = Counter(ownership.owner.writer_id for ownership in shards.owners.values())
    by_shard = {keys.shard_of(key): ownership for key, ownership in shards.owners.items()}
    owners = []
    for shard in sorted(set(range(count or 0)) | by_shard.keys()):
        ownership = by_shard.get(shard)
        if ownership is None:
            owners.append(ShardOwner(shard, None, None, None, None))
        else:
            owner = ownership.owner
            owners.append(
                ShardOwner(shard, owner.address, owner.writer_id, ownership.epoch, left[ownership.lease_id])
            )
    present = [
        WriterPresence(
            ownership.owner.writer_id,
            ownership.owner.address,
            held[ownership.owner.writer_id],
            left[ownership.lease_id],
        )
        for ownership in sorted(writers.owners.values(), key=lambda ownership: ownership.owner.address)
    ]
    return ClusterView(name, count, shards.revision, present, owners)


async def request_drain(endpoints: str, name: str, address: str, *, wait: float | None) -> str:
    """Ask the writer of cluster ``name`` that advertises ``address`` to drain (release every shard,
    then exit) by putting its drain key; returns its writer id. ``wait``: seconds to wait until
    it has left the cluster (None: do not wait). Raises LookupError when no writer advertises
    ``address``, TimeoutError when it is still present after ``wait`` seconds, CoordinationError
    when etcd does not answer."""
    keys = ClusterKeys(name)
    async with EtcdClient(endpoints) as etcd:
        writers = await etcd.owners(keys.writers)
        matching = [held.owner for held in writers.owners.values() if held.owner.address == address]
        if not matching:
            known = ", ".join(sorted(held.owner.address for held in writers.owners.values())) or "none"
            raise LookupError(f"no writer of cluster {name!r} advertises {address} (writers: {known})")
        writer = matching[0]
        await etcd.put(keys.drain(writer.writer_id), writer.encode())
        if wait is not None:
            async with asyncio.timeout(wait):
                while keys.writer(writer.writer_id) in (await etcd.owners(keys.writers)).owners:
                    await asyncio.sleep(0.2)
    return writer.writer_id
