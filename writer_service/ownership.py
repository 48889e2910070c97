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

A writer of a cluster (``serve-writer --etcd``) owns shards through leases in etcd instead
(writer_service.cluster_ownership, docs/cluster.md §2); it implements :class:`ServedOwnership`,
the life cycle the server drives: :meth:`~ServedOwnership.start` once the writer listens (its
address is what the owner keys advertise), :meth:`~ServedOwnership.stop` when it stops. A
served ownership takes and gives up shards while the writer runs, and tells the ledger through
a :class:`ShardKeeper`: a shard is indexed afresh from its folder before its new epoch is
answered by :meth:`Ownership.owns`, and its in-flight batches finish before it is released.

:class:`StaticOwnership` is a fixed map read from a file (``serve-writer --static-shard-map``,
for tests): several writer processes share one data root, each owning the shards the map
gives it, and routing (NOT_OWNER redirects, GetShardMap) is tried without a coordination
service. Both are served ownerships too, whose life cycle does little (the embedded one records
the writer's address when started, for :meth:`Ownership.owner_of`).
"""

from __future__ import annotations

import asyncio
import fcntl
import os
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


class OwnershipStartError(RuntimeError):
    """A served ownership cannot start: the coordination service is unreachable, or its record of
    the cluster contradicts the data root (the message says which and what to do)."""


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


class ShardKeeper(Protocol):
    """What a served ownership asks of the ledger as shards come and go (event loop)."""

    async def take_shard(self, shard: int) -> None:
        """Index ``shard`` afresh from its folder (another writer may have written it since)."""

    async def release_shard(self, shard: int) -> None:
        """Finish the in-flight batches of ``shard``'s open sessions, then close them."""


class ServedOwnership(Ownership, Protocol):
    """An ownership with a life cycle driven by the writer's server (module docstring)."""

    #: The ``host:port`` clients reach this writer at, once started ("" when none is known).
    address: str

    async def start(self, address: str, keeper: ShardKeeper) -> None:
        """Begin owning shards, advertising ``address``; OwnershipStartError when it cannot."""

    async def stop(self) -> None:
        """Release every shard (in-flight batches finished first): the writer is stopping."""

    async def close(self) -> None:
        """Give up what is still held once the ledger has closed (a lock, a lease)."""

    async def wait_drained(self) -> None:
        """Return once the ownership was asked to drain from outside and has released everything
        (the writer then exits); never returns for an ownership that cannot be drained so."""


class EmbeddedOwnership:
    """Every shard, epoch :data:`EMBEDDED_EPOCH`, always acknowledged; holds the data root's lock.

    Create with :meth:`claim`; :meth:`release` the lock when the writer stops.
    """

    def __init__(self, locks: Sequence[FileLock] = ()) -> None:
        self._locks = list(locks)
        #: The address clients reach this writer at ("" until it is started: :meth:`start`).
        self.address = ""

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
        """This writer's address and :data:`EMBEDDED_EPOCH`; None while it has no address (not
        started, or bound to a wildcard host: clients keep the address they were given)."""
        return (self.address, EMBEDDED_EPOCH) if self.address else None

    async def start(self, address: str, keeper: ShardKeeper) -> None:
        """Record ``address`` (``host:port``, "" for none) as where clients reach this writer
        (:meth:`owner_of`); every shard is owned from the start."""
        self.address = address

    async def stop(self) -> None:
        """Nothing: the lock is held until the ledger has closed (:meth:`close`)."""

    async def close(self) -> None:
        """:meth:`release`."""
        self.release()

    async def wait_drained(self) -> None:
        """Never returns: an embedded writer stops on a signal alone."""
        await asyncio.Event().wait()

    def release(self) -> None:
        """Give up the lock (the writer has stopped writing)."""
        for lock in self._locks:
            lock.release()
        self._locks = []


class SharedRootLock:
    """The data root's lock file (``writer.lock``) held *shared* (``flock(LOCK_SH)``) by a writer
    of a cluster: any number of them share a root, while the embedded default holds the same
    file exclusively, so the two kinds exclude each other on one host (across hosts, etcd's
    leases decide). Create with :meth:`claim`; :meth:`release` when the writer has stopped."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    @classmethod
    def claim(cls, root: DataRoot) -> SharedRootLock:
        """Hold ``root``'s lock shared; DataRootLockedError when a single writer holds it."""
        path = root.lock_path
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, PRIVATE_FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            os.close(fd)
            raise DataRootLockedError(
                f"data root {root.root} is in use by a writer that is not in a cluster (lock {path});"
                " stop it before starting writers of a cluster on this data root"
            ) from exc
        return cls(fd)

    def release(self) -> None:
        """Give up the lock."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


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

    async def start(self, address: str, keeper: ShardKeeper) -> None:
        """Nothing to do: the map names this writer by the address it was loaded with."""

    async def stop(self) -> None:
        """Nothing: the map's shards are this writer's until it exits."""

    async def close(self) -> None:
        """Nothing to release: a static map holds no lock."""

    async def wait_drained(self) -> None:
        """Never returns: a writer of a static map stops on a signal alone."""
        await asyncio.Event().wait()
