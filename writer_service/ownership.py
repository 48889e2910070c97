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
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

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
