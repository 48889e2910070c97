"""Which shards this writer may write, and whether it may still acknowledge what it wrote (SPEC §7).

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
them, so that a second writer on the same data root fails fast (SPEC §2.1).

A writer of a cluster (``serve-writer --etcd``) owns shards through leases in etcd instead
(writer_service.cluster_ownership, docs/cluster.md §2); it implements :class:`ServedOwnership`,
the life cycle the server drives: :meth:`~ServedOwnership.start` once the writer listens (its
address is what the owner keys advertise), :meth:`~ServedOwnership.stop` when it stops. A
served ownership takes and gives up shards while the writer runs, and tells the ledger through
a :class:`ShardKeeper`: a shard is indexed afresh from its folder before its new epoch is
answered by :meth:`Ownership.owns`, and its in-flight batches finish before it is released.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
from collections.abc import Sequence
from typing import Protocol

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
        """The owner of ``shard`` as this writer knows it: (its advertised address, its epoch),
        or None when no owner is known (for routing: the address a client is sent to)."""


class ShardKeeper(Protocol):
    """What a served ownership asks of the ledger as shards come and go (event loop)."""

    async def take_shard(self, shard: int) -> None:
        """Index ``shard`` afresh from its folder (another writer may have written it since)."""

    async def release_shard(self, shard: int) -> None:
        """Finish the in-flight batches of ``shard``'s open sessions, then close them."""


class ServedOwnership(Ownership, Protocol):
    """An ownership with a life cycle driven by the writer's server (module docstring)."""

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
        """This writer's own address (empty until started) and :data:`EMBEDDED_EPOCH`."""
        return self.address, EMBEDDED_EPOCH

    async def start(self, address: str, keeper: ShardKeeper) -> None:
        """Record the writer's address (every shard is owned from the start)."""
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
