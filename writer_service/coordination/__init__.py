"""Coordination of writers through etcd v3: leases, ownership keys with epochs, watches and
the cluster record, behind our own small interface (nothing else imports an etcd client).

The files, one role each:

- ``endpoints.py``: the members (``HOST:PORT[,...]``) and the rotation of requests over them;
  a member that is down, cut off from its leader or silent hands the turn on at once.
- ``leases.py``: a lease kept alive on one long-lived stream, and its **deadline**: the send
  time of the last answered keepalive plus the TTL, minus a margin derived there from a
  stated clock-drift bound. A writer acknowledges nothing past it.
- ``ownership.py``: the key layout of a cluster, the values stored, and why an owner's
  **epoch** (fencing token) is its key's create revision.
- ``watches.py``: changes under a prefix, resumed from the last revision after a broken stream.
- ``client.py``: :class:`EtcdClient`, the interface the writer uses.
- ``protocol.py``: etcd's generated messages and stubs (from aetcd, the ``cluster`` extra).
- ``errors.py``: the errors, drawn as a tree.

Use::

    async with EtcdClient("10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379") as etcd:
        keys = ClusterKeys("prod")
        await etcd.ensure_cluster(keys.name, 256)        # ShardCountMismatchError if not 256
        lease = await etcd.grant_lease(10, on_lost=stop_acknowledging)
        me = OwnerRecord("10.0.0.7:50051", "w-1")
        epoch = await etcd.try_acquire(keys.shard(42), lease, me)   # None: owned by another
        ...                                               # acknowledge only while lease.alive()
        await etcd.release(keys.shard(42), epoch)
"""

from writer_service.coordination.client import MAX_TXN_KEYS, EtcdClient
from writer_service.coordination.endpoints import Endpoint, parse_endpoints
from writer_service.coordination.errors import (
    CoordinationError,
    EtcdUnavailableError,
    LeaseGoneError,
    RecordFormatError,
    ShardCountMismatchError,
    WatchCompactedError,
)
from writer_service.coordination.leases import DEADLINE_SLACK, DRIFT_BOUND, Lease, LeaseState, lease_deadline
from writer_service.coordination.ownership import (
    MAX_SHARD_COUNT,
    ClusterKeys,
    ClusterRecord,
    OwnerRecord,
    Ownership,
    OwnershipSnapshot,
)
from writer_service.coordination.watches import EventKind, KeyEvent, Watch

__all__ = [
    "DEADLINE_SLACK",
    "DRIFT_BOUND",
    "MAX_SHARD_COUNT",
    "MAX_TXN_KEYS",
    "ClusterKeys",
    "ClusterRecord",
    "CoordinationError",
    "Endpoint",
    "EtcdClient",
    "EtcdUnavailableError",
    "EventKind",
    "KeyEvent",
    "Lease",
    "LeaseGoneError",
    "LeaseState",
    "OwnerRecord",
    "Ownership",
    "OwnershipSnapshot",
    "RecordFormatError",
    "ShardCountMismatchError",
    "Watch",
    "WatchCompactedError",
    "lease_deadline",
    "parse_endpoints",
]
