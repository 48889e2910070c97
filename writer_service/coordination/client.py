"""EtcdClient: leases, ownership keys, watches and the cluster record over one etcd cluster."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from types import TracebackType
from typing import Any, Self

from writer_service.coordination.endpoints import (
    ATTEMPT_TIMEOUT,
    REQUEST_TIMEOUT,
    Endpoint,
    MemberRotation,
    parse_endpoints,
)
from writer_service.coordination.errors import CoordinationError, LeaseGoneError, ShardCountMismatchError
from writer_service.coordination.leases import DEADLINE_SLACK, DRIFT_BOUND, Lease, LeaseListener, LeaseState
from writer_service.coordination.ownership import (
    MAX_SHARD_COUNT,
    ClusterKeys,
    ClusterRecord,
    OwnerRecord,
    Ownership,
    OwnershipSnapshot,
)
from writer_service.coordination.protocol import etcd_rpc, prefix_range_end
from writer_service.coordination.watches import Watch

log = logging.getLogger(__name__)

#: Seconds :meth:`EtcdClient.close` gives the revocation of each lease still held.
CLOSE_REVOKE_TIMEOUT = 2.0
#: Most keys one :meth:`EtcdClient.try_acquire_all` transaction creates: etcd refuses a transaction
#: with more operations in one branch than its ``--max-txn-ops`` (default 128).
MAX_TXN_KEYS = 128


def _create_if_absent(key: bytes, value: bytes, lease_id: int) -> Any:
    """A transaction that creates ``key`` (under lease ``lease_id``; 0: none) when it does not
    exist, and otherwise reads it."""
    return etcd_rpc.TxnRequest(
        compare=[
            etcd_rpc.Compare(
                key=key, target=etcd_rpc.Compare.CREATE, result=etcd_rpc.Compare.EQUAL, create_revision=0
            )
        ],
        success=[etcd_rpc.RequestOp(request_put=etcd_rpc.PutRequest(key=key, value=value, lease=lease_id))],
        failure=[etcd_rpc.RequestOp(request_range=etcd_rpc.RangeRequest(key=key))],
    )


class EtcdClient:
    """Our interface to one etcd v3 cluster, whichever of its members answer.

    ``endpoints``: ``HOST:PORT[,HOST:PORT...]`` or parsed endpoints (ValueError when there is
    none or one is malformed). ``attempt_timeout``: seconds one attempt may wait on one
    member before the request moves to the next. ``request_timeout``: seconds a request may
    take over all members (the default of every method's ``timeout``). ``drift_bound`` and
    ``deadline_slack``: the lease deadline's margin (:mod:`.leases`).

    Every method raises EtcdUnavailableError when no member answered within its timeout, and
    CoordinationError when etcd refuses the request. Make it inside the event loop that uses
    it, and :meth:`close` it (or use ``async with``): that stops every keepalive and watch.
    """

    def __init__(
        self,
        endpoints: str | Sequence[Endpoint],
        *,
        attempt_timeout: float = ATTEMPT_TIMEOUT,
        request_timeout: float = REQUEST_TIMEOUT,
        drift_bound: float = DRIFT_BOUND,
        deadline_slack: float = DEADLINE_SLACK,
    ) -> None:
        parsed = parse_endpoints(endpoints) if isinstance(endpoints, str) else tuple(endpoints)
        self._rotation = MemberRotation(parsed, attempt_timeout=attempt_timeout)
        self.request_timeout = request_timeout
        self.drift_bound = drift_bound
        self.deadline_slack = deadline_slack
        self._leases: list[Lease] = []
        self._watches: list[Watch] = []

    @property
    def endpoints(self) -> tuple[Endpoint, ...]:
        """Every member this client may use, in rotation order."""
        return self._rotation.endpoints

    @property
    def endpoint(self) -> Endpoint:
        """The member requests go to now."""
        return self._rotation.current

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self, *, revoke_leases: bool = True) -> None:
        """Stop every keepalive and watch, then close the channels. ``revoke_leases``: revoke
        each lease still held (etcd deletes its keys at once; a member that does not answer
        within 2 s leaves it to end by its TTL), otherwise leave them to end by their TTL."""
        leases, self._leases = self._leases, []
        watches, self._watches = self._watches, []
        try:
            for lease in leases:
                if lease.state is LeaseState.GONE or not revoke_leases:
                    continue
                try:
                    await lease.release(timeout=CLOSE_REVOKE_TIMEOUT)
                except CoordinationError as error:
                    log.warning(
                        "etcd lease %x not revoked at close (it ends by its TTL): %s", lease.id, error
                    )
        finally:
            for lease in leases:
                await lease.abandon()
            for watch in watches:
                watch.close()
            await self._rotation.close()

    def _timeout(self, timeout: float | None) -> float:
        return self.request_timeout if timeout is None else timeout

    async def grant_lease(
        self,
        ttl: int,
        *,
        on_lost: LeaseListener | None = None,
        interval: float | None = None,
        timeout: float | None = None,
    ) -> Lease:
        """Grant a lease of ``ttl`` seconds (an int >= 1; etcd may raise it to its minimum) and
        keep it alive every ``interval`` seconds (default: a third of the granted TTL) on one
        stream until it is released, abandoned or the client closed.

        ``on_lost(lease)`` is called, in the event loop, each time the lease stops being alive
        on its own: its deadline passed without an answered keepalive, or etcd answered that
        it ended. Raises ValueError for a TTL below 1.
        """
        if ttl < 1:
            raise ValueError(f"a lease TTL is a whole number of seconds >= 1, not {ttl}")
        answer, sent_at = await self._rotation.unary(
            lambda member: member.lease.LeaseGrant,
            etcd_rpc.LeaseGrantRequest(TTL=ttl),
            timeout=self._timeout(timeout),
            what=f"grant a lease of {ttl} s",
        )
        if answer.error:
            raise CoordinationError(f"grant a lease of {ttl} s: etcd answered {answer.error}")
        granted = int(answer.TTL)
        lease = Lease(
            self._rotation,
            int(answer.ID),
            granted,
            sent_at,
            interval=granted / 3 if interval is None else interval,
            answer_timeout=min(self._rotation.attempt_timeout, granted / 2),
            drift_bound=self.drift_bound,
            slack=self.deadline_slack,
            on_lost=on_lost,
        )
        self._leases = [held for held in self._leases if held.state is not LeaseState.GONE]
        self._leases.append(lease)
        return lease

    async def remaining_ttl(self, lease_id: int, *, timeout: float | None = None) -> int | None:
        """etcd's own count of the seconds left to lease ``lease_id`` (whole seconds, rounded
        down, as etcd reports it), or None when the lease has ended."""
        try:
            answer, _ = await self._rotation.unary(
                lambda member: member.lease.LeaseTimeToLive,
                etcd_rpc.LeaseTimeToLiveRequest(ID=lease_id),
                timeout=self._timeout(timeout),
                what=f"ask the time left to lease {lease_id:x}",
                lease_id=lease_id,
            )
        except LeaseGoneError:
            return None
        return None if answer.TTL < 0 else int(answer.TTL)

    async def try_acquire(
        self, key: str, lease: Lease, owner: OwnerRecord, *, timeout: float | None = None
    ) -> int | None:
        """Own ``key`` under ``lease`` if nobody does: one transaction creates it (only if it
        does not exist) with ``owner`` as its value. Returns the epoch (the key's create
        revision: larger for every later owner) or None when another holds it.

        A key this lease already holds with this owner record returns its epoch (a retried
        transaction that had landed). Raises LeaseGoneError when etcd does not know the lease.
        """
        epochs = await self.try_acquire_all([key], lease, owner, timeout=timeout)
        return None if epochs is None else epochs[key]

    async def try_acquire_all(
        self, keys: Sequence[str], lease: Lease, owner: OwnerRecord, *, timeout: float | None = None
    ) -> dict[str, int] | None:
        """Own every one of ``keys`` under ``lease``, or none of them: one transaction creates them
        all (each only if no key of them exists) with ``owner`` as their value. Returns each key's
        epoch (the transaction's revision, the create revision of every key it made), or None when
        any of them is held (nothing was changed: read the owners and choose again).

        Keys this lease already holds with this owner record, all of them, return their epochs (a
        retried transaction that had landed). Raises ValueError for no key, a key named twice or
        more than :data:`MAX_TXN_KEYS`; LeaseGoneError when etcd does not know the lease.
        """
        if not keys or len(set(keys)) != len(keys) or len(keys) > MAX_TXN_KEYS:
            raise ValueError(f"one transaction acquires 1 to {MAX_TXN_KEYS} distinct keys, not {len(keys)}")
        named = repr(keys[0]) if len(keys) == 1 else f"{len(keys)} keys from {keys[0]!r}"
        if lease.state is LeaseState.GONE:
            raise LeaseGoneError(lease.id, f"it cannot hold {named}")
        value = owner.encode()
        encoded = [key.encode() for key in keys]
        request = etcd_rpc.TxnRequest(
            compare=[
                etcd_rpc.Compare(
                    key=key, target=etcd_rpc.Compare.CREATE, result=etcd_rpc.Compare.EQUAL, create_revision=0
                )
                for key in encoded
            ],
            success=[
                etcd_rpc.RequestOp(request_put=etcd_rpc.PutRequest(key=key, value=value, lease=lease.id))
                for key in encoded
            ],
            failure=[etcd_rpc.RequestOp(request_range=etcd_rpc.RangeRequest(key=key)) for key in encoded],
        )
        answer, _ = await self._rotation.unary(
            lambda member: member.kv.Txn,
            request,
            timeout=self._timeout(timeout),
            what=f"acquire {named}",
            lease_id=lease.id,
        )
        if answer.succeeded:
            return dict.fromkeys(keys, int(answer.header.revision))
        epochs: dict[str, int] = {}
        for key, response in zip(keys, answer.responses, strict=True):
            held = response.response_range.kvs
            if not held or held[0].lease != lease.id or held[0].value != value:
                return None
            epochs[key] = int(held[0].create_revision)
        return epochs

    async def release(self, key: str, epoch: int, *, timeout: float | None = None) -> bool:
        """Delete ``key`` if it is still held at ``epoch`` (compared on its create revision).
        Returns whether it was deleted: False when it is gone or held at another epoch
        (released already, its lease ended, someone else owns it now)."""
        encoded = key.encode()
        request = etcd_rpc.TxnRequest(
            compare=[
                etcd_rpc.Compare(
                    key=encoded,
                    target=etcd_rpc.Compare.CREATE,
                    result=etcd_rpc.Compare.EQUAL,
                    create_revision=epoch,
                )
            ],
            success=[etcd_rpc.RequestOp(request_delete_range=etcd_rpc.DeleteRangeRequest(key=encoded))],
        )
        answer, _ = await self._rotation.unary(
            lambda member: member.kv.Txn, request, timeout=self._timeout(timeout), what=f"release {key!r}"
        )
        return bool(answer.succeeded)

    async def owners(self, prefix: str, *, timeout: float | None = None) -> OwnershipSnapshot:
        """The owner of every key under ``prefix`` and the store revision they were read at
        (a linearizable read). Raises RecordFormatError for a value that is not an owner record."""
        encoded = prefix.encode()
        answer, _ = await self._rotation.unary(
            lambda member: member.kv.Range,
            etcd_rpc.RangeRequest(key=encoded, range_end=prefix_range_end(encoded)),
            timeout=self._timeout(timeout),
            what=f"list the owners under {prefix!r}",
        )
        owners: dict[str, Ownership] = {}
        for kv in answer.kvs:
            key = kv.key.decode()
            owners[key] = Ownership(
                key, OwnerRecord.decode(key, kv.value), int(kv.create_revision), int(kv.lease)
            )
        return OwnershipSnapshot(int(answer.header.revision), owners)

    async def put(
        self, key: str, value: bytes, *, lease: Lease | None = None, timeout: float | None = None
    ) -> int:
        """Set ``key`` to ``value`` (under ``lease`` when given, else with no lease); returns the
        store revision of the change. Raises LeaseGoneError when etcd does not know the lease."""
        request = etcd_rpc.PutRequest(key=key.encode(), value=value, lease=0 if lease is None else lease.id)
        answer, _ = await self._rotation.unary(
            lambda member: member.kv.Put,
            request,
            timeout=self._timeout(timeout),
            what=f"put {key!r}",
            lease_id=None if lease is None else lease.id,
        )
        return int(answer.header.revision)

    async def delete(self, key: str, *, timeout: float | None = None) -> bool:
        """Delete ``key``; returns whether it existed."""
        answer, _ = await self._rotation.unary(
            lambda member: member.kv.DeleteRange,
            etcd_rpc.DeleteRangeRequest(key=key.encode()),
            timeout=self._timeout(timeout),
            what=f"delete {key!r}",
        )
        return bool(answer.deleted)

    async def values(self, prefix: str, *, timeout: float | None = None) -> dict[str, bytes]:
        """Every key under ``prefix`` with its value (a linearizable read)."""
        encoded = prefix.encode()
        answer, _ = await self._rotation.unary(
            lambda member: member.kv.Range,
            etcd_rpc.RangeRequest(key=encoded, range_end=prefix_range_end(encoded)),
            timeout=self._timeout(timeout),
            what=f"read the keys under {prefix!r}",
        )
        return {kv.key.decode(): bytes(kv.value) for kv in answer.kvs}

    def watch(self, prefix: str, *, start_revision: int | None = None) -> Watch:
        """The changes (puts and deletes) under ``prefix`` from ``start_revision`` on (None:
        from now), as an async iterator of KeyEvents that resumes after a broken stream from
        the last revision it delivered (:mod:`.watches`). Close it, or close the client."""
        watch = Watch(self._rotation, prefix, start_revision)
        self._watches = [*(held for held in self._watches if not held.closed), watch]
        return watch

    async def ensure_cluster(self, name: str, shard_count: int, *, timeout: float | None = None) -> int:
        """Record that cluster ``name`` has ``shard_count`` shards, unless it is recorded
        already; returns the stored count.

        Raises ShardCountMismatchError when the cluster was created with another count,
        ValueError for a name or count out of bounds (1..65,536 shards), RecordFormatError
        when the stored record is not one.
        """
        keys = ClusterKeys(name)
        if not 1 <= shard_count <= MAX_SHARD_COUNT:
            raise ValueError(f"a cluster has 1 to {MAX_SHARD_COUNT} shards, not {shard_count}")
        answer, _ = await self._rotation.unary(
            lambda member: member.kv.Txn,
            _create_if_absent(keys.record.encode(), ClusterRecord(shard_count).encode(), 0),
            timeout=self._timeout(timeout),
            what=f"record cluster {name!r}",
        )
        if answer.succeeded:
            log.info("etcd: cluster %r created with %d shards", name, shard_count)
            return shard_count
        stored = ClusterRecord.decode(
            keys.record, answer.responses[0].response_range.kvs[0].value
        ).shard_count
        if stored != shard_count:
            raise ShardCountMismatchError(name, stored, shard_count)
        return stored
