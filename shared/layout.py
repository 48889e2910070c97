"""Where sessions live under a data root, and how an id finds its file.

A data root created by this version is **sharded** (docs/spec.md §7): a fixed number of
virtual shards (shared.shards: the count is recorded in ``cluster.json`` when the
root is created, 256 unless the creating writer is told otherwise), each a folder
of its own holding its sessions, its delegation markers and its writer's saved
states. A session's shard is :func:`shared.shards.shard_of` of its id;
a delegation marker lives in its parent's shard::

    <data root>/
      cluster.json                 {"hash":"blake2b-64","shards":256}, written once (0600)
      writer.lock                  held by the writer that owns every shard (docs/spec.md §2.1), or
                                   shared by the writers of a cluster (docs/cluster.md 2.5)
      writer-state/                the storage probe's scratch files (writer_service.storage_probe)
      shards/<NNN>/                shard NNN: 000 .. 255 (zero-padded to the width of the
                                   largest shard number, at least three digits)
        sessions/<file name>.jsonl one file per session of the shard, named by shared.naming
        sessions/<file name>.jsonl.torn-<n>   bytes set aside by start-up repair
        delegations/<parent id>/<delegation key>.<child id>   empty marker per child
        writer-state/<session id>.json        the writer's saved state (derived)
        deletions.jsonl            one deletion record per deleted session (writer_service.deletion)
        trash/<file name>.jsonl    a session file between its deletion's steps (gone at start-up)
      memories/<tenant key>/       memory artifacts of one tenant (memory_store.store, docs/memory.md):
        scopes/<scope key>.jsonl   append-only entries of one scope, fsynced; never read by replay
        leases/<session id>.lease  a pipeline worker's lease on distilling a session
        store.lock                 held while an entry is written or a scope file rewritten

For example, with 256 shards, session ``01a22c15-89a6-7d3d-b5b7-165622bd350c``
(shard 96) is ``shards/096/sessions/2026-11-30_101530_01a22c15-89a6-7d3d-b5b7-165622bd350c.jsonl``.

Each shard has its own recovery (start-up repair walks one shard at a time) and
writer state. A shard's folders are made when the writer first writes to it (a new
root holds ``cluster.json`` alone): making 256 shards' folders (and 256 lock files) up
front took about a second per new root on a loaded disk, for folders most small roots
never use; a missing folder is a shard with no session. The writer that owns every shard
(the embedded default, writer_service.ownership) holds ``writer.lock`` at the top of
the root, the same file an earlier version's writer locks, so the two exclude each other.
The marker of a child created in another shard is written by the child's creator: one
empty create-only file of its own, never written by two owners.

**Legacy layout.** A data root without ``cluster.json`` that holds ``sessions/`` or
``delegations/`` at its top was written by an earlier version:
it is read and written as it is, as one shard (number 0) whose folder is the data
root itself (``<data root>/sessions/...``, ``<data root>/writer.lock``,
``<data root>/writer-state/``). It is never migrated. A root holding neither is not
created yet: a reader knows no session in it until a writer creates it.

A delegation marker is written (and its folder fsynced) before the child's
session file, so a crash between the two leaves a marker whose child does not
exist, which lookups skip; a child never exists without its marker. The
delegation key is the parent's tool call id, base64url-encoded (no padding) so
that any id is a safe file name.

Everything the writer creates under a data root is private to its user, created so
(never made so afterwards): files ``0600`` (:data:`PRIVATE_FILE_MODE`: session files,
set-aside bytes, saved states, import staging files, delegation markers, the lock,
``cluster.json``) and folders ``0700`` (:data:`PRIVATE_DIR_MODE`,
:func:`make_private_dirs`). A reader must therefore run as the writer's user; it
needs read access only.

Session files are opened without following symbolic links (:func:`open_session_file`,
``O_NOFOLLOW``), by both services: a link planted in a sessions folder is reported
(an OSError ``ELOOP`` saying so: UNAVAILABLE with ErrorInfo ``ELOOP``), never read.

Clients only ever hold session ids (docs/spec.md §6); this module is the one place that
turns an id into a path, so another storage can replace it without touching a
client. :meth:`DataRoot.locate` finds an id in a scan of its shard's folder, made again on a
miss (a rescan parses new names only), so the writer and the tools see sessions made by
others. The reader keeps its own id index, current through its folder
following, and looks ids up without any scan (reader_service.listing_index.ListingIndex.locate).
"""

from __future__ import annotations

import base64
import binascii
import errno
import os
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from shared.errors import SessionNotFoundError
from shared.naming import SessionFileName, session_file_name, validate_session_id
from shared.shards import DEFAULT_SHARDS, create_cluster, read_cluster, shard_of

SESSIONS_DIR = "sessions"
#: The folder of memory artifacts (docs/memory.md), beside the shards, never read by replay.
MEMORIES_DIR = "memories"
DELEGATIONS_DIR = "delegations"
LOCK_FILE = "writer.lock"
#: The folder of a sharded root's shards (``shards/<NNN>``).
SHARDS_DIR = "shards"
#: Entries at the top of a data root without ``cluster.json`` that make it a legacy root.
LEGACY_ENTRIES = (SESSIONS_DIR, DELEGATIONS_DIR)
#: base64url of 128 bytes is 172 characters: with the child id, a marker name stays under 255.
DELEGATION_ID_MAX_BYTES = 128
#: Mode of every file the writer creates (no group or other access).
PRIVATE_FILE_MODE = 0o600
#: Mode of every folder the writer creates.
PRIVATE_DIR_MODE = 0o700


def make_private_dirs(folder: Path) -> list[Path]:
    """Create ``folder`` and any missing parent, each with mode 0700 (existing ones are left as
    they are); returns the folders made, outermost first. Raises OSError (FileExistsError when
    a file stands in the way)."""
    missing: list[Path] = []
    current = folder
    while not current.is_dir():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    made: list[Path] = []
    for path in reversed(missing):
        try:
            os.mkdir(path, PRIVATE_DIR_MODE)
            made.append(path)
        except FileExistsError:
            if not path.is_dir():
                raise
    return made


#: Why a session file that is a symbolic link is refused (the strerror of its ELOOP).
LINK_REFUSED = "it is a symbolic link; session files are never opened through links"


def _link_error(path: Path) -> OSError:
    return OSError(errno.ELOOP, LINK_REFUSED, os.fspath(path))


def open_session_file(path: Path, flags: int = os.O_RDONLY) -> int:
    """Open a session file (or its sidecar) without following a symbolic link; returns the fd.

    ``flags`` are os.open's (``O_NOFOLLOW`` and ``O_CLOEXEC`` are added). Raises
    OSError: ``ELOOP`` naming the file when it is a link, as os.open otherwise.
    """
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _link_error(path) from exc
        raise


@contextmanager
def session_fd(path: Path) -> Iterator[int]:
    """A session file opened for reading (:func:`open_session_file`), closed after; an OSError
    raised meanwhile without a file name (pread, fstat) is raised again naming ``path``."""
    fd = open_session_file(path)
    try:
        yield fd
    except OSError as exc:
        if exc.filename is None:
            raise OSError(exc.errno, exc.strerror, os.fspath(path)) from exc
        raise
    finally:
        os.close(fd)


def read_session_file(path: Path) -> BinaryIO:
    """A session file opened for reading (binary, buffered) without following a link.

    Raises OSError as :func:`open_session_file`.
    """
    fd = open_session_file(path)
    try:
        return os.fdopen(fd, "rb")
    except OSError as exc:  # e.g. a directory in its place: name the file, not the descriptor
        os.close(fd)
        raise OSError(exc.errno, exc.strerror, os.fspath(path)) from exc


def session_file_stat(path: Path) -> os.stat_result:
    """``lstat`` of a session file; OSError ``ELOOP`` when it is a symbolic link (never followed)."""
    status = os.lstat(path)
    if stat.S_ISLNK(status.st_mode):
        raise _link_error(path)
    return status


def delegation_key(delegation_id: str) -> str:
    """The file-name-safe key of a delegation id (base64url, no padding)."""
    return base64.urlsafe_b64encode(delegation_id.encode()).decode().rstrip("=")


def delegation_id_of(key: str) -> str:
    """The delegation id a key encodes (the inverse of :func:`delegation_key`)."""
    return base64.urlsafe_b64decode(key + "=" * (-len(key) % 4)).decode()


def shard_folder_name(shard: int, shards: int) -> str:
    """A shard's folder name: its number zero-padded to the width of ``shards - 1``, at least 3 digits."""
    return f"{shard:0{max(3, len(str(shards - 1)))}d}"


class DataRoot:
    """A data root: its layout (sharded, or the legacy single folder) and its session index
    (thread-safe).

    The layout is read from the root when first needed (:meth:`resolve`); a writer makes
    it with :meth:`create`. Until a root is created, it holds no session.
    """

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        #: The shard count once known (0: the root is not created yet).
        self._shards = 0
        self._sharded = False
        self._index: dict[str, SessionFileName] = {}
        self._names: dict[str, str] = {}
        #: The path of each id located so far (a lookup builds none again).
        self._paths: dict[str, Path] = {}
        #: Per shard, the names its last scan parsed (a rescan parses new names only).
        self._parsed: dict[int, dict[str, SessionFileName]] = {}
        #: Per shard, its folder and its sessions folder (a path is built once: pathlib is slow).
        self._folders: dict[int, tuple[Path, Path]] = {}
        self._lock = threading.Lock()

    # -- layout ---------------------------------------------------------------------------

    def create(self, shards: int = DEFAULT_SHARDS) -> None:
        """Make the root (mode 0700) if missing and decide its layout (the writer).

        A root that already has a layout keeps it (its recorded count, or the legacy layout,
        whose sessions folder is made if missing; ``shards`` is then not used); a new one is
        created sharded with ``shards`` shards: ``cluster.json`` only, shard folders come
        with their first session. Raises ValueError for a bad count, ClusterFileError for an
        unreadable record, OSError.
        """
        make_private_dirs(self.root)
        if not self.resolve():
            record = create_cluster(self.root, shards)
            self._decide(record.shards, True)
        if not self._sharded:
            make_private_dirs(self.sessions_folder(0))

    def resolve(self) -> bool:
        """Read the root's layout when not known yet; False while the root is not created.

        Raises ClusterFileError when ``cluster.json`` cannot be read as a record.
        """
        if self._shards:
            return True
        record = read_cluster(self.root)
        if record is not None:
            self._decide(record.shards, True)
        elif any(os.path.lexists(self.root / entry) for entry in LEGACY_ENTRIES):
            self._decide(1, False)
        return bool(self._shards)

    def _decide(self, shards: int, sharded: bool) -> None:
        self._sharded = sharded
        self._shards = shards

    @property
    def shards(self) -> int:
        """The number of shards: the recorded count, 1 for a legacy root, 0 while not created."""
        self.resolve()
        return self._shards

    @property
    def sharded(self) -> bool:
        """Whether the root has the sharded layout (False for a legacy root or one not created)."""
        self.resolve()
        return self._sharded

    def shard_of(self, session_id: str) -> int:
        """The shard of a session (:func:`shared.shards.shard_of`; 0 in a legacy root or one not
        created yet)."""
        if not self._shards:
            self.resolve()
        return shard_of(session_id, self._shards) if self._sharded else 0

    def shard_dir(self, shard: int) -> Path:
        """The folder of one shard (the data root itself in a legacy root)."""
        return self._shard_folders(shard)[0]

    def sessions_folder(self, shard: int) -> Path:
        """The folder of one shard's session files."""
        return self._shard_folders(shard)[1]

    def _shard_folders(self, shard: int) -> tuple[Path, Path]:
        folders = self._folders.get(shard)
        if folders is None:
            if not self._shards:
                self.resolve()
            if not self._shards:
                return self.root, self.root / SESSIONS_DIR  # not created: nothing is there
            folder = (
                self.root / SHARDS_DIR / shard_folder_name(shard, self._shards)
                if self._sharded
                else self.root
            )
            folders = self._folders[shard] = (folder, folder / SESSIONS_DIR)
        return folders

    def session_path(self, session_id: str, name: str) -> Path:
        """The path of session ``session_id``'s file ``name`` (in its shard's folder)."""
        return self.sessions_folder(self.shard_of(session_id)) / name

    @property
    def memories_folder(self) -> Path:
        """The folder of memory artifacts (``<root>/memories``), in either layout; the memory
        pipeline (rollout_memory) writes it, and forgets (the writer's ForgetMemories, or
        ``rollout memory forget`` locally); the reader reads it for GetMemories and
        ResolveProvenance only, and no replay reads it (docs/memory.md §5)."""
        return self.root / MEMORIES_DIR

    @property
    def lock_path(self) -> Path:
        """The lock file held by the writer that owns every shard (the embedded default)."""
        return self.root / LOCK_FILE

    # -- delegations --------------------------------------------------------------------------

    def _delegations_of(self, parent_session_id: str) -> Path:
        validate_session_id(parent_session_id)
        return self.shard_dir(self.shard_of(parent_session_id)) / DELEGATIONS_DIR / parent_session_id

    def delegations_folder(self, parent_session_id: str) -> Path:
        """The folder of a parent's delegation markers (its shard's ``delegations/<parent id>``)."""
        return self._delegations_of(parent_session_id)

    def delegation_marker(self, parent_session_id: str, delegation_id: str, child_session_id: str) -> Path:
        """Where the marker linking a parent's delegation to a child lives (the parent's shard)."""
        folder = self._delegations_of(parent_session_id)
        return folder / f"{delegation_key(delegation_id)}.{child_session_id}"

    def delegations_of(self, parent_session_id: str, delegation_id: str = "") -> list[tuple[str, str]]:
        """(delegation id, child session id) of every marker under a parent, in name order.

        With ``delegation_id``, only that delegation's children. Malformed markers are skipped.
        """
        if not self.resolve():
            validate_session_id(parent_session_id)
            return []
        folder = self._delegations_of(parent_session_id)
        try:
            names = sorted(os.listdir(folder))
        except FileNotFoundError:
            return []
        found: list[tuple[str, str]] = []
        for name in names:
            key, _, child = name.rpartition(".")
            try:
                decoded = delegation_id_of(key)
            except (binascii.Error, UnicodeDecodeError, ValueError):
                continue
            if not delegation_id or decoded == delegation_id:
                found.append((decoded, child))
        return found

    # -- the session index ----------------------------------------------------------------------

    def scan(self) -> list[tuple[SessionFileName, str]]:
        """Every session file of every shard as (parsed name, file name), refreshing the index."""
        if not self.resolve():
            return []
        found: list[tuple[SessionFileName, str]] = []
        for shard in range(self._shards):
            found += self.scan_shard(shard)
        return found

    def scan_shard(self, shard: int) -> list[tuple[SessionFileName, str]]:
        """Every session file of one shard as (parsed name, file name), refreshing its index.

        Files whose names are not of the session shape (sidecars, strays) are
        skipped. Names already parsed are reused, so a rescan costs one directory
        read plus the parsing of new names only.
        """
        found: list[tuple[SessionFileName, str]] = []
        try:
            names = os.listdir(self.sessions_folder(shard))
        except FileNotFoundError:
            names = []
        with self._lock:
            known = self._parsed.get(shard, {})
        parsed_names: dict[str, SessionFileName] = {}
        for name in names:
            parsed = known.get(name) or session_file_name(name)
            if parsed is None:
                continue
            parsed_names[name] = parsed
            found.append((parsed, name))
        with self._lock:
            for name, parsed in self._parsed.get(shard, {}).items():
                if name not in parsed_names and self._names.get(parsed.session_id) == name:
                    del self._names[parsed.session_id]
                    del self._index[parsed.session_id]
                    self._paths.pop(parsed.session_id, None)
            self._parsed[shard] = parsed_names
            for parsed, name in found:
                self._index[parsed.session_id] = parsed
                self._names[parsed.session_id] = name
        return found

    def locate(self, session_id: str, field: str = "session_id") -> tuple[SessionFileName, Path]:
        """The parsed name and path of a session's file.

        Raises FileNameError (naming ``field``, the request field that carried the id)
        for an id that is not a lowercase UUID, SessionNotFoundError when no file holds
        it (after a fresh scan of its shard) and OSError ``ELOOP`` when its file is a
        symbolic link.
        """
        validate_session_id(session_id, field)
        if not self.resolve():
            raise SessionNotFoundError(session_id)
        for attempt in range(2):
            with self._lock:
                name = self._names.get(session_id)
                parsed = self._index.get(session_id)
            if name is not None and parsed is not None:
                path = self._paths.get(session_id)
                if path is None or path.name != name:
                    path = self._paths[session_id] = self.session_path(session_id, name)
                if os.path.lexists(path):
                    session_file_stat(path)
                    return parsed, path
            if attempt == 0:
                self.scan_shard(self.shard_of(session_id))
        raise SessionNotFoundError(session_id)
