"""What this layer stores in etcd, and where: the cluster record and ownership keys.

Key layout, every key of cluster NAME under its prefix (``ClusterKeys``)::

    /rollout-ledger/clusters/NAME/record              {"shard_count":256}
        no lease; created once, never changed
    /rollout-ledger/clusters/NAME/shards/00042        {"address":"10.0.0.7:50051","writer_id":"w-1"}
        the owner of shard 42, held under its owner's lease
    /rollout-ledger/clusters/NAME/writers/WRITER_ID   {"address":...,"writer_id":...}
        a writer's presence, held under its lease
    /rollout-ledger/clusters/NAME/drain/WRITER_ID     {"address":...,"writer_id":...}
        a request that writer WRITER_ID release every shard and exit (``rollout cluster
        drain``); no lease; the writer deletes it once drained

Values are compact JSON with sorted keys (orjson), so equal records are equal bytes.

Epochs
------
A key is owned by creating it: one transaction puts it, under the owner's lease, only if it
does not exist (its create revision is 0). The owner's **epoch**, the fencing token, is the
key's *create* revision. etcd's revision counts every change of the whole store and never goes
back, a key keeps its create revision for as long as it exists, and it must be deleted (a
release, or its lease ending) before anyone can create it again; so a later owner always gets a
larger epoch. The mod revision would move each time the owner rewrote its own value, changing
the epoch in the middle of one ownership; the create revision names the ownership itself.

Epochs compare within one etcd cluster's history: an etcd rebuilt from nothing starts again at
revision 1 (restore a snapshot instead, whose revisions continue).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson

from writer_service.coordination.errors import RecordFormatError

#: Where every cluster's keys live.
ROOT = "/rollout-ledger/clusters/"
#: Most shards a cluster may have (shard keys carry 5 digits, so that they sort in shard order).
MAX_SHARD_COUNT = 65_536
_SHARD_DIGITS = 5
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


def _check_name(what: str, name: str) -> str:
    if _NAME.fullmatch(name) is None:
        raise ValueError(
            f"{what} {name!r} must be 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return name


@dataclass(frozen=True)
class ClusterKeys:
    """The etcd keys of cluster ``name`` (module docstring: Key layout).

    Raises ValueError for a name that is not 1-63 of ``[A-Za-z0-9._-]`` starting with a
    letter or digit.
    """

    name: str

    def __post_init__(self) -> None:
        _check_name("cluster name", self.name)

    @property
    def prefix(self) -> str:
        """Every key of the cluster starts with this."""
        return f"{ROOT}{self.name}/"

    @property
    def record(self) -> str:
        """The cluster record's key (its shard count)."""
        return f"{self.prefix}record"

    @property
    def shards(self) -> str:
        """The prefix of the shards' ownership keys."""
        return f"{self.prefix}shards/"

    def shard(self, shard: int) -> str:
        """The ownership key of ``shard`` (0 <= shard < MAX_SHARD_COUNT, else ValueError)."""
        if not 0 <= shard < MAX_SHARD_COUNT:
            raise ValueError(f"shard {shard} is not in 0..{MAX_SHARD_COUNT - 1}")
        return f"{self.shards}{shard:0{_SHARD_DIGITS}d}"

    def shard_of(self, key: str) -> int:
        """The shard an ownership key names (the mirror of :meth:`shard`); ValueError otherwise."""
        digits = key.removeprefix(self.shards)
        if digits == key or len(digits) != _SHARD_DIGITS or not digits.isdigit():
            raise ValueError(f"{key!r} is not a shard key of cluster {self.name!r}")
        return int(digits)

    @property
    def writers(self) -> str:
        """The prefix of the writers' presence keys."""
        return f"{self.prefix}writers/"

    def writer(self, writer_id: str) -> str:
        """The presence key of writer ``writer_id`` (a name as for clusters, else ValueError)."""
        return f"{self.writers}{_check_name('writer id', writer_id)}"

    @property
    def drains(self) -> str:
        """The prefix of the drain requests."""
        return f"{self.prefix}drain/"

    def drain(self, writer_id: str) -> str:
        """The key asking writer ``writer_id`` to drain (a name as for clusters, else ValueError)."""
        return f"{self.drains}{_check_name('writer id', writer_id)}"


@dataclass(frozen=True)
class OwnerRecord:
    """Who holds a key: the address clients reach the owner at, and its writer id."""

    address: str
    writer_id: str

    def encode(self) -> bytes:
        """The record as stored: ``{"address":...,"writer_id":...}``, keys sorted."""
        return orjson.dumps(
            {"address": self.address, "writer_id": self.writer_id}, option=orjson.OPT_SORT_KEYS
        )

    @classmethod
    def decode(cls, key: str, value: bytes) -> OwnerRecord:
        """The record stored under ``key``; RecordFormatError naming the key when it is not one."""
        try:
            fields: Any = orjson.loads(value)
        except orjson.JSONDecodeError as error:
            raise RecordFormatError(key, f"the owner record is not JSON: {error}") from error
        if (
            not isinstance(fields, dict)
            or not isinstance(fields.get("address"), str)
            or not isinstance(fields.get("writer_id"), str)
        ):
            raise RecordFormatError(key, f"the owner record lacks address and writer_id: {value[:200]!r}")
        return cls(fields["address"], fields["writer_id"])


@dataclass(frozen=True)
class Ownership:
    """A held key: its owner, the epoch (the key's create revision) and the lease it is held under."""

    key: str
    owner: OwnerRecord
    epoch: int
    lease_id: int


@dataclass(frozen=True)
class OwnershipSnapshot:
    """The owners of every key under a prefix at one ``revision`` (watch from ``revision + 1``
    to follow what changes after it)."""

    revision: int
    owners: dict[str, Ownership]


@dataclass(frozen=True)
class ClusterRecord:
    """What a cluster is created with."""

    shard_count: int

    def encode(self) -> bytes:
        """The record as stored: ``{"shard_count":N}``."""
        return orjson.dumps({"shard_count": self.shard_count})

    @classmethod
    def decode(cls, key: str, value: bytes) -> ClusterRecord:
        """The record stored under ``key``; RecordFormatError naming the key when it is not one."""
        try:
            fields: Any = orjson.loads(value)
        except orjson.JSONDecodeError as error:
            raise RecordFormatError(key, f"the cluster record is not JSON: {error}") from error
        count = fields.get("shard_count") if isinstance(fields, dict) else None
        if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= MAX_SHARD_COUNT:
            raise RecordFormatError(key, f"the cluster record holds no valid shard_count: {value[:200]!r}")
        return cls(count)
