"""Errors of the coordination layer (never gRPC statuses: the writer decides what they mean).

The hierarchy::

    CoordinationError              base; also etcd refusing a request for a reason not below
    ├── EtcdUnavailableError       no etcd member answered within the call's time limit
    │                              (members down, no quorum, a partition); retry later
    ├── LeaseGoneError             etcd does not know the lease (expired, revoked); grant a new one
    ├── ShardCountMismatchError    the cluster record holds another shard count than asked
    ├── WatchCompactedError        a watch's next revision was compacted; list again, then watch
    └── RecordFormatError          a value under the cluster prefix is not what we write there
"""

from __future__ import annotations


class CoordinationError(Exception):
    """Base class of the coordination layer's errors; raised itself when etcd refuses a request
    for another reason (its gRPC status and message are in the text)."""


class EtcdUnavailableError(CoordinationError):
    """No etcd member answered within the call's time limit; the text lists what each attempt met."""


class LeaseGoneError(CoordinationError):
    """etcd does not know the lease any more (it expired or was revoked); ``lease_id`` names it."""

    def __init__(self, lease_id: int, detail: str) -> None:
        super().__init__(f"lease {lease_id:x} is gone: {detail}")
        self.lease_id = lease_id


class ShardCountMismatchError(CoordinationError):
    """The cluster was created with ``stored`` shards, and the caller asked for ``asked``."""

    def __init__(self, cluster: str, stored: int, asked: int) -> None:
        super().__init__(
            f"cluster {cluster!r} was created with {stored} shards, not {asked}: "
            f"ask for {stored} shards, or name another cluster"
        )
        self.cluster = cluster
        self.stored = stored
        self.asked = asked


class WatchCompactedError(CoordinationError):
    """The revision a watch had to resume from was compacted: changes up to ``compact_revision``
    are lost to it. Read the current state again (:meth:`EtcdClient.owners`) and watch from there."""

    def __init__(self, prefix: str, next_revision: int, compact_revision: int) -> None:
        super().__init__(
            f"watch of {prefix!r} cannot resume at revision {next_revision}: "
            f"etcd compacted its history up to revision {compact_revision}"
        )
        self.next_revision = next_revision
        self.compact_revision = compact_revision


class RecordFormatError(CoordinationError):
    """A value under the cluster prefix is not what this layer writes there (``key`` names it)."""

    def __init__(self, key: str, detail: str) -> None:
        super().__init__(f"etcd key {key!r}: {detail}")
        self.key = key
