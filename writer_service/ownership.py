"""Which shards this writer may write, and whether it may still acknowledge what it wrote (docs/spec.md §7).

The ledger and the committer ask an :class:`Ownership` and nothing else (they never
import a coordination client):

* before a session's file is opened or created, and before each batch of a round is
  written: :meth:`Ownership.owns` (the shard's epoch, or None: not this writer's);
* after the round is durable, for each batch: :meth:`Ownership.may_acknowledge`
  (the shard, the epoch the batch was written under, and ``time.monotonic()`` when the
  write became durable). When it answers False, the batch's waiters, and everything
  queued behind them, fail with UNAVAILABLE (:class:`shared.errors.NotOwnerError`,
  retryable) and nothing more is written for that shard under that epoch: the bytes
  already written stay as they are (unacknowledged; a retry with the same request id
  is answered from the file, never written twice).

An ownership is asked from the event loop and from the rounds' thread: implementations
are thread-safe and answer from memory (no I/O, no blocking: it is on every batch).

:class:`EmbeddedOwnership` is the single-process default (``rollout serve``,
``serve-writer`` without a coordination service): it owns every shard of its data
root at epoch :data:`EMBEDDED_EPOCH` for the life of the process, and always may
acknowledge. It holds the data root's lock file (``writer.lock``: shared.layout) for all of
them, so that a second writer on the same data root fails fast (docs/spec.md §2.1).

:class:`StaticOwnership` is a fixed map read from a file (``serve-writer --static-shard-map``,
for tests): several writer processes share one data root, each owning the shards the map
gives it, and routing (NOT_OWNER redirects, GetShardMap) is tried without a coordination
service.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import orjson
from filelock import FileLock, Timeout

from shared.layout import PRIVATE_FILE_MODE, DataRoot

#: The epoch of every shard an embedded writer owns.
EMBEDDED_EPOCH = 1


class DataRootLockedError(RuntimeError):
    """Another writer process holds the data root (one of its shard locks)."""


class Ownership(Protocol):
    """What a writer may write and acknowledge, shard by shard (module docstring)."""

    def owns(self, shard: int) -> int | None:
        """The epoch under which this writer owns ``shard`` now, or None when it does not."""

    def may_acknowledge(self, shard: int, epoch: int, durable_at: float) -> bool:
        """Whether a batch of ``shard`` written under ``epoch`` and durable at ``durable_at``
        (``time.monotonic()`` seconds) may be acknowledged."""

    def owner_of(self, shard: int) -> tuple[str, int] | None:
        """The ``host:port`` clients reach ``shard``'s owner at and its epoch, as this writer knows
        them now (itself included), or None when it knows no owner (NOT_OWNER's metadata and
        GetShardMap send it: the routing of docs/cluster.md §4)."""


class EmbeddedOwnership:
    """Every shard, epoch :data:`EMBEDDED_EPOCH`, always acknowledged; holds the data root's lock.

    Create with :meth:`claim`; :meth:`release` the lock when the writer stops.
    """

    def __init__(self, locks: Sequence[FileLock] = ()) -> None:
        self._locks = list(locks)
        #: The address clients reach this writer at ("" until it is bound: :meth:`advertise`).
        self.address = ""

    def advertise(self, address: str) -> None:
        """Take ``address`` (``host:port``) as where clients reach this writer (:meth:`owner_of`)."""
        self.address = address

    @classmethod
    def claim(cls, root: DataRoot) -> EmbeddedOwnership:
        """Own every shard of ``root`` (an existing folder) for this process: its lock, held.

        Raises DataRootLockedError (naming the lock) when another writer holds it.
        """
        path = root.lock_path
        lock = FileLock(path, mode=PRIVATE_FILE_MODE, is_singleton=False)
        try:
            lock.acquire(timeout=0)
        except Timeout as exc:
            raise DataRootLockedError(
                f"data root {root.root} is already in use by another writer process"
                f" (lock {path}); stop that writer or choose another --data-dir"
            ) from exc
        return cls([lock])

    def owns(self, shard: int) -> int | None:
        return EMBEDDED_EPOCH

    def may_acknowledge(self, shard: int, epoch: int, durable_at: float) -> bool:
        return True

    def owner_of(self, shard: int) -> tuple[str, int] | None:
        return (self.address, EMBEDDED_EPOCH) if self.address else None

    def release(self) -> None:
        """Give up the lock (the writer has stopped writing)."""
        for lock in self._locks:
            lock.release()
        self._locks = []


class StaticShardMapError(ValueError):
    """A static shard map file cannot be used (names the file and what is wrong); the writer stops."""


class StaticOwnership:
    """A fixed map shard -> (address, epoch) read from a file, for trying routing with several writer
    processes on one data root without a coordination service (``serve-writer --static-shard-map``,
    a testing option). This writer owns the shards the map gives its own address, always may
    acknowledge them, and knows the owner of every shard the map names. Nothing keeps two writers
    given overlapping maps apart: only the map says who writes a shard. The file::

        {"shards": 256, "owners": [{"address": "127.0.0.1:7001", "epoch": 2, "shards": [0, 1, 5]}, ...]}

    ``shards`` must be the data root's shard count; each shard at most once; epochs >= 1.
    """

    def __init__(self, owners: dict[int, tuple[str, int]], address: str) -> None:
        self._owners = dict(owners)
        self.address = address

    @classmethod
    def load(cls, path: Path, shards: int, address: str) -> StaticOwnership:
        """The map of file ``path`` for a root of ``shards`` shards, seen by the writer at ``address``.

        Raises StaticShardMapError (malformed, another shard count, a shard named twice or out of
        range, a bad epoch), OSError when the file cannot be read.
        """
        try:
            body = orjson.loads(path.read_bytes())
        except orjson.JSONDecodeError as exc:
            raise StaticShardMapError(f"static shard map {path} is not JSON: {exc}") from exc
        if not isinstance(body, dict) or body.get("shards") != shards:
            raise StaticShardMapError(
                f'static shard map {path} must be an object with "shards": {shards} (the data root\'s shard count)'
            )
        owners: dict[int, tuple[str, int]] = {}
        entries = body.get("owners")
        for entry in entries if isinstance(entries, list) else [None]:
            if not isinstance(entry, dict):
                raise StaticShardMapError(f'static shard map {path}: "owners" is a list of objects')
            owner, epoch, owned = entry.get("address"), entry.get("epoch"), entry.get("shards")
            if not isinstance(owner, str) or not owner:
                raise StaticShardMapError(f'static shard map {path}: an owner without an "address"')
            if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 1:
                raise StaticShardMapError(
                    f"static shard map {path}: {owner}'s epoch must be a whole number >= 1"
                )
            if not isinstance(owned, list):
                raise StaticShardMapError(f'static shard map {path}: {owner}\'s "shards" must be a list')
            for shard in owned:
                if not isinstance(shard, int) or isinstance(shard, bool) or not 0 <= shard < shards:
                    raise StaticShardMapError(
                        f"static shard map {path}: shard {shard!r} is not 0..{shards - 1}"
                    )
                if shard in owners:
                    raise StaticShardMapError(f"static shard map {path}: shard {shard} has two owners")
                owners[shard] = (owner, epoch)
        return cls(owners, address)

    def owned_shards(self) -> list[int]:
        """The shards this writer owns, in order."""
        return sorted(shard for shard, (owner, _) in self._owners.items() if owner == self.address)

    def owns(self, shard: int) -> int | None:
        owner = self._owners.get(shard)
        return owner[1] if owner is not None and owner[0] == self.address else None

    def may_acknowledge(self, shard: int, epoch: int, durable_at: float) -> bool:
        return self.owns(shard) == epoch

    def owner_of(self, shard: int) -> tuple[str, int] | None:
        return self._owners.get(shard)

    def advertise(self, address: str) -> None:
        """Nothing to do: the map names this writer by the address it was given."""

    def release(self) -> None:
        """Nothing to release: a static map holds no lock."""
