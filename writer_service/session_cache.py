"""The session files a writer holds open, the views it keeps of closed ones, and their saved states.

:class:`SessionCache` holds at most ``max_open`` session files open
(:class:`~writer_service.open_session.OpenSession`): beyond it, idle ones are closed,
least recently used first, their state saved on an I/O thread when it changed enough
(writer_service.saved_state). A closed session's view (call ids, meta) stays in memory
for the :data:`KEPT_VIEWS` most recently closed, so reopening one is an open() and an
fstat(); any other reopen (:func:`load_session`) reads its saved state and the lines
after it, never the whole file unless no state matches (docs/spec.md §2.10).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared.errors import CorruptSessionError, SessionNotFoundError, storage_error
from shared.layout import DataRoot, open_session_file
from shared.rebuild import collector_paused
from shared.rebuild_index import index_rebuild
from shared.records import RecordType, record_of_line
from shared.remedies import SEE_VERIFY
from writer_service.open_session import CallView, OpenSession, apply_record
from writer_service.recovery import repair_torn_tail, unavailable
from writer_service.saved_state import SessionState, lines_after, load_state, save_state
from writer_service.session_index import IndexEntry, read_entry

#: Bytes appended since a session's last saved state beyond which closing its file saves it again.
SAVE_ON_CLOSE_BYTES = 64 * 1024
#: Closed sessions whose view (call ids, meta) stays in memory, most recently closed first:
#: reopening one of them is an open() and an fstat(), nothing read.
KEPT_VIEWS = 4096

_RECORD_TYPES = {member.value: member for member in RecordType}


@dataclass(frozen=True, slots=True)
class LoadedSession:
    """What opening a session file found (I/O thread -> event loop)."""

    fd: int
    size: int
    calls: set[str]
    meta: dict[str, Any]
    entry: IndexEntry
    saved_offset: int


class SessionCache:
    """The open session files of one writer (``sessions``, least recently used first), the kept
    views of recently closed ones, and the saves of their states under way.

    ``executor``: the writer's I/O threads (saves and closes run there); ``max_open``: session
    files held open at most (idle ones beyond it are closed).
    """

    def __init__(self, root: DataRoot, executor: ThreadPoolExecutor, max_open: int) -> None:
        self._root = root
        self._executor = executor
        self._max_open = max_open
        self.sessions: OrderedDict[str, OpenSession] = OrderedDict()
        #: Saves of sessions' states under way on the I/O threads, per session (see _submit_save).
        self._saves: dict[str, set[concurrent.futures.Future[None]]] = {}
        self._kept: OrderedDict[str, IndexEntry] = OrderedDict()

    def shard_dir(self, state: OpenSession) -> Path:
        """The folder of a session's shard (its saved state lives there: writer_service.saved_state)."""
        return self._root.shard_dir(state.log.shard)

    def _snapshot(self, state: OpenSession, offset: int) -> SessionState:
        """The state to save at ``offset``: the view after everything queued so far."""
        return SessionState(offset, state.next_seq - 1, list(state.calls), state.meta)

    def save_later(self, state: OpenSession, offset: int, after: asyncio.Future[None] | None = None) -> None:
        """Save the session's state at ``offset`` once ``after`` (the lines up to it) is durable."""
        snapshot = self._snapshot(state, offset)
        state.saved_offset = offset
        args = (self.shard_dir(state), state.session_id, state.path, snapshot)
        if after is None:
            self._submit_save(state.session_id, save_state, *args)
            return

        def saved(done: asyncio.Future[None]) -> None:
            if not done.cancelled() and done.exception() is None:
                self._submit_save(state.session_id, save_state, *args)

        after.add_done_callback(saved)

    def close_idle(self) -> None:
        """Close the least recently used idle session files beyond ``max_open_sessions``.

        A closed session's state is saved first (on an I/O thread) when it has none
        yet or more than :data:`SAVE_ON_CLOSE_BYTES` were appended since its last
        save, so that reopening it reads only what follows: a session reopened and
        closed again for every append costs no state write each time.
        """
        excess = len(self.sessions) - self._max_open
        if excess <= 0:
            return
        for session_id, state in list(self.sessions.items()):
            if excess <= 0:
                break
            if state.log.idle and not state.busy:
                del self.sessions[session_id]
                self._keep_view(state)
                snapshot = None
                if state.saved_offset == 0 or state.log.size - state.saved_offset > SAVE_ON_CLOSE_BYTES:
                    snapshot = self._snapshot(state, state.log.size)
                if snapshot is None:
                    state.log.close()
                else:
                    self._submit_save(session_id, _retire, self.shard_dir(state), state, snapshot)
                excess -= 1

    def _submit_save(self, session_id: str, function: Callable[..., None], *args: Any) -> None:
        """Save a session's state on an I/O thread, tracked until done (a delete waits for it)."""
        done = self._executor.submit(function, *args)
        self._saves.setdefault(session_id, set()).add(done)
        loop = asyncio.get_running_loop()

        def settled(_: concurrent.futures.Future[None]) -> None:
            saves = self._saves.get(session_id)
            if saves is not None:
                saves.discard(done)
                if not saves:
                    del self._saves[session_id]

        done.add_done_callback(lambda finished: loop.call_soon_threadsafe(settled, finished))

    async def saved(self, session_id: str) -> None:
        """Wait for every save of a session's state under way (a failed one was logged)."""
        for done in list(self._saves.get(session_id, ())):
            with contextlib.suppress(Exception):
                await asyncio.wrap_future(done)

    def _keep_view(self, state: OpenSession) -> None:
        """Keep a closing session's view in its index entry (at most KEPT_VIEWS sessions keep one)."""
        state.entry.kept = (state.calls, state.meta, state.log.size, state.saved_offset)
        self._kept[state.session_id] = state.entry
        self._kept.move_to_end(state.session_id)
        while len(self._kept) > KEPT_VIEWS:
            _, oldest = self._kept.popitem(last=False)
            oldest.kept = None

    def reopen_kept(self, session_id: str, entry: IndexEntry, path: Path) -> LoadedSession | None:
        """Reopen a recently closed session from its kept view when its file is as it was left."""
        kept, entry.kept = entry.kept, None
        self._kept.pop(session_id, None)
        if kept is None or not entry.fresh:
            return None
        calls, meta, size, saved_offset = kept
        try:
            fd = open_session_file(path, os.O_RDWR | os.O_APPEND)
        except OSError:
            return None  # the slow path names the problem
        if os.fstat(fd).st_size != size:
            os.close(fd)
            return None
        return LoadedSession(fd, size, calls, meta, entry, saved_offset)

    def forget(self, session_id: str) -> None:
        """Drop a session's open state after a failed round; the next call re-reads its tail."""
        state = self.sessions.pop(session_id, None)
        if state is not None:
            state.entry.fresh = False
            state.entry.requests_floor = None  # set again from the file when next opened
            state.log.close()

    def drop_kept(self, session_id: str) -> None:
        """Stop tracking a closed session's kept view (its shard is indexed afresh: its entry is replaced)."""
        self._kept.pop(session_id, None)

    def forget_deleted(self, session_id: str) -> None:
        """Close a deleted session's file (when open) and drop its kept view."""
        state = self.sessions.pop(session_id, None)
        if state is not None:
            state.log.close()
        entry = self._kept.pop(session_id, None)
        if entry is not None:
            entry.kept = None

    def retire_all(self) -> None:
        """Save every open session's state (when it changed since the last save) and close its file,
        waiting for each (blocking: at shutdown, after their queues are drained)."""
        retiring = [
            self._executor.submit(
                _retire,
                self.shard_dir(state),
                state,
                self._snapshot(state, state.log.size) if state.saved_offset != state.log.size else None,
            )
            for state in self.sessions.values()
            if self.sessions.get(state.session_id) is state
        ]
        for done in retiring:
            done.result()
        self.sessions.clear()


def _retire(shard_dir: Path, state: OpenSession, snapshot: SessionState | None) -> None:
    """Save a closed session's state (when it changed since the last save) and close its file (I/O thread)."""
    try:
        if snapshot is not None:
            save_state(shard_dir, state.session_id, state.path, snapshot)
    finally:
        state.log.close()


def load_session(
    shard_dir: Path, path: Path, session_id: str, entry: IndexEntry, quick: bool = False
) -> LoadedSession | None:
    """Open a session file for appending and recover the writer's view of it (I/O thread).

    From its saved state and the lines after it when the state matches the file;
    otherwise from the whole file once (bounded memory), saving a state for next
    time. An entry that is not fresh is re-read from the tail (after a tail repair).
    With ``quick`` (the event loop's try) only a matching state with at most
    :data:`SAVE_ON_CLOSE_BYTES` after it is used; otherwise None, having read
    nothing more. Raises SessionNotFoundError (the file is gone),
    CorruptSessionError (no session_meta), SessionUnavailableError (its tail could
    not be repaired, or it cannot be opened), StorageWriteError (unreadable).
    """
    try:
        if not entry.fresh:
            repair_torn_tail(path)
            entry = read_entry(path)
        fd = open_session_file(path, os.O_RDWR | os.O_APPEND)
    except FileNotFoundError as exc:  # moved aside by repair, or removed outside the ledger
        raise SessionNotFoundError(session_id) from exc
    except OSError as exc:
        raise unavailable(path.name, exc) from exc
    try:
        size = os.fstat(fd).st_size
        saved = load_state(shard_dir, session_id, fd)
        if quick and (saved is None or size - saved.offset > SAVE_ON_CLOSE_BYTES):
            os.close(fd)
            return None
        if saved is not None:
            view = CallView(set(saved.calls))
            last_seq = saved.last_seq
            for raw in lines_after(fd, saved.offset, size):
                record = record_of_line(raw)  # what the reader's rebuild takes for a record
                if record is None:
                    continue  # damage is the reader's to report; the view is not changed by it
                record_type = _RECORD_TYPES.get(record["type"])
                if record_type is not None:
                    apply_record(view, record_type, record["payload"], 0, validate=False)
                last_seq = record["seq"]
            calls, meta, saved_offset = view.committed(), saved.meta, saved.offset
        else:
            with collector_paused():
                found = index_rebuild(path)
                if found.session_meta is None:
                    raise CorruptSessionError(
                        f"session file {path.name} does not start with a session_meta record; it cannot"
                        f" be appended to ({SEE_VERIFY})"
                    )
                calls, meta, last_seq = found.call_ids, found.session_meta, found.last_seq
                saved_offset = found.committed_bytes
                del found
            save_state(shard_dir, session_id, path, SessionState(saved_offset, last_seq, list(calls), meta))
        if not entry.fresh or entry.next_seq != last_seq + 1:
            entry = IndexEntry(entry.name, last_seq + 1, entry.stopped_kind)
        return LoadedSession(fd, size, calls, meta, entry, saved_offset)
    except OSError as exc:
        os.close(fd)
        raise storage_error(exc, "read", f"opening {path.name}") from exc
    except BaseException:
        os.close(fd)
        raise
