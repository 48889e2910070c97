"""Group commit for one session file (SPEC §2.2).

One :class:`SessionCommitter` owns one open file. Callers hand it encoded lines
(:meth:`SessionCommitter.submit`) and await the returned future; a flush loop in
an I/O thread takes queued requests in order, writes each batch durably, and
resolves every waiter of the batch.

A durable batch write is one system call where the kernel has it:
``pwritev2(..., RWF_DSYNC)`` (Linux 4.7+), the per-write form of ``O_DSYNC``, which
returns only once the bytes and the metadata needed to read them back are on
stable storage (the same promise as ``write`` + ``fdatasync``). One call instead
of two halves the times the I/O thread must win the GIL back per batch (each win
waits for the event loop's thread to let go; measured ~+10 % AppendStream
records/s). Where the call is missing or the file system refuses it
(``EOPNOTSUPP``/``EINVAL``, nothing written), the committer falls back, for the
rest of the process, to ``write`` + ``fdatasync``.

Batching is adaptive: while nothing is being flushed, a request is written at
once; requests that arrive during a flush form the next batch. A batch holds
at most ``batch_max_records`` records, except that one request larger than that
is never split (it is its own batch). ``batch_max_wait_ms`` bounds how long a
partly filled batch may linger for company when ``linger_ms`` > 0 (0 by default:
the previous flush is the only wait).

A failed write or fsync fails every waiter of that batch and of everything
queued behind it (their seqs were assigned after it), cuts the file back to its
length before the batch (no partial line), and leaves the committer usable: the
next submit writes again. Durability: ``fsync`` mode (default) syncs every
batch's data (``RWF_DSYNC`` or ``fdatasync``), so an acknowledged record survives
a process crash and a power loss; ``unsafe_no_fsync`` leaves the bytes in OS
buffers, surviving a process crash only.
"""

from __future__ import annotations

import asyncio
import enum
import errno
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass

from shared.errors import StorageWriteError
from writer_service import metrics

log = logging.getLogger(__name__)

SLOW_FSYNC_SECONDS = 0.5

# The write/fsync boundary, named here so that tests can inject faults (ENOSPC, EIO)
# without touching os itself.
_os_write = os.write
_os_fdatasync = os.fdatasync


def _os_write_dsync(fd: int, data: memoryview) -> int:
    """Append ``data`` and sync it in one ``pwritev2(RWF_DSYNC)`` call; returns the bytes written.

    The offset -1 means the file's own position (the end: session files are
    ``O_APPEND``). Raises OSError like ``write``, and also for a failed sync.
    """
    return os.pwritev(fd, [data], -1, os.RWF_DSYNC)


#: Whether a durable batch is one ``pwritev2(RWF_DSYNC)`` call; cleared for the rest of
#: the process the first time the file system refuses the flag.
_dsync_writes = hasattr(os, "pwritev") and hasattr(os, "RWF_DSYNC")
#: errnos with which pwritev2 refuses RWF_DSYNC itself (nothing is written).
_DSYNC_REFUSED = frozenset({errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS})


class Durability(enum.StrEnum):
    """What an acknowledgement promises."""

    FSYNC = "fsync"
    UNSAFE_NO_FSYNC = "unsafe_no_fsync"


class SyncCall(enum.StrEnum):
    """How ``fsync`` durability is reached per batch (the promise is the same)."""

    #: One ``pwritev2(RWF_DSYNC)`` call; ``write`` + ``fdatasync`` where it is refused.
    PWRITEV2 = "pwritev2"
    #: Always ``write`` then ``fdatasync`` (two calls).
    FDATASYNC = "fdatasync"


@dataclass(frozen=True, slots=True)
class CommitConfig:
    """Group commit settings; tests shrink them."""

    batch_max_records: int = 32
    batch_max_wait_ms: float = 20.0
    linger_ms: float = 0.0
    durability: Durability = Durability.FSYNC
    sync_call: SyncCall = SyncCall.PWRITEV2


def durable_write_method(config: CommitConfig) -> str:
    """How this process makes a batch durable under ``config``, in words for the start-up log."""
    if config.durability is Durability.UNSAFE_NO_FSYNC:
        return "write only, no sync (unsafe_no_fsync: survives a process crash, not a power loss)"
    if config.sync_call is SyncCall.PWRITEV2 and _dsync_writes:
        return "one pwritev2(RWF_DSYNC) call per batch (write + fdatasync if the file system refuses it)"
    return "write + fdatasync per batch"


class StorageHealth:
    """Whether the last batch of any session was written; observers hear of each change.

    Exported as the ``rollout_storage_healthy`` gauge and, by the server, as the
    writer's gRPC health status (NOT_SERVING after a failed batch, SERVING after
    the next good one: the writer keeps accepting appends meanwhile).
    """

    def __init__(self) -> None:
        self.healthy = True
        self._observers: list[Callable[[bool], None]] = []

    def observe(self, observer: Callable[[bool], None]) -> None:
        self._observers.append(observer)

    def report(self, healthy: bool) -> None:
        if healthy != self.healthy:
            self.healthy = healthy
            metrics.STORAGE_HEALTHY.set(1 if healthy else 0)
            for observer in self._observers:
                observer(healthy)


class _BatchWriteError(Exception):
    """An OSError from the write or the fsync of a batch, with which of the two it was."""

    def __init__(self, operation: str, cause: OSError) -> None:
        super().__init__(f"{operation}: {cause}")
        self.operation = operation
        self.cause = cause


@dataclass(slots=True)
class _Pending:
    data: bytes
    records: int
    future: asyncio.Future[None]


#: Batches one flush run writes before it yields its I/O thread to other sessions.
BATCHES_PER_RUN = 8


class SessionCommitter:
    """The single owner of one session file's appends.

    The event loop only queues (:meth:`submit`, under a lock) and resolves futures;
    the flush loop itself runs in an I/O thread and goes straight from one fsync to
    the next batch, so no event-loop round trip sits between two fsyncs. A run
    writes at most :data:`BATCHES_PER_RUN` batches, then re-queues itself behind
    other sessions' runs (fairness between sessions sharing the I/O threads).
    ``on_failure`` is called (in the event loop) after a failed batch so that the
    owner can reload its view of the session from the file.
    """

    def __init__(
        self,
        fd: int,
        size: int,
        config: CommitConfig,
        executor: Executor,
        on_failure: Callable[[], None],
        label: str,
        health: StorageHealth,
    ) -> None:
        self._fd = fd
        self._size = size
        self._config = config
        self._executor = executor
        self._on_failure = on_failure
        self._label = label
        self._health = health
        self._loop = asyncio.get_running_loop()
        self._lock = threading.Lock()
        self._more = threading.Condition(self._lock)
        self._queue: deque[_Pending] = deque()
        self._queued_records = 0
        self._running = False
        self._last: asyncio.Future[None] | None = None
        self._closed = False
        self._durable: list[_Pending] = []  # written, awaiting _acknowledge (under the lock)
        self._acknowledging = False  # an _acknowledge call is scheduled (under the lock)
        self._failing = False  # a batch failed and its _fail has not run yet (under the lock)
        self._refused: list[_Pending] = []  # submitted while _failing (under the lock)

    @property
    def size(self) -> int:
        """Bytes durably written (the file's committed length)."""
        return self._size

    @property
    def idle(self) -> bool:
        """Nothing queued and no flush running: the file may be closed."""
        return not self._running and not self._queue

    @property
    def queued_records(self) -> int:
        """Records waiting for a batch (not counting the one being flushed)."""
        return self._queued_records

    def submit(self, data: bytes, records: int) -> asyncio.Future[None]:
        """Queue encoded lines (event loop); the future resolves once they are durable.

        The future raises StorageWriteError when the write or fsync fails. Cancelling
        it (a caller's deadline or disconnect) does not withdraw the lines, which are
        written anyway: it is a shield over the committer's own future, which
        :meth:`drain` waits for.
        """
        future: asyncio.Future[None] = self._loop.create_future()
        start = False
        with self._lock:
            self._last = future
            if self._failing:  # its seqs were assigned after a batch that failed: refused with it
                self._refused.append(_Pending(data, records, future))
            else:
                self._queue.append(_Pending(data, records, future))
                self._queued_records += records
                start = not self._running
                self._running = True
                self._more.notify()
        if start:
            self._executor.submit(self._flush_run)
        return asyncio.shield(future)

    async def drain(self) -> None:
        """Wait until everything queued so far is written (or has failed)."""
        last = self._last
        if last is not None and not last.done():
            await asyncio.wait([last])

    def _take_batch(self) -> list[_Pending]:
        """The next batch (lock held): up to the record limit, a larger request alone."""
        limit = self._config.batch_max_records
        batch = [self._queue.popleft()]
        count = batch[0].records
        while self._queue and count + self._queue[0].records <= limit:
            item = self._queue.popleft()
            count += item.records
            batch.append(item)
        self._queued_records -= count
        return batch

    def _linger(self) -> None:
        """Give a partly filled batch up to ``linger_ms`` (bounded by the max wait) to fill (lock held)."""
        deadline = time.monotonic() + min(self._config.linger_ms, self._config.batch_max_wait_ms) / 1000
        while self._queued_records < self._config.batch_max_records:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._more.wait(remaining):
                return

    def _flush_run(self) -> None:
        """Write batches until the queue is empty or the run's share is used (I/O thread)."""
        for _ in range(BATCHES_PER_RUN):
            with self._lock:
                if not self._queue:
                    self._running = False
                    return
                if self._config.linger_ms > 0:
                    self._linger()
                batch = self._take_batch()
            data = b"".join(item.data for item in batch) if len(batch) > 1 else batch[0].data
            records = sum(item.records for item in batch)
            started = time.perf_counter()
            try:
                self._write(data)
            except Exception as exc:  # an OSError, or a bug: either way no waiter may hang
                with self._lock:
                    failed = batch + list(self._queue)
                    self._queue.clear()
                    self._queued_records = 0
                    # Until _fail runs, submit refuses (their seqs followed this batch), so
                    # nothing is written, or acknowledged, between this failure and its delivery.
                    self._failing = True
                self._loop.call_soon_threadsafe(self._fail, failed, exc)
                continue
            elapsed = time.perf_counter() - started
            self._size += len(data)
            metrics.BATCH_RECORDS.observe(records)
            metrics.FLUSH_SECONDS.observe(elapsed)
            metrics.APPENDED_RECORDS.inc(records)
            if elapsed > SLOW_FSYNC_SECONDS:
                log.warning(
                    "slow flush: %d records, %d bytes in %.3f s (%s)",
                    records,
                    len(data),
                    elapsed,
                    self._label,
                )
            with self._lock:
                self._durable.extend(batch)
                wake = not self._acknowledging
                self._acknowledging = True
            if wake:  # one event-loop wake-up for every batch made durable before it runs
                self._loop.call_soon_threadsafe(self._acknowledge)
        self._executor.submit(self._flush_run)  # more to do: queue behind other sessions' runs

    def _acknowledge(self) -> None:
        """Resolve the futures of every batch made durable since the last call (event loop).

        The I/O thread wakes the loop once per call, not once per batch: while the
        loop is busy, later batches join the list this call will resolve, so the
        I/O thread does not make a system call (and win the GIL back) for each.
        After a failed batch nothing more is written until its :meth:`_fail` has
        run, so no acknowledgement overtakes a failure.
        """
        with self._lock:
            durable, self._durable = self._durable, []
            self._acknowledging = False
        self._health.report(True)
        for item in durable:
            if not item.future.done():
                item.future.set_result(None)

    def _write(self, data: bytes) -> None:
        """Write ``data`` at the end and make it durable; on failure cut the file back (I/O thread).

        In fsync mode one ``pwritev2(RWF_DSYNC)`` call per chunk (a short write
        is continued), or ``write`` + ``fdatasync`` where that call is refused or
        ``sync_call`` is ``fdatasync``; in unsafe_no_fsync mode ``write`` only.
        Raises _BatchWriteError naming the operation that failed: ``pwritev2``
        (the single call), ``write`` or ``fsync``.
        """
        global _dsync_writes
        view = memoryview(data)
        durable = self._config.durability is Durability.FSYNC
        single_call = durable and self._config.sync_call is SyncCall.PWRITEV2
        operation = "write"
        try:
            while single_call and _dsync_writes and view:
                operation = "pwritev2"
                try:
                    view = view[_os_write_dsync(self._fd, view) :]
                except OSError as exc:
                    if exc.errno not in _DSYNC_REFUSED:
                        raise
                    # Refused (nothing of this call written): the rest goes by write, and the
                    # fdatasync below also covers what earlier calls of this batch wrote.
                    _dsync_writes = False
                    operation = "write"
                    log.info("pwritev2(RWF_DSYNC) refused (%s); using write + fdatasync from now on", exc)
            while view:
                view = view[_os_write(self._fd, view) :]
            if durable and not (single_call and _dsync_writes):
                operation = "fsync"
                _os_fdatasync(self._fd)
        except OSError as exc:
            try:
                os.ftruncate(self._fd, self._size)
                if durable:
                    os.fdatasync(self._fd)
            except OSError:
                log.exception(
                    "could not cut %s back to %d bytes after a failed write", self._label, self._size
                )
            raise _BatchWriteError(operation, exc) from exc

    def _fail(self, failed: list[_Pending], exc: Exception) -> None:
        """Refuse the failed batch and every request queued or submitted behind it (event loop).

        The requests behind it are refused too: their seqs followed the failed
        batch's. Once this has run, submit queues again (the owner has reloaded
        its view of the file through ``on_failure``).
        """
        with self._lock:
            failed = failed + self._refused
            self._refused = []
            self._failing = False
        metrics.WRITE_ERRORS.inc()
        self._health.report(False)
        if isinstance(exc, _BatchWriteError):
            operation, cause = exc.operation, exc.cause
            errno_name = errno.errorcode.get(cause.errno or 0, "")
            reason = f"{operation} failed: {cause.strerror or cause}"
        else:
            operation, errno_name, reason = "write", "", f"write failed: {exc}"
        log.error("%s for %s; %d requests refused, nothing of them kept", reason, self._label, len(failed))
        error = StorageWriteError(
            f"writing the session file failed ({reason}); nothing of this request was kept;"
            " retry once storage recovers",
            errno_name=errno_name,
            operation=operation,
        )
        for item in failed:
            if not item.future.done():
                item.future.set_exception(error)
        self._on_failure()

    def close(self) -> None:
        """Close the file; call only after :meth:`drain`."""
        if not self._closed:
            self._closed = True
            os.close(self._fd)
