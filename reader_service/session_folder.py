"""Which session files the sessions folders hold, kept current without listing them at every call.

A data root has one sessions folder per shard (shared.layout: 256 by default, one in a
legacy root); :class:`SessionFolders` follows every one of them, each as a
:class:`SessionFolder`, through one inotify instance with a watch per folder
(:class:`Notifications`). A call about one session makes its shard's folder current; a
listing makes every folder current, the reports read once. A listing call looks at the
time stamp of every folder (a ``stat`` each: 256 of them took ~1.2 ms on this machine kind,
as much as the page itself) at most every :data:`SWEEP_SECONDS`, or when a lookup missed;
in between it looks only at the folders that need it (reports waiting, reports lost, not
listed yet, a young time stamp, not followed). So this host's changes are in every call,
and a change nothing reported (another host's) is in a listing at most
:data:`SWEEP_SECONDS` later (a lookup of its id looks at once). A root of one folder (the
legacy layout) looks at its time stamp at every call, as before.

Listing a folder of 50,000 names takes tens of milliseconds (bench/README.md,
``listing.py --churn``), so the reader follows the folder instead: one inotify watch on it reports each
name created, moved in, moved out or removed (a writer's new sessions, imports),
and every call first applies what was reported since the last one. A call then
costs what changed, not the number of sessions, and a session created on this
host before a call began is always known to that call.

Notifications are a shortcut; correctness never rests on them (docs/spec.md §7: a change
made through another host is not reported). The folder itself stays the source:
it is listed and its names compared with what is known

* in the call, when the folder's time stamp moved and nothing was reported since
  the last listing (a change made elsewhere), when a lookup misses while the
  stamp moved, and when the folder cannot be followed (no inotify: the listing is
  then the only source, as often as the stamp moves);
* in the background (``verify`` on another thread) while reported changes keep
  moving the stamp: at most once per ``verify_seconds``, and never more than a
  tenth of the time (the wait grows with what a listing took); once more after a
  listing that found a stamp younger than :data:`COARSE_STAMP_SECONDS` (a stamp
  can be too coarse to move again for a change in the same tick).

A call that needs a listing shares the first one that starts after the call
began. A listing compares names outside the lock, and a name reported while it
runs keeps what the report said (it is newer than the listing). Lost reports
(the kernel's queue overflowed) or a folder removed or moved away make the next
call list the folder, which also watches it again. Reports waiting for a folder that no call
has made current for a long time are capped (:data:`PENDING_REPORTS`): beyond it they are
dropped as lost, and that folder is listed when next made current.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import itertools
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path

from inotify_simple import Event, INotify, flags

from shared.layout import DataRoot
from shared.naming import SessionFileName, session_file_name

log = logging.getLogger(__name__)

#: Least time between two background listings of a folder that keeps changing (seconds).
VERIFY_SECONDS = 1.0
#: A background listing waits at least this many times as long as the last one took.
VERIFY_COST_FACTOR = 9
#: A folder time stamp younger than this (seconds) may not move for a change in the same tick.
COARSE_STAMP_SECONDS = 2.0
#: Reports kept for one folder until it is made current; more are dropped as lost (it is then listed).
PENDING_REPORTS = 16384
#: Least time between two looks of a listing call at every shard folder's time stamp (seconds).
SWEEP_SECONDS = 0.1
#: Names compared per step of a listing (each step is short, so other threads get the GIL).
_STEP = 2048
_NAME_EVENTS = flags.CREATE | flags.MOVED_TO | flags.DELETE | flags.MOVED_FROM
_FOLDER_GONE = flags.DELETE_SELF | flags.MOVE_SELF | flags.IGNORED

#: Told of each session file name that appears or goes, under the folder's lock.
NameListener = Callable[[SessionFileName, str], None]


class Notifications:
    """One inotify instance for several folders (thread-safe): a watch per folder, the reports read
    from it once and kept for each folder by its watch until the folder takes them.

    Raises OSError from :meth:`watch` when inotify cannot be had or the folder cannot be watched.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._inotify: INotify | None = None
        self._release: Callable[[], object] = lambda: None
        self._pending: dict[int, list[Event]] = {}
        #: Why no inotify instance could be had (not asked again: every folder would meet it).
        self._refused: OSError | None = None
        self._said: set[int | None] = set()

    def watch(self, folder: Path, mask: int) -> int:
        """Watch ``folder`` for ``mask``; returns the watch's descriptor."""
        with self._lock:
            if self._refused is not None:
                raise self._refused
            if self._inotify is None:
                try:
                    self._inotify = INotify(nonblocking=True)
                except OSError as exc:
                    self._refused = exc
                    raise
                # Closed with these notifications when nobody called close (an index that was dropped).
                self._release = weakref.finalize(self, self._inotify.close)
            wd: int = self._inotify.add_watch(folder, mask)
            self._pending.setdefault(wd, [])
            return wd

    def unwatch(self, wd: int, remove: bool = True) -> None:
        """Drop a watch and its reports (``remove``: ask the kernel to end it, when not already gone)."""
        with self._lock:
            self._pending.pop(wd, None)
            if remove and self._inotify is not None:
                with contextlib.suppress(OSError):  # already gone with its folder
                    self._inotify.rm_watch(wd)

    def waiting(self, wd: int) -> bool:
        """Whether reports are kept for watch ``wd`` (as last read)."""
        return bool(self._pending.get(wd))

    def first_to_say(self, exc: OSError) -> bool:
        """Whether a folder that cannot be followed for ``exc`` is the first to meet its errno (the
        one that says so: 256 folders meeting one cause log it once)."""
        with self._lock:
            if exc.errno in self._said:
                return False
            self._said.add(exc.errno)
            return True

    def read(self) -> None:
        """Read every report available and keep it for its watch (a lost-reports report for all)."""
        with self._lock:
            self._read()

    def take(self, wd: int, read: bool = True) -> list[Event]:
        """The reports kept for watch ``wd`` (after reading what is available, with ``read``)."""
        with self._lock:
            if read:
                self._read()
            pending = self._pending.get(wd)
            if not pending:
                return []
            self._pending[wd] = []
            return pending

    def close(self) -> None:
        with self._lock:
            self._pending.clear()
            self._inotify = None
            self._release()

    def _read(self) -> None:
        if self._inotify is None:
            return
        for event in self._inotify.read(timeout=0):
            if event.mask & flags.Q_OVERFLOW:
                for every in self._pending.values():
                    every.append(event)
                continue
            pending = self._pending.get(event.wd)
            if pending is None:
                continue  # a watch given up earlier
            if len(pending) >= PENDING_REPORTS:  # nobody took them for long: lost, the folder is listed
                pending[:] = [Event(event.wd, flags.Q_OVERFLOW, 0, "")]
            pending.append(event)


class SessionFolder:
    """The session files of one sessions folder of a data root (thread-safe; see the module doc).

    ``added`` and ``removed`` are called for each name that appears or goes
    (holding this folder's lock: they must not call back into it); ``verify_later``
    asks for :meth:`verify` on another thread (the listing index keeps its id index by
    ``added`` and ``removed``: reader_service.listing_index). ``notifications``:
    the inotify instance shared with the root's other folders (one of its own when None).
    """

    def __init__(
        self,
        root: DataRoot,
        folder: Path,
        added: NameListener,
        removed: NameListener,
        verify_later: Callable[[], None],
        verify_seconds: float = VERIFY_SECONDS,
        notifications: Notifications | None = None,
    ) -> None:
        self.root = root
        self.folder = folder
        self._path = os.fspath(folder)  # os.stat of a str: no pathlib on the way of every call
        self.verify_seconds = verify_seconds
        self._added = added
        self._removed = removed
        self._verify_later = verify_later
        self._lock = threading.Lock()
        self._listing_lock = threading.Lock()
        self._names: dict[str, SessionFileName] = {}
        #: Listed names that are not session files (temporaries, set-aside bytes), not parsed again.
        self._strays: set[str] = set()
        self._own_notifications = notifications is None
        self._notifications = notifications if notifications is not None else Notifications()
        self._unavailable = False  # inotify could not be had: the listing is the only source
        self._wd = -1
        self._reported = 0
        self._lost = False
        self._touched: set[str] | None = None
        self._listed = False
        self._listed_stamp: int | None = None
        self._listed_reported = 0
        self._listing_started = -float("inf")
        self._settled = True
        self._next_verify = 0.0
        self._verify_asked = False
        self._closed = False
        #: Listings by where they ran (reader_service.metrics): in a call, or in the background.
        self.listings = {"call": 0, "background": 0}

    @property
    def followed(self) -> bool:
        """Whether changes are reported now (the folder is watched)."""
        return self._wd >= 0

    def __len__(self) -> int:
        return len(self._names)

    # -- the calls' side -------------------------------------------------------------------------

    def current(self, miss: bool = False) -> None:
        """Make the known names current for a call beginning now (see the module doc for when the
        folder is listed). ``miss``: a lookup did not find its session. Raises OSError when the
        folder exists but cannot be read."""
        began = time.monotonic()
        self.current_since(began, self.stamp(), miss, read=True)

    def current_since(self, began: float, stamp: int | None, miss: bool, read: bool) -> None:
        """:meth:`current` for a call that began at ``began`` (monotonic), with the folder's time
        stamp read then (:meth:`stamp`, before the reports: a change between the two is then
        reported); ``read`` False: the caller read the reports after the stamp
        (:meth:`Notifications.read`)."""
        with self._lock:
            if (
                not read  # the reports were read: none waiting means none came
                and stamp == self._listed_stamp
                and self._settled
                and self._listed
                and not self._lost
                and not self._notifications.waiting(self._wd)
            ):
                return  # nothing changed since the last listing and nothing was reported
            self._drain(read)
            followed = self._wd >= 0
            changed = stamp != self._listed_stamp
            due = began >= self._next_verify
            now = (
                self._lost
                or not self._listed
                or (changed and (miss or self._reported == self._listed_reported))  # unreported
                or (not self._settled and due and (not followed or miss))
            )
            ask = not now and followed and (changed or not self._settled) and due and not self._verify_asked
            if ask:
                self._verify_asked = True
        if now:
            self._list_since(began)
        elif ask:
            self._verify_later()

    def quiet(self) -> bool:
        """Whether a call that has read the reports may skip this folder unless its time stamp
        moved: followed, listed, nothing lost, settled, no report waiting, and no other call
        applying reports it took (it holds the lock from taking them to applying them: a held
        lock is waited for). Looked at without the lock first: this runs for every folder of
        every listing call."""
        if not (self._wd >= 0 and self._listed and not self._lost and self._settled):
            return False
        if self._notifications.waiting(self._wd):
            return False
        if not self._lock.locked():  # after the reports: taken ones were applied, or are waited for
            return True
        with self._lock:
            return (
                self._wd >= 0
                and self._listed
                and not self._lost
                and self._settled
                and not self._notifications.waiting(self._wd)
            )

    def verify(self) -> None:
        """The background listing :meth:`current` asked for (runs it unless one ran since)."""
        with self._listing_lock:
            with self._lock:
                self._verify_asked = False
            if time.monotonic() >= self._next_verify and not self._closed:
                self._list("background")

    def close(self) -> None:
        """Stop following the folder (the names known stay as they are)."""
        with self._listing_lock, self._lock:
            self._closed = True
            if self._wd >= 0:
                self._notifications.unwatch(self._wd)
            self._wd = -1
            if self._own_notifications:
                self._notifications.close()

    # -- listing ---------------------------------------------------------------------------------

    def stamp(self) -> int | None:
        """The folder's modification time (ns); None when it does not exist."""
        try:
            return os.stat(self._path).st_mtime_ns
        except FileNotFoundError:
            return None

    def _list_since(self, began: float) -> None:
        with self._listing_lock:
            if self._listing_started < began:  # none started since the call began: list now
                self._list("call")

    def _list(self, where: str) -> None:
        """List the folder and make the known names what it holds (the listing lock is held)."""
        started = time.monotonic()
        with self._lock:
            self._drain()
            self._follow()  # before the listing: whatever changes after it is reported
            self._touched = set()
            self._lost = False
            reported = self._reported
            known = list(self._names)
        stamp = self.stamp()
        try:
            names = os.listdir(self.folder) if stamp is not None else []
        except FileNotFoundError:
            names = []
        except BaseException:
            with self._lock:
                self._touched = None
            raise
        listed: set[str] = set()
        fresh: list[str] = []
        gone: list[str] = []
        for start in range(0, len(names), _STEP):
            step = set(names[start : start + _STEP])
            listed |= step
            fresh += step.difference(self._names, self._strays)  # others change _names meanwhile
        for start in range(0, len(known), _STEP):
            gone += itertools.filterfalse(listed.__contains__, known[start : start + _STEP])
        with self._lock:
            self._drain()
            touched, self._touched = self._touched or set(), None
            for name in fresh:
                if name not in touched and name not in self._names and not self._add(name):
                    self._strays.add(name)
            for name in gone:
                if name not in touched:
                    self._remove(name)
            self._strays &= listed
            self._listed = True
            self._listed_stamp = stamp
            self._listed_reported = reported
            self._listing_started = started
            self._settled = stamp is None or time.time_ns() - stamp > COARSE_STAMP_SECONDS * 1e9
            took = time.monotonic() - started
            self._next_verify = time.monotonic() + max(self.verify_seconds, VERIFY_COST_FACTOR * took)
            self.listings[where] += 1

    # -- names and reports (the lock is held) ------------------------------------------------------

    def _add(self, name: str) -> bool:
        """Know ``name`` as a session file; False when it is not of the session shape."""
        parsed = session_file_name(name)  # the entries the writer indexes as sessions
        if parsed is None:
            return False
        self._names[name] = parsed
        self._added(parsed, name)
        return True

    def _remove(self, name: str) -> None:
        parsed = self._names.pop(name, None)
        if parsed is not None:
            self._removed(parsed, name)

    def _follow(self) -> None:
        """Watch the folder when it is not watched and can be (its first listing, or after a loss)."""
        if self._wd >= 0 or self._unavailable or self._closed:
            return
        try:
            self._wd = self._notifications.watch(self.folder, _NAME_EVENTS | _FOLDER_GONE | flags.ONLYDIR)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                return  # no folder yet: the next listing tries again
            self._unavailable = True
            if self._notifications.first_to_say(exc):
                log.warning(
                    "sessions folder %s is listed at each change (it cannot be followed: %s; other"
                    " folders of the data root that meet the same are not named)",
                    self.folder,
                    exc,
                )

    def _drain(self, read: bool = True) -> None:
        """Apply every change reported since the last drain (``read``: read the reports first)."""
        if self._wd < 0:
            return
        for event in self._notifications.take(self._wd, read):
            if event.mask & flags.Q_OVERFLOW:
                self._lost = True  # reports were dropped: the next call lists the folder
                continue
            if event.mask & _FOLDER_GONE:
                self._notifications.unwatch(self._wd, remove=not event.mask & flags.IGNORED)
                self._wd = -1
                self._lost = True
                continue
            self._reported += 1
            name = event.name
            if self._touched is not None:
                self._touched.add(name)
            if event.mask & (flags.CREATE | flags.MOVED_TO):
                self._remove(name)  # moved over an existing name: another file now
                self._add(name)
            else:
                self._remove(name)


class SessionFolders:
    """The sessions folder of every shard of a data root, each a :class:`SessionFolder`, followed
    through one :class:`Notifications` (thread-safe; see the module doc).

    ``added`` and ``removed`` are as for :class:`SessionFolder` (called under the lock of
    the folder whose names changed); ``verify_later(shard)`` asks for :meth:`verify` of
    that shard's folder on another thread. Until the data root is created (no layout yet:
    shared.layout), no folder is known and every call looks again.
    """

    def __init__(
        self,
        root: DataRoot,
        added: NameListener,
        removed: NameListener,
        verify_later: Callable[[int], None],
        verify_seconds: float = VERIFY_SECONDS,
        sweep_seconds: float | None = None,
    ) -> None:
        self.root = root
        #: Least time between two looks of a listing call at every folder's time stamp (seconds).
        self.sweep_seconds = SWEEP_SECONDS if sweep_seconds is None else sweep_seconds
        self._swept = -float("inf")
        self._added = added
        self._removed = removed
        self._verify_later = verify_later
        self.verify_seconds = verify_seconds
        self._notifications = Notifications()
        self._lock = threading.Lock()
        self._folders: list[SessionFolder] = []
        self._closed = False

    def shard_folders(self) -> list[SessionFolder]:
        """One folder per shard, in shard order ([] while the data root is not created).

        Raises ClusterFileError when the root's shard record cannot be read.
        """
        if self._folders or not self.root.resolve():
            return self._folders
        with self._lock:
            if not self._folders:
                folders = [
                    SessionFolder(
                        self.root,
                        self.root.sessions_folder(shard),
                        self._added,
                        self._removed,
                        functools.partial(self._verify_later, shard),
                        self.verify_seconds,
                        self._notifications,
                    )
                    for shard in range(self.root.shards)
                ]
                if self._closed:
                    for folder in folders:
                        folder.close()
                self._folders = folders
        return self._folders

    def current(self, miss: bool = False, shard: int | None = None) -> None:
        """Make the known names current for a call beginning now: of every folder, or of
        ``shard``'s folder only (:meth:`SessionFolder.current`). Raises OSError when a folder
        exists but cannot be read."""
        folders = self.shard_folders()
        if not folders:
            return
        if shard is not None:
            folders[shard].current(miss)
            return
        began = time.monotonic()
        if len(folders) == 1 or miss or began - self._swept >= self.sweep_seconds:
            self._swept = began
            stamps = [folder.stamp() for folder in folders]  # before the reports (SessionFolder.current)
            self._notifications.read()
            for folder, stamp in zip(folders, stamps, strict=True):
                folder.current_since(began, stamp, miss, read=False)
            return
        self._notifications.read()
        for folder in folders:
            if not folder.quiet():
                # Stamped after the reports were read: a change in between is taken for an
                # unreported one (a listing too many, never a change missed).
                folder.current_since(began, folder.stamp(), miss, read=False)

    def verify(self, shard: int) -> None:
        """The background listing a shard's folder asked for (:meth:`SessionFolder.verify`)."""
        self.shard_folders()[shard].verify()

    def close(self) -> None:
        """Stop following the folders (the names known stay as they are)."""
        with self._lock:
            self._closed = True
            folders = self._folders
        for folder in folders:
            folder.close()
        self._notifications.close()

    @property
    def followed(self) -> bool:
        """Whether changes are reported now for every folder (and there is one)."""
        folders = self._folders
        return bool(folders) and all(folder.followed for folder in folders)

    @property
    def listings(self) -> dict[str, int]:
        """Listings of the folders by where they ran (reader_service.metrics), summed."""
        folders = self._folders
        return {where: sum(folder.listings[where] for folder in folders) for where in ("call", "background")}

    def __len__(self) -> int:
        return sum(len(folder) for folder in self._folders)
