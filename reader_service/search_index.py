"""The content index: which sessions hold which words (SQLite FTS5, stdlib ``sqlite3``; docs/spec.md §10).

Derived data only, never the source of truth: every row is rebuilt from the session files,
and a missing, stale or unreadable index never hides a session from listing (listings never
read it). What it holds, per session file:

* a ``sessions`` row: tenant, cwd, agent, created_at (from ``session_meta``), the last git
  branch recorded (:func:`branch_of`), the ``ts`` of the last record indexed, the title (the
  last non-empty one: :func:`shared.titles.title_of`), and how far the file was read
  (inode and byte offset of the next line to index);
* one FTS5 row per piece of text a record holds (:func:`record_texts`): message text, tool
  call names and arguments, tool outputs, reasoning summaries and titles, each cut to
  :data:`MAX_TEXT_CHARS`. The row id carries the session's row id and the record's seq
  (:func:`row_id`), so a session's rows are one row id range (dropped at once when its file is
  replaced, cut or removed) and each match names its record's seq.

**Where it lives.** The reader stays stateless: the index is a cache in a folder of its
own (``serve-reader --search-index-dir``; by default a fresh folder in the system temp
folder, removed at close). A folder holding an index of an earlier run is used as it is:
each file is read on from where it was left when its inode is the same and it did not
shrink, and read again from its start otherwise; an index of another schema version, or
one that cannot be opened, is rebuilt. One reader process per folder (a lock file).

**Keeping current.** A thread of its own (never an RPC's) follows the data root's sessions
folders with inotify (names created, moved, removed, and files written: ``IN_MODIFY``) and
indexes what changed, a bounded number of bytes per file per step so one large file does not
hold back the others, at most one step every :data:`BATCH_SECONDS` once caught up (the
appends of that time are indexed together: a search may miss what was written in the last
~0.25 s), or every :data:`BATCH_FACTOR` times the last step's duration when steps grow long,
up to :data:`MAX_BATCH_SECONDS` (much to index, or a CPU too busy to serve this thread: larger
steps cost less per record, and the lag stays bounded). The thread runs at a lower priority
(:data:`INDEXING_NICENESS`), so that when the CPU is short the index lags rather than the
writer or the reader's RPCs. Each step costs, per changed file, a stat, one read of the bytes
appended and two statements (the file's ``sessions`` row is kept in memory between steps);
every report of a write is one name noted, checked once per step. It lists every folder and
compares sizes every :data:`SWEEP_SECONDS` and whenever reports were lost (changes made
through another host are never reported: docs/spec.md §7). Searches read through connections
of their own (WAL mode: a search never waits for the indexing). The writer's path is not
touched at all. A deleted session is also forgotten at once (:meth:`SearchIndex.forget`, a
removal listener of the reader's listing index, which a search brings up to date first): its
rows are deleted, or left out of searches until the indexing step writing at that moment has
deleted them (docs/deletion.md §1.1).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import math
import os
import re
import shutil
import sqlite3
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from inotify_simple import INotify, flags

from reader_service.listing_index import CompleteLines
from shared.errors import InvalidArgumentError
from shared.layout import SHARDS_DIR, DataRoot, open_session_file, session_file_stat
from shared.naming import session_file_name
from shared.records import parse_timestamp, record_of_line
from shared.session_meta import branch_of, in_folder, tenant_of
from shared.titles import next_title, title_of

log = logging.getLogger(__name__)

#: Schema version of the index file; an index of another version is rebuilt.
SCHEMA_VERSION = 2
INDEX_FILE = f"search-v{SCHEMA_VERSION}.sqlite3"
#: Characters of one piece of text indexed (a long tool output is indexed by its start).
MAX_TEXT_CHARS = 32 * 1024
#: Bytes of one file indexed per step of the indexing thread.
STEP_BYTES = 4 * 1024 * 1024
#: Least seconds between two indexing steps once caught up (changes gather in between: one
#: step for many appends to a file costs about what one step for one append does).
BATCH_SECONDS = 0.25
#: Once caught up, the next step waits this many times the last step's duration, when that is
#: longer than :data:`BATCH_SECONDS` (a step is long when there was much to index or the CPU is
#: short, the indexing thread being served last: it then gathers more per step, each costing
#: less per record) ...
BATCH_FACTOR = 4.0
#: ... and never more than this: the index lags the files by at most about this plus a step.
MAX_BATCH_SECONDS = 1.0
#: Niceness of the indexing thread: when the CPU is short, serving (and the writer on the same
#: host) comes first, and the index lags.
INDEXING_NICENESS = 10
#: Seconds between two tries to watch the shard folders not made yet.
WATCH_SECONDS = 0.5
#: Bytes of files indexed in one transaction of the index.
COMMIT_BYTES = 16 * 1024 * 1024
#: Seconds between two listings of every sessions folder (changes nothing reported).
SWEEP_SECONDS = 5.0
#: Longest query, in characters.
MAX_QUERY_CHARS = 1000
#: Most records ranked for one query (the newest sessions' first); more are not looked at.
MAX_RANKED_RECORDS = 20_000
#: Name prefix of the temporary index folders (``serve-reader`` without --search-index-dir).
TEMPORARY_PREFIX = "rollout-search-"
#: Age after which a temporary index folder no reader holds is removed (a reader killed left it).
ABANDONED_SECONDS = 60.0
#: Records counted of each term of a query, to start from the rarest.
FREQUENCY_COUNTED = 1000
#: Records of a session shown with each hit.
MATCHES_SHOWN = 3
#: Days after which a session's relevance counts half (recency in the ranking).
RECENCY_DAYS = 30.0
#: A title match counts this many times a content match of the same relevance.
TITLE_WEIGHT = 2.0
SNIPPET_OPEN, SNIPPET_CLOSE = "\u00ab", "\u00bb"
_SEQ_BITS, _PART_BITS = 36, 4
_FOLDER_EVENTS = (
    flags.CREATE | flags.MOVED_TO | flags.DELETE | flags.MOVED_FROM | flags.MODIFY | flags.CLOSE_WRITE
)
_GONE_EVENTS = flags.DELETE | flags.MOVED_FROM
_QUERY_WORD = re.compile(r'"([^"]*)"|(\S+)')
_WORD_CHAR = re.compile(r"\w")

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS sessions (id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL,"
    " session_id TEXT NOT NULL, tenant TEXT NOT NULL DEFAULT '', cwd TEXT NOT NULL DEFAULT '',"
    " branch TEXT NOT NULL DEFAULT '', agent TEXT NOT NULL DEFAULT '',"
    " created_at TEXT NOT NULL DEFAULT '', updated_at TEXT NOT NULL DEFAULT '',"
    " title TEXT NOT NULL DEFAULT '', inode INTEGER NOT NULL DEFAULT 0,"
    " indexed_bytes INTEGER NOT NULL DEFAULT 0, text_bytes INTEGER NOT NULL DEFAULT 0,"
    " tail BLOB NOT NULL DEFAULT x'')",
    "CREATE VIRTUAL TABLE IF NOT EXISTS records USING fts5(text, kind UNINDEXED,"
    " tokenize = 'unicode61 remove_diacritics 2')",
)


def row_id(session_row: int, seq: int, part: int) -> int:
    """The FTS row id of piece ``part`` (0..15) of record ``seq`` of session row ``session_row``."""
    return (session_row << (_SEQ_BITS + _PART_BITS)) | (seq << _PART_BITS) | part


def session_rows(session_row: int) -> tuple[int, int]:
    """The first and last FTS row id of a session row (inclusive)."""
    return row_id(session_row, 0, 0), row_id(session_row + 1, 0, 0) - 1


#: A ``sessions`` row as the indexing thread keeps it: (id, inode, indexed_bytes, updated_at,
#: branch, title, text_bytes, tail).
_Row = tuple[int, int, int, str, str, str, int, bytes]
#: Last bytes indexed of a file kept (``tail``): a file that no longer holds them where they
#: were (cut and written again in place, as ``cp`` onto it does) is read again from its start.
TAIL_BYTES = 32
#: Most file names whose parse the indexing thread keeps.
_FILES_KEPT = 200_000


def _remove_abandoned_folders(temp: Path) -> None:
    """Remove the temporary index folders in ``temp`` that a reader left when it died (kill -9, a
    crash: its ``close`` never ran): those whose lock no reader holds and that are older than
    :data:`ABANDONED_SECONDS` (a folder being made has no lock yet). Errors are skipped (another
    user's folder, one removed meanwhile)."""
    try:
        candidates = [entry for entry in os.scandir(temp) if entry.name.startswith(TEMPORARY_PREFIX)]
    except OSError:
        return
    for entry in candidates:
        try:
            if not entry.is_dir(follow_symlinks=False):
                continue
            if time.time() - entry.stat(follow_symlinks=False).st_mtime < ABANDONED_SECONDS:
                continue
            with open(os.path.join(entry.path, "lock"), "rb") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError: a reader holds it
                shutil.rmtree(entry.path)
            log.info("search index: removed %s, left by a reader that did not close it", entry.path)
        except OSError:
            continue


def _corrupt(error: BaseException) -> bool:
    """Whether an sqlite3 error says the index file is damaged or no database (SQLITE_CORRUPT,
    SQLITE_NOTADB), rather than a failure of the moment (a full disk, an I/O error: those are
    sqlite3.OperationalError)."""
    return isinstance(error, sqlite3.DatabaseError) and not isinstance(error, sqlite3.OperationalError)


def _holds(path: Path, end: int, tail: bytes) -> bool:
    """Whether session file ``path`` still holds ``tail`` just before byte ``end`` (what was
    indexed last). Raises OSError when it cannot be read."""
    if not tail:
        return True
    fd = open_session_file(path)
    try:
        return os.pread(fd, len(tail), end - len(tail)) == tail
    finally:
        os.close(fd)


def _agent_of(name: str) -> str:
    parsed = session_file_name(name)
    return parsed.agent_name if parsed is not None and parsed.agent_name else ""


def _seq_of(rowid: int) -> int:
    return (rowid >> _PART_BITS) & ((1 << _SEQ_BITS) - 1)


def _text_of(content: Any) -> str:
    """The text of a message content: a string, or the ``text`` of each part of a list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part["text"] for part in content if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


def record_texts(record_type: str, payload: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The pieces of text a record contributes to the index, each as (kind, text): ``message``
    (user, assistant and system text), ``tool_call`` (each call's name and arguments),
    ``tool_output`` (a tool message's content; JSON in these two decoded: :func:`_decoded`), ``reasoning`` (readable reasoning, never
    encrypted content), ``title`` (a title event: shared.titles). Empty texts are left out."""
    pieces: list[tuple[str, str]] = []
    if record_type == "message":
        text = _text_of(payload.get("content"))
        if payload.get("role") == "tool":
            pieces.append(("tool_output", _decoded(text)))
        else:
            pieces.append(("message", text))
        calls = payload.get("tool_calls")
        if isinstance(calls, list):
            for call in calls:
                function = call.get("function") if isinstance(call, dict) else None
                if isinstance(function, dict):
                    name, arguments = function.get("name"), function.get("arguments")
                    pieces.append(
                        (
                            "tool_call",
                            f"{name if isinstance(name, str) else ''} {_decoded(_text_of_json(arguments))}",
                        )
                    )
    elif record_type == "reasoning":
        pieces.append(("reasoning", _text_of(payload.get("content"))))
    elif record_type == "event":
        title = title_of("event", payload)
        if title is not None:
            pieces.append(("title", title))
    return [(kind, text[:MAX_TEXT_CHARS]) for kind, text in pieces if text.strip()]


def _text_of_json(value: Any) -> str:
    return value if isinstance(value, str) else "" if value is None else str(value)


#: Longest JSON text decoded for indexing (a longer one is indexed as it is).
MAX_DECODED_BYTES = 8 * 1024 * 1024


def _decoded(text: str) -> str:
    """Tool call arguments or a tool output as indexed: a JSON object or array as its keys and
    strings decoded (``key: value`` lines), so that an escaped newline ("\\n", which the
    tokenizer would glue to the next word) or "\\u00e9" is the text it stands for; any other
    text as it is."""
    if text.lstrip()[:1] not in ("{", "[") or len(text) > MAX_DECODED_BYTES:
        return text
    try:
        return _json_words(orjson.loads(text))
    except (orjson.JSONDecodeError, RecursionError):
        return text


def _json_words(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return "\n".join(f"{key}: {_json_words(item)}" for key, item in value.items())
    if isinstance(value, list):
        return " ".join(_json_words(item) for item in value)
    return "" if value is None else str(value)


def fts_terms(query: str) -> list[str]:
    """The FTS5 terms of a person's query: each word (or "quoted phrase") a literal phrase; a
    word ending in ``*`` a prefix. So any text is a search, never a syntax error; a NUL is a
    blank. Raises InvalidArgumentError (``query``) when it is over :data:`MAX_QUERY_CHARS` or
    holds no word (letters or digits: punctuation is not indexed)."""
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidArgumentError("query", f"is {len(query)} characters; at most {MAX_QUERY_CHARS}")
    query = query.replace("\x00", " ")  # SQLite reads an expression up to its first NUL
    terms: list[str] = []
    for match in _QUERY_WORD.finditer(query):
        phrase, word = match.group(1), match.group(2)
        text = phrase if phrase is not None else word.strip('"')
        prefix = phrase is None and len(text) > 1 and text.endswith("*")
        text = text.rstrip("*") if prefix else text
        if not _WORD_CHAR.search(text):
            continue
        quoted = '"' + text.replace('"', '""') + '"'
        terms.append(quoted + "*" if prefix else quoted)
    if not terms:
        raise InvalidArgumentError(
            "query", "holds no word to search for (letters or digits; punctuation alone is not indexed)"
        )
    return terms


@dataclass(frozen=True, slots=True)
class SearchFilters:
    """What a search keeps: ``tenant`` (None: any), ``cwd`` (the folder or below), ``branch``,
    ``agent``, ``since`` (a normalized RFC 3339 time: changed at or after it); "" is any."""

    tenant: str | None = None
    cwd: str = ""
    branch: str = ""
    agent: str = ""
    since: str = ""


@dataclass(frozen=True, slots=True)
class Match:
    seq: int
    kind: str
    snippet: str


@dataclass(frozen=True, slots=True)
class Hit:
    """One session found (see SearchSessions in protos/rollout/v1/reader.proto)."""

    session_id: str
    tenant: str
    agent: str
    cwd: str
    branch: str
    created_at: str
    updated_at: str
    title: str
    title_match: bool
    match_count: int
    score: float
    matches: list[Match] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class SearchPage:
    """A page of hits; ``capped``: the words are in more than :data:`MAX_RANKED_RECORDS` records
    and only the newest sessions' records were ranked."""

    hits: list[Hit]
    next_offset: int | None
    pending: int
    capped: bool = False


def _recency(updated_at: str, now: datetime) -> float:
    try:
        age_days = max(0.0, (now - parse_timestamp(updated_at)).total_seconds() / 86400)
    except ValueError:
        return 0.5
    return 1.0 / (1.0 + age_days / RECENCY_DAYS)


class SearchIndex:
    """The content index of one data root (thread-safe; see the module doc).

    ``folder``: where the index file lives (None: a fresh temporary folder, removed at
    :meth:`close`). Raises OSError when the folder cannot be made, or another reader holds it
    (``EBUSY``).
    """

    def __init__(
        self, root: DataRoot, folder: Path | None = None, sweep_seconds: float = SWEEP_SECONDS
    ) -> None:
        self.root = root
        self.sweep_seconds = sweep_seconds
        self._owned = folder is None
        if folder is None:
            _remove_abandoned_folders(Path(tempfile.gettempdir()))
        self.folder = Path(tempfile.mkdtemp(prefix=TEMPORARY_PREFIX)) if folder is None else folder
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._lock_file = open(self.folder / "lock", "a+b")  # noqa: SIM115 (held until close)
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock_file.close()
            raise OSError(
                errno.EBUSY, "another reader uses this search index folder", str(self.folder)
            ) from None
        self.path = self.folder / INDEX_FILE
        self._connection = self._open_for_writing()
        #: The index file's inode as opened, and how many times it was built again under the
        #: running reader (:meth:`_rebuild`): each thread's search connection follows it.
        self._inode = os.stat(self.path).st_ino
        self._generation = 0
        #: Set when a search or a step found the file damaged: the indexing thread rebuilds it.
        self._rebuild_due = False
        self._local = threading.local()
        self._lock = threading.Lock()
        self._readers: list[sqlite3.Connection] = []
        #: Session file names to (re)index, and whether every folder must be listed.
        self._dirty: set[str] = set()
        #: Session file names gone (:meth:`forget`) whose rows are not deleted yet: searches
        #: leave them out until then. Guarded by ``_lock``.
        self._forgotten: set[str] = set()
        #: Held by whoever writes the index (one transaction at a time).
        self._writing = threading.Lock()
        #: The indexing thread's copy of each indexed file's ``sessions`` row, as read or last
        #: written (:data:`_Row`): a step over a file reads no row. Emptied when a transaction
        #: fails (the rows are then read again).
        self._rows: dict[str, _Row] = {}
        #: Each session file name's parsed name and path (one parse and path per name: pathlib and
        #: the name's regular expression are slow); None for a name of another shape.
        self._files: dict[str, tuple[str, Path] | None] = {}
        self._sweep_due = True
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        #: Notified after each indexing step (:meth:`wait_indexed`); ``steps`` counts them.
        self.indexed = threading.Condition()
        self.steps = 0

    # -- the index file ---------------------------------------------------------------------

    def _open_for_writing(self) -> sqlite3.Connection:
        for stale in self.folder.glob("search-v*.sqlite3*"):  # another schema version's: never read
            if not stale.name.startswith(INDEX_FILE):
                with contextlib.suppress(FileNotFoundError):
                    stale.unlink()
        try:
            connection = self._connect()
            version = connection.execute("PRAGMA user_version").fetchone()[0]
            if version not in (0, SCHEMA_VERSION):
                raise sqlite3.DatabaseError(f"schema version {version}")
            for statement in _SCHEMA:
                connection.execute(statement)
            connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            return connection
        except sqlite3.DatabaseError as exc:
            log.warning("search index %s is rebuilt (%s)", self.path, exc)
            with contextlib.suppress(NameError):
                connection.close()
            for suffix in ("", "-wal", "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(f"{self.path}{suffix}")
            connection = self._connect()
            for statement in _SCHEMA:
                connection.execute(statement)
            connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            return connection

    def _connect(self) -> sqlite3.Connection:
        connection = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            connection.execute("PRAGMA journal_mode = WAL")
            connection.execute("PRAGMA synchronous = OFF")  # a cache: a crash rebuilds what it lost
        except sqlite3.Error:
            connection.close()  # not a database: the caller rebuilds it
            raise
        return connection

    def _reader(self) -> sqlite3.Connection:
        """This thread's connection for searches (opened once per thread, and again after the
        index file was built again: :meth:`_rebuild`)."""
        connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if connection is not None and getattr(self._local, "generation", 0) != self._generation:
            with self._lock:
                if connection in self._readers:
                    self._readers.remove(connection)
            connection.close()
            connection = None
        if connection is None:
            self._local.generation = self._generation
            connection = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, check_same_thread=False)
            connection.create_function("in_folder", 2, in_folder, deterministic=True)  # as listings
            self._local.connection = connection
            with self._lock:
                self._readers.append(connection)
        return connection

    def _damaged(self) -> bool:
        """Whether the index file is gone or another file took its name (removed by a cleaner of
        the temporary folder, replaced), or a search or step found it damaged."""
        if self._rebuild_due:
            return True
        try:
            return os.stat(self.path).st_ino != self._inode
        except FileNotFoundError:
            return True

    def _rebuild(self) -> None:
        """Build the index file again from the files (on the indexing thread): a new empty file,
        every session file read again; searches meanwhile find what is indexed so far."""
        log.warning("search index %s is gone or damaged: it is built again from the files", self.path)
        with self._writing:
            with contextlib.suppress(sqlite3.Error):
                self._connection.close()
            for suffix in ("", "-wal", "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(f"{self.path}{suffix}")
            self._connection = self._open_for_writing()
            self._inode = os.stat(self.path).st_ino
            self._rows.clear()
            self._rebuild_due = False
            self._generation += 1
        self._sweep_due = True

    # -- the indexing thread ----------------------------------------------------------------

    def start(self) -> None:
        """Start the indexing thread (once)."""
        with self._lock:
            if self._thread is not None or self._closed.is_set():
                return
            self._thread = threading.Thread(target=self._run, name="rollout-search-index", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop the indexing thread and release the folder (removed when it was a temporary one)."""
        self._closed.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            readers, self._readers = self._readers, []
        for connection in readers:
            connection.close()
        with self._writing:
            self._connection.close()
        self._lock_file.close()
        if self._owned:
            shutil.rmtree(self.folder, ignore_errors=True)

    def forget(self, path: Path) -> None:
        """Forget the session file at ``path`` (deleted: docs/deletion.md §1.1): its rows leave
        every search from now on, and are deleted from the index's tables at once when no
        indexing step is writing, else by the step under way as it commits (or the next). A
        removal listener of the listing index (reader_service.server): called under the sessions
        folder's lock, so it never waits for the indexing."""
        with self._lock:
            self._forgotten.add(path.name)
        if self._closed.is_set() or not self._writing.acquire(blocking=False):
            return
        try:
            with self._written():
                pass  # a transaction deletes what is forgotten
        except sqlite3.Error as exc:  # left for the indexing thread; searches leave it out meanwhile
            log.warning("search index: forgetting %s: %s", path.name, exc)
        finally:
            self._writing.release()

    def catch_up(self) -> None:
        """List every folder and index all there is, on the calling thread (only while the
        indexing thread is not started: tests, and bench/search.py's first build)."""
        assert self._thread is None, "the indexing thread runs"
        self._sweep()
        while self._dirty:
            self._index_dirty()

    def _run(self) -> None:
        with contextlib.suppress(OSError):  # Linux: a thread is a task of its own, with its own priority
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), INDEXING_NICENESS)
        inotify: INotify | None = None
        watched: set[int] = set()
        last_sweep = -math.inf
        try:
            inotify = INotify(nonblocking=True)
        except OSError as exc:
            log.warning(
                "search index: sessions folders are listed every %ss (no inotify: %s)",
                self.sweep_seconds,
                exc,
            )
        last_watch = -math.inf
        while not self._closed.is_set():
            try:
                began = time.monotonic()
                if self._damaged():
                    self._rebuild()
                if self._forgotten:  # left by a forget that met a step writing
                    with self._transaction():
                        pass
                if inotify is not None and began - last_watch >= WATCH_SECONDS:
                    last_watch = began
                    if len(watched) < self.root.shards:
                        watched = self._watch(inotify, watched)
                if inotify is not None:
                    self._take_reports(inotify, timeout_ms=0 if self._dirty else 200)
                elif not self._dirty:
                    self._closed.wait(min(0.2, self.sweep_seconds))
                if self._sweep_due or time.monotonic() - last_sweep >= self.sweep_seconds:
                    last_sweep = time.monotonic()
                    self._sweep()
                if self._dirty:
                    stepped = time.monotonic()
                    self._index_dirty()
                    if not self._dirty:  # all caught up: let the next changes gather
                        self._closed.wait(self._batch_wait(began, time.monotonic() - stepped))
            except (OSError, sqlite3.Error, ValueError) as exc:
                log.warning("search index: %s", exc)
                if _corrupt(exc):
                    self._rebuild_due = True
                self._closed.wait(1.0)
        if inotify is not None:
            inotify.close()

    @staticmethod
    def _batch_wait(began: float, step_seconds: float) -> float:
        """Seconds to wait before the next step, after a step of ``step_seconds`` that caught up
        in a round begun at ``began`` (see :data:`BATCH_FACTOR`)."""
        window = min(MAX_BATCH_SECONDS, max(BATCH_SECONDS, BATCH_FACTOR * step_seconds))
        return max(0.0, window - (time.monotonic() - began))

    def _watch(self, inotify: INotify, watched: set[int]) -> set[int]:
        """Watch every shard's sessions folder not watched yet (a folder comes with its first
        session: one listing of the shards' folder finds the shards made since the last look)."""
        if not self.root.resolve():
            return watched
        made: set[str] | None = None
        if self.root.sharded:
            try:
                made = set(os.listdir(self.root.root / SHARDS_DIR))
            except FileNotFoundError:
                return watched
        for shard in range(self.root.shards):
            if shard in watched or (made is not None and self.root.shard_dir(shard).name not in made):
                continue
            try:
                inotify.add_watch(self.root.sessions_folder(shard), _FOLDER_EVENTS | flags.ONLYDIR)
            except OSError:
                continue
            watched.add(shard)
            self._sweep_due = True  # what was written before the watch
        return watched

    def _take_reports(self, inotify: INotify, timeout_ms: int) -> None:
        """Note the names reported (each append to a file is one report: a name is checked for
        the session shape once per step, by :meth:`_index_step`, not once per report)."""
        dirty = self._dirty
        for event in inotify.read(timeout=timeout_ms):
            if event.mask & flags.Q_OVERFLOW:
                self._sweep_due = True
            elif event.name:
                dirty.add(event.name)

    def _sweep(self) -> None:
        """List every sessions folder: names gone are dropped, names new, grown, cut or replaced are dirty."""
        self._sweep_due = False
        if not self.root.resolve():
            return
        present: set[str] = set()
        for shard in range(self.root.shards):
            with contextlib.suppress(FileNotFoundError):
                present.update(
                    name for name in os.listdir(self.root.sessions_folder(shard)) if session_file_name(name)
                )
        known = {
            name: (inode, size)
            for name, inode, size in self._connection.execute(
                "SELECT name, inode, indexed_bytes FROM sessions"
            )
        }
        with self._transaction():
            for name in set(known) - present:
                self._drop(name)
        for name in present:
            if name not in known:
                self._dirty.add(name)
                continue
            parsed = session_file_name(name)
            assert parsed is not None
            with contextlib.suppress(OSError):
                stat = os.stat(self.root.session_path(parsed.session_id, name))
                if (stat.st_ino, stat.st_size) != known[name]:
                    self._dirty.add(name)

    def _index_dirty(self) -> None:
        """One step over every dirty file, committed every :data:`COMMIT_BYTES` of file read
        (a commit per file would cost more than most files' indexing)."""
        dirty, self._dirty = self._dirty, set()
        pending = iter(sorted(dirty))  # names begin with the creation time: rows in creation order
        while not self._closed.is_set():
            read = 0
            with self._transaction():
                for name in pending:
                    done, step = self._index_step(name)
                    if not done:
                        self._dirty.add(name)  # more to read: next step (other files first)
                    read += step
                    if read >= COMMIT_BYTES:
                        break
                else:
                    break
        with self.indexed:
            self.steps += 1
            self.indexed.notify_all()

    def _drop(self, name: str) -> None:
        """Forget session file ``name`` and its rows (in the caller's transaction)."""
        self._rows.pop(name, None)
        self._files.pop(name, None)
        row = self._connection.execute("SELECT id FROM sessions WHERE name = ?", (name,)).fetchone()
        if row is None:
            return
        self._connection.execute("DELETE FROM records WHERE rowid BETWEEN ? AND ?", session_rows(row[0]))
        self._connection.execute("DELETE FROM sessions WHERE id = ?", (row[0],))

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        """One write transaction of the index (waits for the one under way, if any)."""
        with self._writing, self._written():
            yield

    @contextlib.contextmanager
    def _written(self) -> Iterator[None]:
        """A write transaction, ``_writing`` held by the caller: it also deletes the rows of the
        session files forgotten (:meth:`forget`), which searches leave out until it commits."""
        with self._lock:
            forgotten = set(self._forgotten)
        self._connection.execute("BEGIN")
        try:
            for name in forgotten:
                self._drop(name)
            yield
        except BaseException:
            self._rows.clear()  # rows written in it are undone: read them again
            self._connection.execute("ROLLBACK")
            raise
        self._connection.execute("COMMIT")
        if forgotten:
            with self._lock:
                self._forgotten -= forgotten

    def _index_step(self, name: str) -> tuple[bool, int]:
        """Index up to :data:`STEP_BYTES` more of session file ``name`` (in the caller's
        transaction); (whether it is read to its last complete line or gone, bytes read)."""
        file = self._file(name)
        if file is None:
            return True, 0
        session_id, path = file
        try:
            stat = session_file_stat(path)
        except FileNotFoundError:
            self._drop(name)
            return True, 0
        row = self._rows.get(name)
        if row is None:
            row = self._connection.execute(
                "SELECT id, inode, indexed_bytes, updated_at, branch, title, text_bytes, tail FROM sessions"
                " WHERE name = ?",
                (name,),
            ).fetchone()
        if row is not None and (
            row[1] != stat.st_ino
            or row[2] > stat.st_size
            or (row[2] < stat.st_size and not _holds(path, row[2], row[7]))
        ):
            self._drop(name)  # replaced, cut, or written again: read again from its start
            row = None
        if row is not None and row[2] == stat.st_size:
            return True, 0
        start = 0 if row is None else row[2]
        lines = CompleteLines(path, start, STEP_BYTES)
        updated_at, branch, title, text_bytes = ("", "", "", 0) if row is None else row[3:7]
        session_row = None if row is None else row[0]
        pieces: list[tuple[int, str, str]] = []
        meta: dict[str, Any] | None = None
        tail = b"" if row is None else row[7]
        for _, block in lines:
            tail = block[-TAIL_BYTES:]
            for raw in block.split(b"\n")[:-1]:
                record = record_of_line(raw)
                if record is None:
                    continue
                record_type, payload, seq = record["type"], record["payload"], record["seq"]
                if record_type == "session_meta" and session_row is None and meta is None:
                    meta = payload
                if isinstance(record.get("ts"), str):
                    updated_at = record["ts"]
                branch = branch_of(record_type, payload) or branch
                title = next_title(title, record_type, payload)
                if not isinstance(seq, int) or not 0 <= seq < 1 << _SEQ_BITS:
                    continue
                for part, (kind, text) in enumerate(record_texts(record_type, payload)[: 1 << _PART_BITS]):
                    pieces.append((row_id(0, seq, part), text, kind))
                    text_bytes += len(text.encode(errors="replace"))
        if session_row is None:
            if meta is None:  # no complete session_meta yet: read again when it grows
                return lines.done, lines.end - start
            session_row = self._connection.execute(
                "INSERT INTO sessions (name, session_id, tenant, cwd, agent, created_at) VALUES (?, ?, ?, ?, ?, ?)",
                (
                    name,
                    session_id,
                    tenant_of(meta),
                    str(meta.get("cwd") or ""),
                    str(meta.get("agent_name") or _agent_of(name) or ""),
                    str(meta.get("created_at") or ""),
                ),
            ).lastrowid
            assert session_row is not None
        base = row_id(session_row, 0, 0)
        self._connection.executemany(
            "INSERT OR REPLACE INTO records (rowid, text, kind) VALUES (?, ?, ?)",
            [(base | rowid, text, kind) for rowid, text, kind in pieces],
        )
        self._connection.execute(
            "UPDATE sessions SET inode = ?, indexed_bytes = ?, updated_at = ?, branch = ?, title = ?,"
            " text_bytes = ?, tail = ? WHERE id = ?",
            (stat.st_ino, lines.end, updated_at, branch, title, text_bytes, tail, session_row),
        )
        self._rows[name] = (session_row, stat.st_ino, lines.end, updated_at, branch, title, text_bytes, tail)
        return lines.done, lines.end - start

    def _file(self, name: str) -> tuple[str, Path] | None:
        """The session id and path of session file ``name``; None when the name is not of the
        session shape (a temporary, a sidecar)."""
        if name in self._files:
            return self._files[name]
        parsed = session_file_name(name)
        file = (
            None if parsed is None else (parsed.session_id, self.root.session_path(parsed.session_id, name))
        )
        if len(self._files) >= _FILES_KEPT:
            self._files.clear()  # names gone without a report (strays): bounded
        self._files[name] = file
        return file

    # -- figures ------------------------------------------------------------------------------

    def wait_indexed(self, name: str, size: int, timeout: float) -> bool:
        """Wait until session file ``name`` is indexed up to ``size`` bytes (bench, tests)."""
        deadline = time.monotonic() + timeout
        connection = self._reader()
        while True:
            row = connection.execute("SELECT indexed_bytes FROM sessions WHERE name = ?", (name,)).fetchone()
            if row is not None and row[0] >= size:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            with self.indexed:
                self.indexed.wait(min(left, 0.05))

    def pending(self) -> int:
        """Session files with bytes not indexed yet, as last seen by the indexing thread."""
        return len(self._dirty)

    def sizes(self) -> tuple[int, int]:
        """(bytes of the index file and its log, bytes of text indexed)."""
        files = sum(
            os.path.getsize(f"{self.path}{suffix}")
            for suffix in ("", "-wal")
            if os.path.exists(f"{self.path}{suffix}")
        )
        text = self._reader().execute("SELECT coalesce(sum(text_bytes), 0) FROM sessions").fetchone()[0]
        return files, int(text)

    # -- searching ------------------------------------------------------------------------------

    def search(self, query: str, filters: SearchFilters, page_size: int, offset: int) -> SearchPage:
        """:meth:`_search`; an index file found damaged is built again by the indexing thread."""
        try:
            return self._search(query, filters, page_size, offset)
        except sqlite3.Error as exc:
            if _corrupt(exc):
                self._rebuild_due = True
            raise

    def _search(self, query: str, filters: SearchFilters, page_size: int, offset: int) -> SearchPage:
        """Sessions holding every term of ``query`` (:func:`fts_terms`), in one record or in
        several, and kept by ``filters``, best first: the ``page_size`` from ``offset`` on. A
        session's relevance is its best record's for the rarest term (bm25), times its recency,
        times :data:`TITLE_WEIGHT` when a title matched a term. Raises InvalidArgumentError
        (``query``), sqlite3.Error when the index cannot be read."""
        terms = list(dict.fromkeys(fts_terms(query)))
        where, arguments = ["1"], []
        if filters.tenant is not None:
            where.append("s.tenant = ?")
            arguments.append(filters.tenant)
        if filters.cwd:
            where.append("in_folder(s.cwd, ?)")
            arguments.append(filters.cwd)
        for column, value in (("branch", filters.branch), ("agent", filters.agent)):
            if value:
                where.append(f"s.{column} = ?")
                arguments.append(value)
        if filters.since:
            where.append("s.updated_at >= ?")
            arguments.append(filters.since)
        connection = self._reader()
        # The sessions holding the rarest term, then each of them probed for the other terms
        # (a seek in each term's postings to the session's row range): a rare word with common
        # ones costs what the rare word matches.
        rarest, *others = sorted(terms, key=lambda term: self._frequency(connection, term))
        found, capped = self._sessions_holding(connection, rarest, where, arguments)
        for term in others:
            kept = []
            for row in found:
                count, in_title = self._in_session(connection, term, row[0])
                if count:
                    kept.append((*row[:11], max(row[11], in_title), row[12]))
            found = kept
        with self._lock:
            if self._forgotten:  # deleted, rows not deleted yet
                found = [row for row in found if row[12] not in self._forgotten]
        now = datetime.now(UTC)
        ranked = sorted(
            (
                (-best * _recency(updated, now) * (TITLE_WEIGHT if in_title else 1.0), row)
                for row in found
                for best, updated, in_title in [(row[9], row[7], row[11])]
            ),
            key=lambda pair: (-pair[0], pair[1][1]),
        )
        page = ranked[offset : offset + page_size]
        either = " OR ".join(terms)
        hits = [
            Hit(
                session_id=row[1],
                tenant=row[2],
                agent=row[3],
                cwd=row[4],
                branch=row[5],
                created_at=row[6],
                updated_at=row[7],
                title=row[8],
                title_match=bool(row[11]),
                match_count=int(row[10])
                if len(terms) == 1
                else self._in_session(connection, either, row[0])[0],
                score=score,
                matches=self._matches(connection, terms, row[0]),
            )
            for score, row in page
        ]
        more = offset + page_size < len(ranked)
        return SearchPage(hits, offset + page_size if more else None, self.pending(), capped)

    @staticmethod
    def _sessions_holding(
        connection: sqlite3.Connection, term: str, where: list[str], arguments: list[str]
    ) -> tuple[list[tuple[Any, ...]], bool]:
        """The sessions the filters (``where``, ``arguments``) keep that hold FTS5 ``term``, each
        as (id, session_id, tenant, agent, cwd, branch, created_at, updated_at, title, best bm25,
        records matching, whether a title matched, file name). And whether the term is in more than :data:`MAX_RANKED_RECORDS` records (only
        the newest are looked at: ranking costs each)."""
        # Counted among the records the filters keep: another tenant's never push the caller's
        # out, nor show in ``capped``.
        bound = connection.execute(
            "SELECT records.rowid FROM records JOIN sessions s ON s.id = records.rowid >> ?"
            f" WHERE records MATCH ? AND {' AND '.join(where)} ORDER BY records.rowid DESC LIMIT 1 OFFSET ?",
            [_SEQ_BITS + _PART_BITS, term, *arguments, MAX_RANKED_RECORDS],
        ).fetchone()
        floor = 0 if bound is None else bound[0] + 1
        rows = connection.execute(
            "WITH m AS MATERIALIZED (SELECT rowid >> ? AS sid, bm25(records) AS rank, kind FROM records"
            " WHERE records MATCH ? AND rowid >= ?)"
            " SELECT s.id, s.session_id, s.tenant, s.agent, s.cwd, s.branch, s.created_at, s.updated_at,"
            " s.title, min(m.rank), count(*), max(m.kind = 'title'), s.name FROM m JOIN sessions s"
            f" ON s.id = m.sid WHERE {' AND '.join(where)} GROUP BY s.id",
            [_SEQ_BITS + _PART_BITS, term, floor, *arguments],
        ).fetchall()
        return rows, bound is not None

    @staticmethod
    def _frequency(connection: sqlite3.Connection, term: str) -> int:
        """Records matching FTS5 ``term``, counted up to :data:`FREQUENCY_COUNTED` (which term is rarest)."""
        return int(
            connection.execute(
                "SELECT count(*) FROM (SELECT 1 FROM records WHERE records MATCH ? LIMIT ?)",
                (term, FREQUENCY_COUNTED),
            ).fetchone()[0]
        )

    @staticmethod
    def _in_session(connection: sqlite3.Connection, expression: str, session_row: int) -> tuple[int, int]:
        """(records of session row ``session_row`` matching FTS5 ``expression``, 1 when a title is
        among them else 0). No bm25 here: SQLite computes it from a term's whole posting list at
        each statement, the cost of a common word."""
        count, in_title = connection.execute(
            "SELECT count(*), coalesce(max(kind = 'title'), 0) FROM records"
            " WHERE records MATCH ? AND rowid BETWEEN ? AND ?",
            (expression, *session_rows(session_row)),
        ).fetchone()
        return int(count), int(in_title)

    @staticmethod
    def _matches(connection: sqlite3.Connection, terms: list[str], session_row: int) -> list[Match]:
        """The records of session row ``session_row`` shown for FTS5 ``terms``: for one term, the
        most relevant (bm25); for several, those holding all of them, then those holding any, in
        file order (bm25 would cost each common term's whole posting list, once per session shown)."""
        first, last = session_rows(session_row)
        select = (
            "SELECT rowid, kind, snippet(records, 0, ?, ?, '…', 16) FROM records"
            " WHERE records MATCH ? AND rowid BETWEEN ? AND ?"
        )
        if len(terms) == 1:
            rows = connection.execute(
                f"{select} ORDER BY rank LIMIT ?",
                (SNIPPET_OPEN, SNIPPET_CLOSE, terms[0], first, last, MATCHES_SHOWN),
            ).fetchall()
        else:
            rows = []
            for expression in (" ".join(terms), " OR ".join(terms)):
                shown = {row[0] for row in rows}
                rows += [
                    row
                    for row in connection.execute(
                        f"{select} ORDER BY rowid LIMIT ?",
                        (SNIPPET_OPEN, SNIPPET_CLOSE, expression, first, last, 2 * MATCHES_SHOWN),
                    )
                    if row[0] not in shown
                ]
        return [Match(_seq_of(rowid), kind, snippet) for rowid, kind, snippet in rows[:MATCHES_SHOWN]]
