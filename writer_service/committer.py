"""Group commit across sessions: durability rounds (docs/spec.md §2.2, §2.10).

One :class:`GroupCommitter` per writer makes every session file durable. Each
open session file has a :class:`SessionLog`: callers hand it encoded lines
(:meth:`SessionLog.submit`) and await the returned future. One flush loop, in a
thread of its own (waiting while nothing is queued), runs **durability rounds**:
a round takes one batch from every session with records queued, writes each
batch to its file, makes all of them durable together, then resolves every
waiter of the round with one event-loop wake-up.

How a round is made durable (``fsync`` durability, the default):

* one file in the round: one ``pwritev2(..., RWF_DSYNC)`` call (Linux 4.7+; the
  write and its data sync in one system call, the promise of ``write`` +
  ``fdatasync``), or ``write`` + ``fdatasync`` where the file system refuses the
  flag (``EOPNOTSUPP``/``EINVAL``: the fallback then holds for the process) or
  ``sync_call`` is ``fdatasync``;
* several files, ``round_sync=syncfs`` (default): a plain ``write`` per file, then
  one ``syncfs()`` of the data root's file system. ``syncfs`` writes back every
  dirty page of that file system, so the round costs about one sync instead of
  one per file (measured on this machine kind: 64 files, one line each, ~8x the
  records/s of one ``fdatasync`` per file; bench/fleet.py prints both). It also
  flushes other programs' files on that file system: on a shared disk whose other
  users write a lot, give the data root its own volume (or use ``per_file``).
  Since Linux 5.8 ``syncfs`` reports write-back errors of the file system, which
  the round takes as its own;
* several files, ``round_sync=per_file``: each file's batch made durable by its
  own call as for one file, in turn.

Batching is adaptive: while no round runs, a request is written at once; requests
that arrive during a round form the next one. A session's batch holds at most
``batch_max_records`` records, except that one request larger than that is never
split (it is its own batch). ``batch_max_wait_ms`` bounds how long a round may
linger for company when ``linger_ms`` > 0 (0 by default: the previous round is
the only wait).

A failed write or sync fails the whole round: every file of the round is cut back
to its length before the round (no partial line anywhere), and every waiter of
every session in it, and everything queued behind them (their seqs were assigned
after), is refused with StorageWriteError naming the errno and the operation.
A ``syncfs`` error cannot be traced to one file, so no session of the round is
acknowledged. The committer stays usable: the next round writes again.
``unsafe_no_fsync`` durability leaves the bytes in OS buffers, surviving a process
crash only.

Ownership (writer_service.ownership): each session file belongs to a shard, opened
under the epoch its writer owned it at. Before a round is written, each batch's shard
is asked for (:meth:`Ownership.owns`); a batch whose shard is no longer owned at its
epoch is not written. After the round is durable, each batch asks
:meth:`Ownership.may_acknowledge` with the time the round became durable. A batch
refused either way fails its waiters, and everything queued behind them, with
UNAVAILABLE (NotOwnerError), like a failed round but without cutting anything back (a
writer that lost a shard writes nothing more to it); its session is dropped by its
owner (``on_failure``), and nothing more is written for that shard under that epoch
(:meth:`GroupCommitter.epoch_of` refuses it). The other batches of the round are
acknowledged as usual.

For tests of fencing (docs/cluster.md §3.1), ``ROLLOUT_TEST_STOP_BEFORE_SYNC`` (read once, when
the committer is made) set to some text makes the writer stop itself with SIGSTOP, once, in the
first round one of whose batches holds that text (as its UTF-8 bytes): after the round's writes,
before its sync. Whoever sends SIGCONT resumes the round: its sync, then the acknowledgement
check, which then sees the time the round became durable.
"""

from __future__ import annotations

import asyncio
import ctypes
import enum
import errno
import logging
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from shared.errors import LedgerError, NotOwnerError, StorageWriteError
from writer_service import metrics
from writer_service.ownership import EmbeddedOwnership, Ownership

log = logging.getLogger(__name__)

SLOW_FSYNC_SECONDS = 0.5
#: The test hook (module docstring): text whose round stops the writer between write and sync.
STOP_BEFORE_SYNC_ENV = "ROLLOUT_TEST_STOP_BEFORE_SYNC"

# The write/sync boundary, named here so that tests can inject faults (ENOSPC, EIO)
# without touching os itself.
_os_write = os.write
_os_fdatasync = os.fdatasync
_libc = ctypes.CDLL(None, use_errno=True)


def _os_write_dsync(fd: int, data: memoryview) -> int:
    """Append ``data`` and sync it in one ``pwritev2(RWF_DSYNC)`` call; returns the bytes written.

    The offset -1 means the file's own position (the end: session files are
    ``O_APPEND``). Raises OSError like ``write``, and also for a failed sync.
    """
    return os.pwritev(fd, [data], -1, os.RWF_DSYNC)


def _os_syncfs(fd: int) -> None:
    """``syncfs(2)``: write back and wait for every dirty page of ``fd``'s file system.

    Raises OSError (the file system's write-back error since Linux 5.8).
    """
    if _libc.syncfs(fd) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


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
    """How ``fsync`` durability is reached for one file's batch (the promise is the same)."""

    #: One ``pwritev2(RWF_DSYNC)`` call; ``write`` + ``fdatasync`` where it is refused.
    PWRITEV2 = "pwritev2"
    #: Always ``write`` then ``fdatasync`` (two calls).
    FDATASYNC = "fdatasync"


class RoundSync(enum.StrEnum):
    """How a durability round of several files is made durable (the promise is the same)."""

    #: A ``write`` per file, then one ``syncfs()`` of the file system.
    SYNCFS = "syncfs"
    #: Each file's batch synced by its own call (``sync_call``), in turn.
    PER_FILE = "per_file"


@dataclass(frozen=True, slots=True)
class CommitConfig:
    """Group commit settings; tests shrink them."""

    batch_max_records: int = 32
    batch_max_wait_ms: float = 20.0
    linger_ms: float = 0.0
    durability: Durability = Durability.FSYNC
    sync_call: SyncCall = SyncCall.PWRITEV2
    round_sync: RoundSync = RoundSync.SYNCFS


def durable_write_method(config: CommitConfig) -> str:
    """How this process makes a round durable under ``config``, in words for the start-up log."""
    if config.durability is Durability.UNSAFE_NO_FSYNC:
        return "write only, no sync (unsafe_no_fsync: survives a process crash, not a power loss)"
    if config.sync_call is SyncCall.PWRITEV2 and _dsync_writes:
        one = "one pwritev2(RWF_DSYNC) call per batch (write + fdatasync if the file system refuses it)"
    else:
        one = "write + fdatasync per batch"
    if config.round_sync is RoundSync.SYNCFS:
        return f"{one} for a round of one session; a write per file and one syncfs() for a round of several"
    return f"{one}, for every session of a round in turn"


class StorageHealth:
    """Whether the last round was written; observers hear of each change.

    Exported as the ``rollout_storage_healthy`` gauge and, by the server, as the
    writer's gRPC health status (NOT_SERVING after a failed round, SERVING after
    the next good one, or once a probe of the storage passes: writer_service.storage_probe;
    the writer keeps accepting appends meanwhile). ``failed_bytes``: the size of the
    last round that failed (what a probe wants room for).
    """

    def __init__(self) -> None:
        self.healthy = True
        self.failed_bytes = 0
        self._observers: list[Callable[[bool], None]] = []

    def observe(self, observer: Callable[[bool], None]) -> None:
        self._observers.append(observer)

    def report(self, healthy: bool, failed_bytes: int = 0) -> None:
        """Note a round written (True) or failed (False, with the bytes it was to write)."""
        if not healthy:
            self.failed_bytes = failed_bytes
        if healthy != self.healthy:
            self.healthy = healthy
            metrics.STORAGE_HEALTHY.set(1 if healthy else 0)
            for observer in self._observers:
                observer(healthy)


class _BatchWriteError(Exception):
    """An OSError from a write or sync of a round, with which operation it was."""

    def __init__(self, operation: str, cause: OSError) -> None:
        super().__init__(f"{operation}: {cause}")
        self.operation = operation
        self.cause = cause


@dataclass(slots=True)
class _Pending:
    data: bytes
    records: int
    future: asyncio.Future[None]
    #: time.perf_counter() when it was queued: its append latency (queue + write + sync) starts here.
    queued_at: float = 0.0


@dataclass(slots=True)
class _Batch:
    """One session's part of a round: its requests, their bytes, and the file's length before."""

    session: SessionLog
    items: list[_Pending]
    data: bytes
    records: int
    size_before: int


class SessionLog:
    """One open session file's queue of encoded lines (appends go through the rounds).

    The event loop only queues (:meth:`submit`) and resolves futures; the rounds
    run in an I/O thread. ``on_failure`` is called (in the event loop) after a
    failed round that held this session, so that the owner reloads its view of
    the session from the file.
    """

    def __init__(
        self,
        committer: GroupCommitter,
        fd: int,
        size: int,
        label: str,
        on_failure: Callable[[], None],
        shard: int,
        epoch: int,
    ) -> None:
        self._committer = committer
        #: The shard of the session and the epoch its file was opened under (writer_service.ownership).
        self.shard = shard
        self.epoch = epoch
        self.fd = fd
        self._size = size
        self.label = label
        self.on_failure = on_failure
        self.queue: deque[_Pending] = deque()
        self.queued_records = 0
        #: Bytes submitted so far and not failed: the file's length once everything queued is durable.
        self.submitted_bytes = size
        self.in_round = False
        self.failing = False  # a round with this session failed and its _fail has not run yet
        self.refused: list[_Pending] = []  # submitted while failing
        self._last: asyncio.Future[None] | None = None
        self._closed = False

    @property
    def size(self) -> int:
        """Bytes durably written (the file's committed length)."""
        return self._size

    @property
    def idle(self) -> bool:
        """Nothing queued and nothing in a round: the file may be closed."""
        return not self.queue and not self.in_round

    def submit(self, data: bytes, records: int) -> asyncio.Future[None]:
        """Queue encoded lines (event loop); the future resolves once they are durable.

        The future raises StorageWriteError when the round fails. Cancelling it (a
        caller's deadline or disconnect) does not withdraw the lines, which are
        written anyway: it is a shield over the committer's own future, which
        :meth:`drain` waits for.
        """
        future = self._committer.queue(self, data, records)
        self._last = future
        return asyncio.shield(future)

    @property
    def last_durable(self) -> asyncio.Future[None] | None:
        """The committer's own future of the last :meth:`submit` (what :meth:`submit` returns is a
        shield over it, so no caller's cancellation reaches it): an answer kept for later callers
        (a retried request id) holds this one, and each caller awaits its own shield of it."""
        return self._last

    async def drain(self) -> None:
        """Wait until everything queued so far is written (or has failed)."""
        last = self._last
        if last is not None and not last.done():
            await asyncio.wait([last])

    def write_batch(self, data: bytes, sync: bool) -> None:
        """Append ``data`` to the file (I/O thread); with ``sync``, durably (one file's round).

        With ``sync``: one ``pwritev2(RWF_DSYNC)`` call per chunk (a short write is
        continued), or ``write`` + ``fdatasync`` where that call is refused or
        ``sync_call`` is ``fdatasync``. Without: ``write`` only (a round's sync
        follows, or unsafe_no_fsync). Raises _BatchWriteError naming the failed
        operation: ``pwritev2``, ``write`` or ``fsync``.
        """
        global _dsync_writes
        view = memoryview(data)
        single_call = sync and self._committer.config.sync_call is SyncCall.PWRITEV2
        operation = "write"
        try:
            while single_call and _dsync_writes and view:
                operation = "pwritev2"
                try:
                    view = view[_os_write_dsync(self.fd, view) :]
                except OSError as exc:
                    if exc.errno not in _DSYNC_REFUSED:
                        raise
                    # Refused (nothing of this call written): the rest goes by write, and the
                    # fdatasync below also covers what earlier calls of this batch wrote.
                    _dsync_writes = False
                    operation = "write"
                    log.info("pwritev2(RWF_DSYNC) refused (%s); using write + fdatasync from now on", exc)
            while view:
                view = view[_os_write(self.fd, view) :]
            if sync and not (single_call and _dsync_writes):
                operation = "fsync"
                _os_fdatasync(self.fd)
        except OSError as exc:
            raise _BatchWriteError(operation, exc) from exc

    def sync(self) -> None:
        """``fdatasync`` the file (I/O thread); raises _BatchWriteError (``fsync``)."""
        try:
            _os_fdatasync(self.fd)
        except OSError as exc:
            raise _BatchWriteError("fsync", exc) from exc

    def cut_back(self, size: int, sync: bool) -> None:
        """Truncate the file to ``size`` bytes after a failed round (I/O thread); logs on failure."""
        try:
            os.ftruncate(self.fd, size)
            if sync:
                os.fdatasync(self.fd)
        except OSError:
            log.exception("could not cut %s back to %d bytes after a failed write", self.label, size)

    def close(self) -> None:
        """Close the file; call only after :meth:`drain`."""
        if not self._closed:
            self._closed = True
            os.close(self.fd)


class GroupCommitter:
    """The writer's one flush loop: durability rounds over every session with records queued."""

    def __init__(
        self, config: CommitConfig, health: StorageHealth, ownership: Ownership | None = None
    ) -> None:
        self.config = config
        self._health = health
        self.ownership: Ownership = ownership if ownership is not None else EmbeddedOwnership()
        #: (shard, epoch) whose acknowledgement was refused: nothing more is written under them.
        self._fenced: set[tuple[int, int]] = set()
        stop_text = os.environ.get(STOP_BEFORE_SYNC_ENV)
        #: The test hook's text (module docstring); None once used, or when not set.
        self._stop_before_sync: bytes | None = stop_text.encode() if stop_text else None
        self._loop = asyncio.get_running_loop()
        self._lock = threading.Lock()
        self._more = threading.Condition(self._lock)  # a lingering round waits on it for company
        self._work = threading.Condition(self._lock)  # the idle rounds' thread waits on it
        self._ready: dict[SessionLog, None] = {}  # sessions with records queued, in arrival order
        self._queued_records = 0
        self._closing = False
        self._durable: list[_Pending] = []  # written, awaiting _acknowledge (under the lock)
        self._acknowledging = False  # an _acknowledge call is scheduled (under the lock)
        # The rounds' own thread, waiting on _more while nothing is queued: a request to an
        # idle writer costs one notify, not a job handed to a thread pool.
        self._thread = threading.Thread(target=self._run_rounds, name="rollout-rounds", daemon=True)
        self._thread.start()
        metrics.watch_queue(self)

    @property
    def queued_records(self) -> int:
        """Records queued and not yet taken into a round, over every session (the queue depth)."""
        return self._queued_records

    def open(
        self, fd: int, size: int, label: str, on_failure: Callable[[], None], shard: int, epoch: int
    ) -> SessionLog:
        """A SessionLog for an open session file of ``size`` committed bytes, of ``shard`` opened
        under ``epoch`` (:meth:`epoch_of`)."""
        return SessionLog(self, fd, size, label, on_failure, shard, epoch)

    def epoch_of(self, shard: int) -> int:
        """The epoch under which this writer may write ``shard`` now (ask before opening or creating
        one of its files). Raises NotOwnerError when it does not own it, or when an acknowledgement
        was refused under its current epoch."""
        epoch = self.ownership.owns(shard)
        if epoch is None:
            raise NotOwnerError(
                f"this writer does not own shard {shard}; retry",
                shard=shard,
                owner=self.ownership.owner_of(shard),
            )
        with self._lock:
            refusal = self._write_refusal(shard, epoch, epoch)
        if refusal is not None:
            raise refusal
        return epoch

    def _write_refusal(self, shard: int, epoch: int, owned: int | None) -> NotOwnerError | None:
        """Why nothing may be written to ``shard`` under ``epoch`` while the ownership answers
        ``owned`` for it (None: it may; the lock is held)."""
        if owned != epoch:
            return NotOwnerError(
                f"this writer no longer owns shard {shard} at epoch {epoch}; nothing of this request"
                " was written; retry",
                shard=shard,
                epoch=epoch,
                owner=self.ownership.owner_of(shard),
            )
        if (shard, epoch) in self._fenced:
            return NotOwnerError(
                f"this writer's ownership of shard {shard} (epoch {epoch}) ended; nothing more is"
                " written to it under that epoch; nothing of this request was written; retry",
                shard=shard,
                epoch=epoch,
                owner=self.ownership.owner_of(shard),
            )
        return None

    def may_acknowledge(self, shard: int, epoch: int, durable_at: float) -> bool:
        """:meth:`Ownership.may_acknowledge`; a refusal fences ``shard`` at ``epoch``: nothing more
        is written to it under that epoch (:meth:`epoch_of` refuses it). Any thread."""
        if self.ownership.may_acknowledge(shard, epoch, durable_at):
            return True
        with self._lock:
            self._fenced.add((shard, epoch))
        return False

    def queue(self, session: SessionLog, data: bytes, records: int) -> asyncio.Future[None]:
        """Queue a request's lines for ``session`` (event loop); see :meth:`SessionLog.submit`."""
        future: asyncio.Future[None] = self._loop.create_future()
        with self._lock:
            if session.failing:  # its seqs were assigned after a round that failed: refused with it
                session.refused.append(_Pending(data, records, future))
                return future
            session.queue.append(_Pending(data, records, future, time.perf_counter()))
            session.queued_records += records
            session.submitted_bytes += len(data)
            self._queued_records += records
            self._ready[session] = None
            self._more.notify()
            self._work.notify()
        return future

    def close(self) -> None:
        """Stop the rounds' thread once everything queued is written (blocking; call after draining)."""
        with self._lock:
            self._closing = True
            self._work.notify()
        self._thread.join()

    def _linger(self) -> None:
        """Give a round up to ``linger_ms`` (bounded by the max wait) to fill one batch (lock held)."""
        deadline = time.monotonic() + min(self.config.linger_ms, self.config.batch_max_wait_ms) / 1000
        while not any(s.queued_records >= self.config.batch_max_records for s in self._ready):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._more.wait(remaining):
                return

    def _take_round(self) -> list[_Batch]:
        """One batch of every ready session (lock held): up to the record limit, a larger request alone."""
        limit = self.config.batch_max_records
        batches: list[_Batch] = []
        for session in list(self._ready):
            queue = session.queue
            items = [queue.popleft()]
            count = items[0].records
            while queue and count + queue[0].records <= limit:
                item = queue.popleft()
                count += item.records
                items.append(item)
            session.queued_records -= count
            self._queued_records -= count
            session.in_round = True
            if not queue:
                del self._ready[session]
            data = b"".join(item.data for item in items) if len(items) > 1 else items[0].data
            batches.append(_Batch(session, items, data, count, session.size))
        return batches

    def _run_rounds(self) -> None:
        """Run a round whenever a session has records queued, until closed (the rounds' thread)."""
        while True:
            with self._lock:
                while not self._ready:
                    if self._closing:
                        return
                    self._work.wait()
                if self.config.linger_ms > 0:
                    self._linger()
                batches = self._take_round()
            batches = self._owned(batches)
            if not batches:
                continue
            started = time.perf_counter()
            try:
                self._write_round(batches)
            except Exception as exc:  # an OSError, or a bug: either way no waiter may hang
                self._round_failed(batches, exc)
                continue
            elapsed = time.perf_counter() - started
            batches = self._acknowledged(batches, time.monotonic())
            with self._lock:
                for batch in batches:
                    batch.session._size += len(batch.data)
                    batch.session.in_round = False
                    self._durable.extend(batch.items)
                wake = not self._acknowledging
                self._acknowledging = True
            if wake:  # one event-loop wake-up for every round made durable before it runs
                self._loop.call_soon_threadsafe(self._acknowledge)
            # Metrics and logs after the wake-up: they are not on the way to the acknowledgement.
            durable_at = started + elapsed
            records = sum(batch.records for batch in batches)
            for batch in batches:
                for item in batch.items:
                    metrics.APPEND_SECONDS.observe(durable_at - item.queued_at)
            metrics.ROUND_SESSIONS.observe(len(batches))
            metrics.FLUSH_SECONDS.observe(elapsed)
            metrics.APPENDED_RECORDS.inc(records)
            for batch in batches:
                metrics.BATCH_RECORDS.observe(batch.records)
            if elapsed > SLOW_FSYNC_SECONDS:
                log.warning("slow round: %d sessions, %d records in %.3f s", len(batches), records, elapsed)

    def _owned(self, batches: list[_Batch]) -> list[_Batch]:
        """The batches whose shard this writer still owns at their epoch; the others are refused,
        nothing of them written (rounds' thread)."""
        refused: list[tuple[_Batch, NotOwnerError]] = []
        owned: list[_Batch] = []
        answers: dict[int, int | None] = {}
        for batch in batches:
            if batch.session.shard not in answers:
                answers[batch.session.shard] = self.ownership.owns(batch.session.shard)
        with self._lock:
            for batch in batches:
                shard = batch.session.shard
                refusal = self._write_refusal(shard, batch.session.epoch, answers[shard])
                if refusal is None:
                    owned.append(batch)
                else:
                    refused.append((batch, refusal))
        for batch, refusal in refused:
            self._loop.call_soon_threadsafe(self._fail, self._take_out([batch]), refusal)
        return owned

    def _acknowledged(self, batches: list[_Batch], durable_at: float) -> list[_Batch]:
        """The batches of a durable round that may be acknowledged (:meth:`Ownership.may_acknowledge`);
        the others fail, their shard and epoch fenced (rounds' thread). Their bytes stay in the
        file, unacknowledged: a writer whose ownership ended cuts nothing back."""
        answers: dict[tuple[int, int], bool] = {}
        kept: list[_Batch] = []
        for batch in batches:
            key = (batch.session.shard, batch.session.epoch)
            if key not in answers:
                answers[key] = self.may_acknowledge(key[0], key[1], durable_at)
            if answers[key]:
                kept.append(batch)
                continue
            with self._lock:
                batch.session._size += len(batch.data)
            log.error(
                "ownership of shard %d (epoch %d) ended before a round was durable: %s is not acknowledged"
                " and nothing more is written to the shard under that epoch",
                key[0],
                key[1],
                batch.session.label,
            )
            error = NotOwnerError(
                f"this writer's ownership of shard {key[0]} (epoch {key[1]}) ended before this request"
                " was durable; it was not acknowledged and may be in the file; retry with the same"
                " request id (it is then answered once, never written twice)",
                shard=key[0],
                epoch=key[1],
                owner=self.ownership.owner_of(key[0]),
            )
            self._loop.call_soon_threadsafe(self._fail, self._take_out([batch]), error)
        return kept

    def _write_round(self, batches: list[_Batch]) -> None:
        """Write every batch and make the round durable; on failure cut every file back (I/O thread).

        Raises _BatchWriteError naming the failed operation (``pwritev2``,
        ``write``, ``fsync`` or ``syncfs``).
        """
        durable = self.config.durability is Durability.FSYNC
        one_by_one = len(batches) == 1 or self.config.round_sync is RoundSync.PER_FILE
        stop = self._stop_before_sync is not None and any(
            self._stop_before_sync in batch.data for batch in batches
        )
        try:
            for batch in batches:
                batch.session.write_batch(batch.data, sync=durable and one_by_one and not stop)
            if stop:
                self._stop_before_sync = None
                log.warning(
                    "test hook %s: stopping between a round's write and its sync", STOP_BEFORE_SYNC_ENV
                )
                os.kill(os.getpid(), signal.SIGSTOP)
                if durable and one_by_one:
                    for batch in batches:
                        batch.session.sync()
            if durable and not one_by_one:
                try:
                    _os_syncfs(batches[0].session.fd)
                except OSError as exc:
                    raise _BatchWriteError("syncfs", exc) from exc
        except _BatchWriteError:
            for batch in batches:
                batch.session.cut_back(batch.size_before, durable)
            raise

    def _round_failed(self, batches: list[_Batch], exc: Exception) -> None:
        """Take a failed round's sessions out of the rounds until :meth:`_fail` runs (I/O thread)."""
        failures = self._take_out(batches)
        size = sum(len(batch.data) for batch in batches)
        self._loop.call_soon_threadsafe(self._write_failed, failures, exc, size)

    def _take_out(self, batches: list[_Batch]) -> list[tuple[SessionLog, list[_Pending]]]:
        """Take the sessions of refused batches out of the rounds until :meth:`_fail` runs, with the
        requests to refuse: the batch's and every one queued behind it (rounds' thread)."""
        failures: list[tuple[SessionLog, list[_Pending]]] = []
        with self._lock:
            for batch in batches:
                session = batch.session
                failed = batch.items + list(session.queue)
                self._queued_records -= session.queued_records
                session.queue.clear()
                session.queued_records = 0
                session.submitted_bytes = session.size
                session.in_round = False
                self._ready.pop(session, None)
                # Until _fail runs, queue() refuses (their seqs followed this round), so nothing
                # of these sessions is written, or acknowledged, between the failure and its delivery.
                session.failing = True
                failures.append((session, failed))
        return failures

    def _acknowledge(self) -> None:
        """Resolve the futures of every round made durable since the last call (event loop).

        The I/O thread wakes the loop once per call, not once per round: while the
        loop is busy, later rounds join the list this call will resolve. After a
        failed round nothing more of its sessions is written until its
        :meth:`_fail` has run, so no acknowledgement overtakes a failure.
        """
        with self._lock:
            durable, self._durable = self._durable, []
            self._acknowledging = False
        self._health.report(True)
        for item in durable:
            if not item.future.done():
                item.future.set_result(None)

    def _write_failed(
        self, failures: list[tuple[SessionLog, list[_Pending]]], exc: Exception, size: int
    ) -> None:
        """Refuse every request of a failed round (of ``size`` bytes) and every one queued or
        submitted behind (event loop); storage is reported unhealthy."""
        metrics.WRITE_ERRORS.inc()
        self._health.report(False, size)
        if isinstance(exc, _BatchWriteError):
            operation, cause = exc.operation, exc.cause
            errno_name = errno.errorcode.get(cause.errno or 0, "")
            reason = f"{operation} failed: {cause.strerror or cause}"
        else:
            operation, errno_name, reason = "write", "", f"write failed: {exc}"
        error = StorageWriteError(
            f"writing the session file failed ({reason}); nothing of this request was kept;"
            " retry once storage recovers",
            errno_name=errno_name,
            operation=operation,
        )
        self._fail(failures, error, f"{reason}; nothing of them kept")

    def _fail(
        self, failures: list[tuple[SessionLog, list[_Pending]]], error: LedgerError, reason: str = ""
    ) -> None:
        """Refuse the requests of refused batches with ``error`` (event loop).

        Once this has run, each session queues again (its owner has reloaded its
        view of the file through ``on_failure``).
        """
        for session, failed in failures:
            with self._lock:
                failed = failed + session.refused
                session.refused = []
                session.failing = False
            log.error("%d requests of %s refused: %s", len(failed), session.label, reason or error)
            for item in failed:
                if not item.future.done():
                    item.future.set_exception(error)
            session.on_failure()
