"""The listing index: a small summary per session, kept current as sessions change (docs/spec.md §5).

Derived data only: everything here is rebuilt from the files (a new reader
starts empty and warms up in the background), it is never the source of truth,
and a stale or missing entry never hides a session. Which sessions exist comes
from the sessions folders themselves (one per shard: shared.layout), brought up to
date at every call (:class:`reader_service.session_folder.SessionFolders`: the changes
reported since the last call, or a listing of a folder; a lookup makes current the
folder of its session's shard only, a listing every folder); the index keeps them in
listing order as they come and go (an insertion or removal each, never a sort),
and only saves the reads behind each one.

Per session file it keeps:

* the head: the ``session_meta`` payload (tenant, parent, delegation id, cwd,
  model, ...). It never changes once written, so it is read once; a first line
  not yet complete is not kept (read again next time). Postings list the
  sessions of each tenant, parent and agent name in listing order, so a
  selective filter costs what matches it, not the number of sessions;
* the activity: the stop facts (a tail read), the time of the last record, the
  number of ``message`` records and a preview (the first user message that is
  not injected context, such as ``<environment_context>``). It is valid for the
  file's inode, size and modification time it was read at, and is refreshed
  when those change: the tail again, and only the bytes appended since the last
  count. A first count of more than :data:`SYNC_COUNT_BYTES` is left to the
  background worker (the count lags until it is done; ``counted_bytes`` says how
  far it got).

Records are counted from their envelope alone (``{"v":..,"seq":..,"ts":..,
"type":"message",``, the line shape of docs/spec.md §1; simple fields added before
``type`` are allowed), so counting runs at the speed of a regular expression.
"""

from __future__ import annotations

import bisect
import functools
import logging
import os
import queue
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from reader_service.session_folder import SessionFolders
from reader_service.stop_facts import DEFAULT_TAIL_WINDOW, StopFactsResult, read_stop_facts
from serving.tenancy import check_visible
from shared.errors import SessionNotFoundError
from shared.layout import DataRoot, open_session_file, session_file_stat
from shared.lineage import forked_from
from shared.naming import SessionFileName, parse_file_name, validate_session_id
from shared.records import record_of_line
from shared.session_meta import branch_of, read_session_meta
from shared.titles import TITLE_EVENT, next_title

log = logging.getLogger(__name__)

#: Bytes read at a time while counting records.
COUNT_READ_BYTES = 4 * 1024 * 1024
#: New bytes a listing call counts itself; more are left to the background worker.
SYNC_COUNT_BYTES = 8 * 1024 * 1024
#: Characters of the first user message kept as the preview.
PREVIEW_CHARS = 200

_MESSAGE_LINE = re.compile(rb'^\{"v":\d+,(?:"\w+":(?:-?\d+|"[^"\\\n]*"),)*?"type":"message",', re.MULTILINE)
#: A title record (shared.titles): an event whose payload begins with its kind, as the writer writes it.
_TITLE_LINE = re.compile(
    rb'^\{"v":\d+,(?:"\w+":(?:-?\d+|"[^"\\\n]*"),)*?"type":"event","payload":\{"kind":"'
    + re.escape(TITLE_EVENT.encode())
    + rb'"',
    re.MULTILINE,
)
#: Text a client injects as a user message that the user did not type (Codex, Claude Code).
_INJECTED = re.compile(r"\s*<[A-Za-z_][\w-]*>|\s*# AGENTS\.md instructions")
#: Lines that may name the git branch (shared.session_meta.branch_of): turn contexts, and the
#: Codex importer's session_meta event.
_BRANCH_LINE = re.compile(
    rb'^\{"v":\d+,(?:"\w+":(?:-?\d+|"[^"\\\n]*"),)*?"type":(?:"turn_context"|"event","payload":\{"kind":"codex\.session_meta")',
    re.MULTILINE,
)
_BLANKS = re.compile(r"\s+")
#: A Claude Code slash command as sent: the command's name and what the user typed after it.
_COMMAND_NAME = re.compile(r"<command-name>\s*([^<]*?)\s*</command-name>")
_COMMAND_ARGS = re.compile(r"<command-args>\s*(.*?)\s*</command-args>", re.DOTALL)
#: Codex's IDE extensions send the editor's context first, then the request after this heading.
_IDE_REQUEST = "## My request for Codex:"

SortKey = tuple[datetime, str]


def preview_of(payload: Any) -> str:
    """The preview of a ``message`` payload: the text of a user message that is not injected
    context, blanks collapsed, cut to :data:`PREVIEW_CHARS`; "" for anything else. A slash
    command shows as its name and arguments; an IDE message as the request after its context."""
    if not isinstance(payload, dict) or payload.get("role") != "user":
        return ""
    content = payload.get("content")
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        text = " ".join(
            part["text"] for part in content if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    else:
        return ""
    if (command := _COMMAND_NAME.search(text)) is not None:  # "/name what the user typed"
        arguments = _COMMAND_ARGS.search(text)
        text = f"{command.group(1)} {arguments.group(1) if arguments else ''}"
    elif _IDE_REQUEST in text:
        text = text.split(_IDE_REQUEST, 1)[1]
    elif _INJECTED.match(text):
        return ""
    if not text.strip():
        return ""
    collapsed = _BLANKS.sub(" ", text).strip()
    return collapsed if len(collapsed) <= PREVIEW_CHARS else collapsed[: PREVIEW_CHARS - 1] + "…"


@dataclass(frozen=True, slots=True)
class Activity:
    """What changes as a session grows, as read at one (inode, size, modification time)."""

    inode: int
    size: int
    mtime_ns: int
    stop_facts: StopFactsResult
    counted_bytes: int = 0
    message_count: int = 0
    preview: str = ""
    #: The session's title (shared.titles: the last non-empty one in the bytes counted).
    title: str = ""
    #: The last git branch recorded in the bytes counted (shared.session_meta.branch_of).
    branch: str = ""

    @property
    def updated_at(self) -> str:
        """The ``ts`` of the last complete record ("" when none was found in the tail)."""
        return self.stop_facts.last_record_ts

    def current(self, stat: os.stat_result) -> bool:
        return (self.inode, self.size, self.mtime_ns) == (stat.st_ino, stat.st_size, stat.st_mtime_ns)


@dataclass(frozen=True, slots=True)
class Count:
    """A count of ``message`` records up to ``counted_bytes`` (a line boundary); ``done`` is False
    when it stopped at its read limit before the end of the file."""

    counted_bytes: int
    message_count: int
    preview: str
    done: bool
    title: str = ""
    branch: str = ""


class CompleteLines:
    """The complete lines of a session file after byte ``position`` (a line boundary), in blocks:
    iterating yields ``(offset, block)``, ``block`` the bytes of whole lines (ending with "\\n")
    starting at byte ``offset``. Reads at most ``limit`` bytes (all when None); ``done`` is then
    False when it stopped at the limit before the end of the file, and ``end`` is the offset after
    the last complete line yielded. The incremental reading of the listing index (counts) and of
    the content index (reader_service.search_index). Raises OSError when the file cannot be read.
    """

    def __init__(self, path: Path, position: int, limit: int | None = None) -> None:
        self.path = path
        self.end = position
        self.limit = limit
        self.done = False

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        fd = open_session_file(self.path)
        try:
            # Read up to the size seen now, in reads of the bytes there are (a read of the
            # largest block would allocate it whole for the few bytes an append adds); what is
            # written meanwhile is read by the next pass.
            size = os.fstat(fd).st_size
            stop = size if self.limit is None else min(size, self.end + self.limit)
            offset, pending, ended = self.end, b"", False
            while offset < stop:
                try:
                    chunk = os.pread(fd, min(COUNT_READ_BYTES, stop - offset), offset)
                except OSError as exc:  # e.g. a directory in its place: name the file
                    raise OSError(exc.errno, exc.strerror, os.fspath(self.path)) from exc
                if not chunk:
                    ended = True  # cut meanwhile: its end is here
                    break
                offset += len(chunk)
                data = pending + chunk if pending else chunk
                cut = data.rfind(b"\n") + 1
                if not cut:
                    pending = data
                    continue
                start, self.end = self.end, self.end + cut
                pending = data[cut:]
                yield start, data[:cut]
            self.done = ended or stop == size
        finally:
            os.close(fd)


def count_messages(path: Path, start: Count, limit: int | None = None) -> Count:
    """Continue ``start`` over the bytes after it, reading at most ``limit`` bytes (all when None).

    Raises OSError when the file cannot be read.
    """
    count, preview, title, branch = start.message_count, start.preview, start.title, start.branch
    lines = CompleteLines(path, start.counted_bytes, limit)
    for _, complete in lines:
        for match in reversed(list(_BRANCH_LINE.finditer(complete))):  # the last that names one
            record = record_of_line(complete[match.start() : complete.index(b"\n", match.start())])
            named = branch_of(record["type"], record["payload"]) if record is not None else None
            if named:
                branch = named
                break
        for match in _MESSAGE_LINE.finditer(complete):
            count += 1
            if not preview:
                end = complete.index(b"\n", match.start())
                record = record_of_line(complete[match.start() : end])
                if record is not None:
                    preview = preview_of(record["payload"])
        if b'"kind":"' + TITLE_EVENT.encode() in complete:  # rare: the pattern only then
            for match in _TITLE_LINE.finditer(complete):
                record = record_of_line(complete[match.start() : complete.index(b"\n", match.start())])
                if record is not None:
                    title = next_title(title, record["type"], record["payload"])
    return Count(lines.end, count, preview, lines.done, title, branch)


@dataclass(slots=True)
class _Postings:
    """Sort keys of the sessions holding one value (a tenant, a parent, an agent name; or every
    session), ascending."""

    keys: list[SortKey] = field(default_factory=list)

    def add(self, key: SortKey) -> None:
        if not self.keys or key > self.keys[-1]:
            self.keys.append(key)  # a new session is usually the newest
        else:
            position = bisect.bisect_left(self.keys, key)
            if position == len(self.keys) or self.keys[position] != key:
                self.keys.insert(position, key)

    def remove(self, key: SortKey) -> None:
        position = bisect.bisect_left(self.keys, key)
        if position < len(self.keys) and self.keys[position] == key:
            del self.keys[position]

    def newest_before(self, bound: SortKey | None) -> SortKey | None:
        """The greatest key below ``bound`` (None: no bound); None when there is none."""
        position = len(self.keys) if bound is None else bisect.bisect_left(self.keys, bound)
        return self.keys[position - 1] if position else None


class ListingIndex:
    """Summaries of the sessions under one data root (thread-safe; see the module doc)."""

    def __init__(self, root: DataRoot, tail_window: int = DEFAULT_TAIL_WINDOW) -> None:
        self.root = root
        self.tail_window = tail_window
        self._lock = threading.Lock()
        self._names: dict[str, SessionFileName] = {}
        #: The id index: each session id's file name, and its path once looked up (a path is
        #: built once: pathlib is slow). Kept by the folders' reports, so a lookup never scans.
        self._ids: dict[str, str] = {}
        self._paths: dict[str, Path] = {}
        self._by_key: dict[SortKey, str] = {}
        self._all = _Postings()
        self._heads: dict[str, dict[str, Any]] = {}
        #: Listed sessions whose head is not indexed yet.
        self._headless: set[str] = set()
        self._activity: dict[str, Activity] = {}
        self._postings: dict[tuple[str, str], _Postings] = {}
        #: Background work: a session file name to count, or a shard whose folder to list.
        self._counting: queue.SimpleQueue[str | int | None] = queue.SimpleQueue()
        self._queued: set[str] = set()
        self._worker: threading.Thread | None = None
        self._closed = False
        self.folder = SessionFolders(root, self._added, self._removed, self._verify_later)
        #: Called with the path of each session file that went (a deletion): the reader's caches
        #: keyed by file drop it (reader_service.server). Called under the folder's lock.
        self.removal_listeners: list[Callable[[Path], None]] = []
        self.warm = threading.Event()
        #: Activity lookups by outcome (reader_service.metrics): still current, or read again.
        self.counts = {"current": 0, "refreshed": 0}

    # -- which sessions exist ---------------------------------------------------------------

    def sync(self, miss: bool = False) -> None:
        """Bring the sessions known up to the folders for a call beginning now (what was reported
        since the last call, or a listing: :meth:`SessionFolders.current`). ``miss``: a lookup
        did not find its session. Raises OSError when a folder cannot be read."""
        self.folder.current(miss)

    def _added(self, parsed: SessionFileName, name: str) -> None:
        """A session file appeared (called by the folder, under its lock)."""
        key = parsed.sort_key
        with self._lock:
            self._names[name] = parsed
            self._ids[parsed.session_id] = name
            self._headless.add(name)
            self._by_key[key] = name
            self._all.add(key)
            self._posting("agent", parsed.agent_name).add(key)

    def _removed(self, parsed: SessionFileName, name: str) -> None:
        """A session file went (called by the folder, under its lock): all it held is dropped."""
        with self._lock:
            if self._names.pop(name, None) is None:
                return
            if self._ids.get(parsed.session_id) == name:
                del self._ids[parsed.session_id]
                self._paths.pop(parsed.session_id, None)
            key = parsed.sort_key
            self._headless.discard(name)
            if self._by_key.get(key) == name:
                del self._by_key[key]
                self._all.remove(key)
                self._posting("agent", parsed.agent_name).remove(key)
            meta = self._heads.pop(name, None)
            if meta is not None:
                self._posting("tenant", str(meta.get("tenant", ""))).remove(key)
                self._posting("parent", str(meta.get("parent_session_id", ""))).remove(key)
                source = forked_from(meta)
                if source is not None:
                    self._posting("fork_source", source[0]).remove(key)
            self._activity.pop(name, None)
        path = self.root.session_path(parsed.session_id, name)
        for listener in self.removal_listeners:
            listener(path)

    def _posting(self, kind: str, value: str) -> _Postings:
        posting = self._postings.get((kind, value))
        if posting is None:
            posting = self._postings[(kind, value)] = _Postings()
        return posting

    def name_of(self, key: SortKey) -> str | None:
        with self._lock:
            return self._by_key.get(key)

    def parsed_name(self, name: str) -> SessionFileName | None:
        with self._lock:
            return self._names.get(name)

    def newest_before(self, kind: str, value: str, bound: SortKey | None) -> SortKey | None:
        """The greatest sort key below ``bound`` (None: no bound) of the sessions whose ``kind``
        (tenant, parent, agent) is ``value``, or of every session when ``kind`` is ""; None when
        there is none. Walking with it sees the sessions as they are at each step: one that
        appears further down the walk is met, one that goes is not.

        Tenant and parent postings are complete only after :meth:`ensure_heads`.
        """
        with self._lock:
            posting = self._all if not kind else self._postings.get((kind, value))
            return posting.newest_before(bound) if posting is not None else None

    def count(self, kind: str, value: str) -> int:
        """How many sessions :meth:`newest_before` walks for ``kind`` and ``value``."""
        with self._lock:
            posting = self._all if not kind else self._postings.get((kind, value))
            return len(posting.keys) if posting is not None else 0

    def forks_of(self, source_id: str) -> list[tuple[str, dict[str, Any]]]:
        """(file name, session_meta) of each session forked directly from ``source_id``
        (``forked_from``), of every tenant, oldest first. Complete only after :meth:`ensure_heads`."""
        with self._lock:
            posting = self._postings.get(("fork_source", source_id))
            names = [self._by_key.get(key) for key in posting.keys] if posting is not None else []
            return [(name, self._heads[name]) for name in names if name is not None and name in self._heads]

    def fork_sources(self) -> list[str]:
        """Ids of the sessions some listed session was forked from directly (live or not; of every
        tenant). Complete only after :meth:`ensure_heads`."""
        with self._lock:
            return [
                value
                for (kind, value), posting in self._postings.items()
                if kind == "fork_source" and posting.keys
            ]

    @property
    def heads_held(self) -> int:
        """Sessions whose session_meta is held."""
        return len(self._heads)

    # -- lookups --------------------------------------------------------------------------------

    def locate(self, session_id: str, field: str = "session_id") -> tuple[SessionFileName, Path]:
        """The parsed name and path of a session's file, for the current caller (serving.tenancy).

        Every reader RPC resolves a session id through here: a session of another tenant
        than an authenticated caller's is SessionNotFoundError, exactly as one that does
        not exist. Raises FileNameError (naming ``field``) for a malformed id,
        SessionNotFoundError, OSError ``ELOOP`` when the file is a symbolic link.
        """
        shard = self.root.shard_of(validate_session_id(session_id, field))
        self.folder.current(shard=shard)  # its shard's names are current: no scan here
        found = self._known(session_id)
        if found is None:
            self.folder.current(miss=True, shard=shard)  # lists it if it changed since its last listing
            found = self._known(session_id)
            if found is None:
                raise SessionNotFoundError(session_id)
        parsed, path = found
        check_visible(session_id, lambda: self.meta(path.name))
        return parsed, path

    def _known(self, session_id: str) -> tuple[SessionFileName, Path] | None:
        """The parsed name and path of a session the id index holds and whose file is there; None
        otherwise. Raises OSError ``ELOOP`` when the file is a symbolic link."""
        with self._lock:
            name = self._ids.get(session_id)
            parsed = self._names.get(name) if name is not None else None
            path = self._paths.get(session_id)
        if name is None or parsed is None:
            return None
        if path is None or path.name != name:
            path = self.root.session_path(session_id, name)
            with self._lock:
                self._paths[session_id] = path
        if not os.path.lexists(path):
            return None
        session_file_stat(path)
        return parsed, path

    # -- heads ----------------------------------------------------------------------------------

    def meta(self, name: str) -> dict[str, Any]:
        """The session_meta payload of one session file ({} when it has none, or it is unreadable)."""
        with self._lock:
            meta = self._heads.get(name)
        if meta is not None:
            return meta
        return self._read_head(name)

    def path_of(self, name: str) -> Path:
        """The path of session file ``name`` (in its session's shard folder: shared.layout)."""
        with self._lock:
            parsed = self._names.get(name)
        session_id = parsed.session_id if parsed is not None else parse_file_name(name).session_id
        return self.root.session_path(session_id, name)

    def _read_head(self, name: str) -> dict[str, Any]:
        try:
            meta = read_session_meta(self.path_of(name))
        except FileNotFoundError:
            return {}
        except OSError as exc:  # one unreadable file must not hide the others
            log.warning("listing %s without its session_meta: %s", name, exc)
            return {}
        if meta is None:
            return {}  # not complete yet: looked at again next time
        with self._lock:
            parsed = self._names.get(name)
            if parsed is not None and name not in self._heads:
                self._heads[name] = meta
                self._headless.discard(name)
                self._posting("tenant", str(meta.get("tenant", ""))).add(parsed.sort_key)
                self._posting("parent", str(meta.get("parent_session_id", ""))).add(parsed.sort_key)
                source = forked_from(meta)
                if source is not None:
                    self._posting("fork_source", source[0]).add(parsed.sort_key)
        return meta

    def ensure_heads(self) -> int:
        """Read the head of every listed session not yet indexed; returns how many were read."""
        with self._lock:
            if not self._headless:
                return 0
            missing = list(self._headless)
        for name in missing:
            self._read_head(name)
        return len(missing)

    # -- activity -------------------------------------------------------------------------------

    def activity(self, name: str) -> Activity:
        """The activity of one session file, refreshed if the file changed since it was read.

        Raises FileNotFoundError when the file is gone; another OSError when it cannot be read.
        """
        path = self.path_of(name)
        stat = session_file_stat(path)
        with self._lock:
            known = self._activity.get(name)
        if known is not None and known.current(stat):
            self.counts["current"] += 1  # a metric: a lost increment between threads is harmless
            return known
        fresh = self._refresh(name, path, stat, known, SYNC_COUNT_BYTES)
        with self._lock:
            self.counts["refreshed"] += 1
            if name in self._names:
                self._activity[name] = fresh
        return fresh

    def _refresh(
        self, name: str, path: Path, stat: os.stat_result, known: Activity | None, limit: int | None
    ) -> Activity:
        facts = read_stop_facts(path, self.tail_window)
        start = Count(0, 0, "", False)
        if known is not None and known.inode == stat.st_ino and known.counted_bytes <= stat.st_size:
            start = Count(
                known.counted_bytes, known.message_count, known.preview, False, known.title, known.branch
            )
        counted = count_messages(path, start, limit)
        if not counted.done:
            self._count_later(name)
        return Activity(
            stat.st_ino,
            stat.st_size,
            stat.st_mtime_ns,
            facts,
            counted.counted_bytes,
            counted.message_count,
            counted.preview,
            counted.title,
            counted.branch,
        )

    def _count_later(self, name: str) -> None:
        with self._lock:
            if name in self._queued:
                return
            self._queued.add(name)
        self._counting.put(name)
        self._start_worker()

    def _verify_later(self, shard: int) -> None:
        """Have the worker list a shard's sessions folder (asked by the folder; never under its lock)."""
        self._counting.put(shard)
        self._start_worker()

    # -- background work -------------------------------------------------------------------------

    def start_warming(self) -> None:
        """Index every session in the background (heads, then activity, newest first)."""
        self._start_worker()

    def close(self) -> None:
        """Stop the background worker and the following of the folder (the index stays usable:
        the folder is then listed at each change)."""
        with self._lock:
            self._closed = True
        self._counting.put(None)
        self.folder.close()

    def _start_worker(self) -> None:
        with self._lock:
            if self._worker is not None or self._closed:
                return
            self._worker = threading.Thread(target=self._work, name="rollout-listing-index", daemon=True)
        self._worker.start()

    def _work(self) -> None:
        """Warm the index once, then do what calls left for later: counts, folder listings."""
        try:
            self._quietly(lambda _: self.sync(), "the sessions folder")
            self.ensure_heads()
            with self._lock:
                newest_first = [self._by_key[key] for key in reversed(self._all.keys)]
            for name in newest_first:
                if self._closed:
                    return
                self._quietly(self.activity, name)
        finally:
            self.warm.set()
        while (work := self._counting.get()) is not None:
            if isinstance(work, int):
                self._quietly(functools.partial(self._verify_folder, work), "a sessions folder")
                continue
            with self._lock:
                self._queued.discard(work)
            self._quietly(self._count_whole, work)

    def _verify_folder(self, shard: int, _: str) -> None:
        self.folder.verify(shard)

    def _count_whole(self, name: str) -> None:
        path = self.path_of(name)
        stat = session_file_stat(path)
        with self._lock:
            known = self._activity.get(name)
        fresh = self._refresh(name, path, stat, known, None)
        with self._lock:
            if name in self._names:
                self._activity[name] = fresh

    @staticmethod
    def _quietly(action: Callable[[str], object], name: str) -> None:
        try:
            action(name)
        except FileNotFoundError:
            pass
        except (OSError, ValueError) as exc:
            log.warning("listing index: %s: %s", name, exc)
