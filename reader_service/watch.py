"""Following sessions live (WatchSession, docs/spec.md §6): catch-up from a seq, then each new record.

A watcher asks for the records of one session from ``from_seq`` on. It first reads
what is already written (catch-up, ~1 MiB of lines at a time, from the offset a
bisection over the line prefixes finds), then takes the new lines as they land.

New lines are found as they land: the reader holds one inotify instance, and
each watched session file has one :class:`SessionTail` shared by all of its
watchers: one inotify watch, one open descriptor, one reader of the bytes after
its last offset. inotify reports only what this host's kernel wrote: a writer on
another host appending through its own mount of a shared volume raises no event
(issue 23 item 5), so every :data:`DEFAULT_POLL_SECONDS` the hub also looks at all
watched files at once (one fstat and one stat of the path each, on one I/O-thread
job) and reads those that grew or were replaced: a record written elsewhere
arrives within about that bound. On each write it reads only the new complete lines (a last line
without ``\\n`` is not committed: it is read again once whole), parses each once,
encodes them once, and hands the same batch to every watcher (fan-out). A watcher
that falls more than :data:`WATCHER_QUEUE_BYTES` behind drops its queue and reads
the file itself from where it stands, so a slow client holds no memory for long.

The stream of a stopped session ends after its stop record (the tail is stopped
when the last complete line is a ``stop`` record and the file ends there). A
checkpoint without its stop record does not end it: the writer writes both
together, and a reader may see the first before the second.

The file under a watch may change in two ways the stream cannot follow, both
ending it with :class:`~shared.errors.SessionFileChangedError` (ABORTED): it is replaced (another file at
its name, or none: inotify reports the move or the dropped link), or it is cut
below what the tail already read (the writer rolls back a batch whose write
failed; seen as a smaller size, or a seq that does not follow the last one). A file that
goes because its session was deleted (a deletion record names it: docs/deletion.md) ends
the stream with :class:`~shared.errors.SessionNotFoundError` (NOT_FOUND) instead.
:meth:`WatchHub.close` ends every stream with :class:`~shared.errors.WatchClosedError`
(UNAVAILABLE).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from inotify_simple import INotify, flags

from shared.errors import SessionFileChangedError, SessionNotFoundError, WatchClosedError
from shared.layout import open_session_file, session_file_stat
from shared.reasons import SESSION_FILE_REPLACED, SESSION_FILE_TRUNCATED
from shared.records import RecordType, line_seq, record_of_line

log = logging.getLogger(__name__)

#: Bytes of lines one catch-up read (and one message of it) holds, about.
CHUNK_BYTES = 1024 * 1024
#: Live bytes a watcher may have queued before it drops them and reads the file itself.
WATCHER_QUEUE_BYTES = 8 * 1024 * 1024
#: Seconds between two looks at every watched file (0: inotify alone, one host only).
DEFAULT_POLL_SECONDS = 1.0
#: Below this many bytes left, bisection stops and lines are read in order.
_SCAN_BYTES = 64 * 1024
_WATCH_MASK = flags.MODIFY | flags.ATTRIB | flags.MOVE_SELF | flags.DELETE_SELF
_REREAD_MASK = flags.ATTRIB | flags.MOVE_SELF | flags.DELETE_SELF | flags.IGNORED

#: Runs a blocking function on an I/O thread (the reader's pool) and awaits its result.
Runner = Callable[..., Awaitable[Any]]
#: Encodes lines into one serialized WatchSessionResponse (reader_service.wire.watch_reply).
Encoder = Callable[[Sequence["WatchedLine"]], bytes]


class WatchedLine(NamedTuple):
    """One complete line of a session file: its seq, type and ts as written, and its bytes
    without ``\\n``. A line that is not a record (unparseable, NUL bytes) has seq -1 and type ""."""

    seq: int
    type: str
    ts: str
    line: bytes


def parse_line(raw: bytes) -> WatchedLine:
    """A line as a :class:`WatchedLine`; a line that holds no record (shared.records.record_of_line,
    which skips NUL bytes before one) has seq -1."""
    record = record_of_line(raw)
    if record is None:
        return WatchedLine(-1, "", "", raw)
    ts = record.get("ts")
    return WatchedLine(record["seq"], record["type"], ts if isinstance(ts, str) else "", raw)


def read_lines(fd: int, start: int, end: int, max_bytes: int = CHUNK_BYTES) -> tuple[list[WatchedLine], int]:
    """The complete lines from byte ``start`` up to ``end`` (about ``max_bytes`` of them, more
    when one line is longer), and the offset after the last one (``start`` when none is complete).
    Raises OSError when the file cannot be read."""
    data = os.pread(fd, min(max_bytes, end - start), start)
    cut = data.rfind(b"\n")
    while cut < 0 and start + len(data) < end:  # one line longer than max_bytes
        more = os.pread(fd, min(len(data) or max_bytes, end - start - len(data)), start + len(data))
        if not more:
            break
        searched = len(data)
        data += more
        cut = data.find(b"\n", searched)
    if cut < 0:
        return [], start
    return [parse_line(raw) for raw in data[:cut].split(b"\n")], start + cut + 1


def start_offset(fd: int, from_seq: int, end: int) -> int:
    """A line start at or before the first line to send for ``from_seq``: every record before
    it has a smaller seq. Bisects over the seqs of lines in the writer's form
    (shared.records.line_seq; two small reads a step); lines of another form stop the
    bisection there (the caller reads on in order)."""
    low, high = 0, end
    if from_seq <= 0:
        return 0
    while high - low > _SCAN_BYTES:
        middle = (low + high) // 2
        window = os.pread(fd, 4096, middle - 1)
        newline = window.find(b"\n")
        if newline < 0:
            break
        line_start = middle + newline
        if line_start >= high:
            break
        seq = line_seq(os.pread(fd, 256, line_start))  # as the writer's searches back read it
        if seq is None:
            break
        if seq < from_seq:
            low = line_start
        else:
            high = line_start
    return low


def committed_state(fd: int) -> tuple[int, int, bool, int]:
    """(committed end, file size, whether the last complete line is a stop record and nothing
    follows it, the last record's seq or -1): where a new tail starts. Reads the last line only."""
    size = os.fstat(fd).st_size
    window = min(size, 64 * 1024)
    while True:
        data = os.pread(fd, window, size - window)
        cut = data.rfind(b"\n")
        before = data.rfind(b"\n", 0, cut) if cut >= 0 else -1
        if before >= 0 or window == size:
            break
        window = min(size, window * 4)
    if cut < 0:
        return 0, size, False, -1
    end = size - len(data) + cut + 1
    last = parse_line(data[before + 1 : cut])
    return end, size, last.type == RecordType.STOP and end == size, last.seq


@dataclass(eq=False)
class LiveBatch:
    """New lines a tail read at bytes ``start``..``end``, and their encoded reply (shared)."""

    start: int
    end: int
    lines: list[WatchedLine]
    reply: bytes


class _SeqFilter:
    """Which lines a watcher sends: every line after the last record whose seq is below
    ``from_seq`` (damaged lines in between are held until a record decides)."""

    def __init__(self, from_seq: int) -> None:
        self.from_seq = from_seq
        self.started = from_seq <= 0
        self.held: list[WatchedLine] = []

    def admit(self, lines: list[WatchedLine]) -> list[WatchedLine]:
        if self.started:
            return lines
        admitted: list[WatchedLine] = []
        for line in lines:
            if self.started:
                admitted.append(line)
            elif line.seq < 0:
                self.held.append(line)
            elif line.seq < self.from_seq:
                self.held.clear()
            else:
                self.started = True
                admitted += self.held
                admitted.append(line)
                self.held.clear()
        return admitted


@dataclass(eq=False)
class _Watcher:
    """One WatchSession stream's place in a tail's fan-out: the live batches queued for it."""

    filter: _SeqFilter
    queue: deque[LiveBatch] = field(default_factory=deque)
    queued_bytes: int = 0
    wake: asyncio.Event = field(default_factory=asyncio.Event)

    def offer(self, batch: LiveBatch) -> None:
        """Queue a live batch, or drop the whole queue when over :data:`WATCHER_QUEUE_BYTES`
        (the watcher then reads the file from where it stands)."""
        self.queue.append(batch)
        self.queued_bytes += len(batch.reply)
        if self.queued_bytes > WATCHER_QUEUE_BYTES:
            self.queue.clear()
            self.queued_bytes = 0
        self.wake.set()

    def batch_at(self, position: int) -> LiveBatch | None:
        """The queued batch starting at ``position`` (batches already covered are dropped)."""
        while self.queue and self.queue[0].end <= position:
            self.queued_bytes -= len(self.queue.popleft().reply)
        if self.queue and self.queue[0].start == position:
            batch = self.queue.popleft()
            self.queued_bytes -= len(batch.reply)
            return batch
        return None


@dataclass(eq=False)
class SessionTail:
    """One watched session file: its descriptor, inotify watch and committed offset, shared by
    its watchers. ``offset``: bytes of complete lines read; ``stopped``: the line ending there
    is a stop record and the file ends there; ``failure``: why the watches of it must end."""

    session_id: str
    path: Path
    fd: int
    identity: tuple[int, int]
    wd: int = -1
    offset: int = 0
    last_seq: int = -1
    stopped: bool = False
    failure: Exception | None = None
    watchers: set[_Watcher] = field(default_factory=set)
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    reading: bool = False
    read_again: bool = False
    check_identity: bool = False
    released: bool = False

    def fail(self, error: Exception) -> None:
        """End every watch of this file with ``error``."""
        if self.failure is None:
            self.failure = error
        for watcher in self.watchers:
            watcher.wake.set()

    def publish(self, batch: LiveBatch, stopped: bool) -> None:
        """Advance past ``batch`` and hand it to every watcher."""
        self.offset = batch.end
        self.stopped = stopped
        for line in reversed(batch.lines):
            if line.seq >= 0:
                self.last_seq = line.seq
                break
        for watcher in self.watchers:
            watcher.offer(batch)

    def changed(
        self, deleted: Callable[[str], bool] = lambda _: False
    ) -> SessionFileChangedError | SessionNotFoundError | None:
        """Whether the file at the session's path is still the one open here (stat calls): None
        when it is, SessionNotFoundError when it is gone and ``deleted`` says the session was
        deleted (docs/deletion.md §1.3), SessionFileChangedError otherwise."""
        try:
            current = session_file_stat(self.path)  # a link put in its place counts as replaced
        except FileNotFoundError:
            if deleted(self.session_id):
                return SessionNotFoundError(self.session_id, deleted=True)
            current = None
        except OSError:  # a symbolic link now (ELOOP)
            current = None
        if current is None or (current.st_dev, current.st_ino) != self.identity:
            return SessionFileChangedError(
                SESSION_FILE_REPLACED,
                f"the file of session {self.session_id} was replaced or removed while watched;"
                " records already received may differ from the file now",
            )
        return None


def _grown_or_replaced(tails: list[tuple[SessionTail, int]]) -> list[tuple[SessionTail, bool]]:
    """Of ``(tail, offset)`` pairs, the tails whose file holds bytes past the offset or whose
    path now names another file (or none), the latter flagged True (one I/O-thread job)."""
    found: list[tuple[SessionTail, bool]] = []
    for tail, offset in tails:
        if tail.changed() is not None:
            found.append((tail, True))
            continue
        try:
            if os.fstat(tail.fd).st_size != offset:
                found.append((tail, False))
        except OSError:
            found.append((tail, True))
    return found


class WatchHub:
    """Every live watch of one reader: one inotify instance, one :class:`SessionTail` per
    watched session, and a look at every watched file each ``poll_seconds`` (0: never).
    Belongs to the event loop of its first watch.

    ``run`` runs blocking reads on an I/O thread; ``encode`` turns lines into a serialized
    WatchSessionResponse; ``deleted`` says whether a session whose file went was deleted (its
    watches then end NOT_FOUND rather than ABORTED; called on an I/O thread).
    """

    def __init__(
        self,
        run: Runner,
        encode: Encoder,
        poll_seconds: float = DEFAULT_POLL_SECONDS,
        deleted: Callable[[str], bool] = lambda _: False,
    ) -> None:
        self._run = run
        self._encode = encode
        self._poll_seconds = poll_seconds
        self._poller: asyncio.Task[None] | None = None
        self._deleted = deleted
        self._inotify: INotify | None = None
        self._tails: dict[str, SessionTail] = {}
        self._by_wd: dict[int, SessionTail] = {}
        self._closed = False

    async def follow(self, session_id: str, path: Path, from_seq: int) -> AsyncIterator[bytes]:
        """Serialized WatchSessionResponses for ``session_id`` (file ``path``) from ``from_seq``:
        catch-up, then live, ending after the stop record of a stopped session.

        Raises SessionFileChangedError (replaced or cut), WatchClosedError (the hub closed),
        FileNotFoundError (the file vanished before the watch began), OSError (unreadable).
        """
        tail = await self._tail(session_id, path)
        watcher = _Watcher(_SeqFilter(from_seq))
        tail.watchers.add(watcher)
        try:
            await tail.ready.wait()
            position = await self._run(start_offset, tail.fd, from_seq, tail.offset)
            while True:
                if tail.failure is not None:
                    raise tail.failure
                batch = watcher.batch_at(position)
                if batch is not None:
                    position = batch.end
                    admitted = watcher.filter.admit(batch.lines)
                    if admitted is batch.lines:
                        yield batch.reply
                    elif admitted:
                        yield self._encode(admitted)
                    continue
                if position < tail.offset:
                    lines, position = await self._run(read_lines, tail.fd, position, tail.offset)
                    admitted = watcher.filter.admit(lines)
                    if admitted:
                        yield self._encode(admitted)
                    continue
                if tail.stopped:
                    return
                watcher.wake.clear()
                await watcher.wake.wait()
        finally:
            tail.watchers.discard(watcher)
            if not tail.watchers:
                self._release(tail)

    async def _tail(self, session_id: str, path: Path) -> SessionTail:
        """The session's tail, opened (descriptor, inotify watch, committed state) if new."""
        if self._closed:
            raise WatchClosedError("the reader is shutting down")
        tail = self._tails.get(session_id)
        if tail is not None and tail.failure is None:
            return tail
        inotify = self._ensure_inotify()
        fd = open_session_file(path)  # never follows a link (shared.layout)
        stat = os.fstat(fd)
        tail = SessionTail(session_id, path, fd, (stat.st_dev, stat.st_ino))
        try:
            # Watch after opening, then compare: a file replaced in between is caught here, one
            # replaced later by the events of the inode watched.
            tail.wd = inotify.add_watch(path, _WATCH_MASK)
            replaced = tail.changed()
            if replaced is not None:
                raise replaced
        except BaseException:
            os.close(fd)
            if tail.wd >= 0 and tail.wd not in self._by_wd:
                with contextlib.suppress(OSError):
                    inotify.rm_watch(tail.wd)
            raise
        self._tails[session_id] = tail
        self._by_wd[tail.wd] = tail
        asyncio.get_running_loop().create_task(self._start(tail))
        if self._poll_seconds > 0 and self._poller is None:
            self._poller = asyncio.get_running_loop().create_task(self._poll())
        return tail

    async def _poll(self) -> None:
        """Each ``poll_seconds``, read the watched files that grew or were replaced without an
        inotify report (writes made through another host's mount)."""
        while not self._closed:
            await asyncio.sleep(self._poll_seconds)
            # A tail released while the job runs may have its descriptor closed under it: the
            # job only stats, and what it says of a released tail is ignored below.
            looked = [(tail, tail.offset) for tail in self._tails.values() if tail.ready.is_set()]
            if not looked:
                continue
            try:
                found = await self._run(_grown_or_replaced, looked)
            except Exception:  # the pool is shutting down: the hub is closing too
                log.exception("looking at the watched session files failed")
                continue
            for tail, replaced in found:
                if tail.released:
                    continue
                if replaced:
                    tail.check_identity = True
                self._read_soon(tail)

    async def _start(self, tail: SessionTail) -> None:
        try:
            tail.offset, _, tail.stopped, tail.last_seq = await self._run(committed_state, tail.fd)
        except Exception as error:
            tail.fail(error)
        tail.ready.set()
        self._read_soon(tail)  # writes between the watch and the state read

    def _ensure_inotify(self) -> INotify:
        if self._inotify is None:
            self._inotify = INotify(nonblocking=True)
            asyncio.get_running_loop().add_reader(self._inotify.fileno(), self._on_events)
        return self._inotify

    def _on_events(self) -> None:
        """The inotify descriptor is readable: read the files that changed (on the loop)."""
        assert self._inotify is not None
        for event in self._inotify.read(timeout=0):
            if event.mask & flags.Q_OVERFLOW:  # events were lost: look at every file
                for every in self._tails.values():
                    every.check_identity = True
                    self._read_soon(every)
                continue
            tail = self._by_wd.get(event.wd)
            if tail is None:
                continue
            if event.mask & _REREAD_MASK:
                tail.check_identity = True
            self._read_soon(tail)

    def _read_soon(self, tail: SessionTail) -> None:
        """Read the tail's new lines on an I/O thread, one read at a time per tail."""
        if not tail.ready.is_set() or tail.failure is not None or tail.released:
            return
        if tail.reading:
            tail.read_again = True
            return
        tail.reading = True
        asyncio.get_running_loop().create_task(self._read(tail))

    async def _read(self, tail: SessionTail) -> None:
        try:
            while tail.failure is None and not tail.released:
                tail.read_again = False
                if tail.check_identity:
                    tail.check_identity = False
                    replaced = await self._run(tail.changed, self._deleted)
                    if replaced is not None:
                        tail.fail(replaced)
                        return
                size = (await self._run(os.fstat, tail.fd)).st_size
                if size < tail.offset:
                    tail.fail(self._truncated(tail, f"is {size} bytes, below the {tail.offset} already read"))
                    return
                if size > tail.offset:
                    lines, end = await self._run(read_lines, tail.fd, tail.offset, size)
                    if lines:
                        first = next((line.seq for line in lines if line.seq >= 0), None)
                        if first is not None and tail.last_seq >= 0 and first <= tail.last_seq:
                            tail.fail(self._truncated(tail, f"holds seq {first} again after {tail.last_seq}"))
                            return
                        stopped = lines[-1].type == RecordType.STOP and end == size
                        tail.publish(LiveBatch(tail.offset, end, lines, self._encode(lines)), stopped)
                        if end < size:
                            continue  # more complete lines than one read holds
                if not tail.read_again:
                    return
        except Exception as error:
            log.exception("reading new lines of session %s failed", tail.session_id)
            tail.fail(error)
        finally:
            tail.reading = False
            if tail.released:
                os.close(tail.fd)

    @staticmethod
    def _truncated(tail: SessionTail, what: str) -> SessionFileChangedError:
        return SessionFileChangedError(
            SESSION_FILE_TRUNCATED,
            f"the file of session {tail.session_id} was cut below what this watch read (it {what}):"
            " the writer rolled back a failed write, or the file was rewritten; records already"
            " received may no longer be in it",
        )

    def _release(self, tail: SessionTail) -> None:
        """Close a tail without watchers: its inotify watch, and its descriptor (at once, or
        when a read of it in progress ends)."""
        tail.released = True
        if self._tails.get(tail.session_id) is tail:
            del self._tails[tail.session_id]
        if self._by_wd.get(tail.wd) is tail:
            del self._by_wd[tail.wd]
            if self._inotify is not None:
                with contextlib.suppress(OSError):  # already gone with its file
                    self._inotify.rm_watch(tail.wd)
        if not tail.reading:
            os.close(tail.fd)

    def close(self) -> None:
        """End every watch (WatchClosedError) and refuse new ones; call on the hub's loop."""
        self._closed = True
        if self._poller is not None:
            self._poller.cancel()
            self._poller = None
        for tail in list(self._tails.values()):
            tail.fail(WatchClosedError("the reader is shutting down"))
        if self._inotify is not None:
            with contextlib.suppress(RuntimeError):  # the loop is already closed
                asyncio.get_running_loop().remove_reader(self._inotify.fileno())
            self._inotify.close()
            self._inotify = None
