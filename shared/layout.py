"""Where sessions live under a data root, and how an id finds its file.

Layout (local files, the embedded default)::

    <data root>/
      writer.lock                  held by the one writer process (SPEC §2.1)
      sessions/<file name>.jsonl   one file per session, named by shared.naming
      sessions/<file name>.jsonl.torn-<n>   bytes set aside by start-up repair
      delegations/<parent id>/<delegation key>.<child id>   empty marker per child

A delegation marker is written (and its folder fsynced) before the child's
session file, so a crash between the two leaves a marker whose child does not
exist, which lookups skip; a child never exists without its marker. The
delegation key is the parent's tool call id, base64url-encoded (no padding) so
that any id is a safe file name.

Everything the writer creates under a data root is private to its user, created so
(never made so afterwards): files ``0600`` (:data:`PRIVATE_FILE_MODE`: session files,
set-aside bytes, saved states, import staging files, delegation markers, the lock) and
folders ``0700`` (:data:`PRIVATE_DIR_MODE`, :func:`make_private_dirs`). A reader must
therefore run as the writer's user; it needs read access only.

Session files are opened without following symbolic links (:func:`open_session_file`,
``O_NOFOLLOW``), by both services: a link planted in the sessions folder is reported
(an OSError ``ELOOP`` saying so: UNAVAILABLE with ErrorInfo ``ELOOP``), never read.

Clients only ever hold session ids (SPEC §6); this module is the one place that
turns an id into a path, so another storage can replace it without touching a
client. An id is resolved through an in-process index of the directory, which
is refreshed from a directory scan on a miss, so readers stay stateless and see
sessions the writer made. A caller that keeps the index current itself (the
reader follows the folder: reader_service.session_folder) registers and forgets
names as they come and go and looks ids up without the scan, which costs tens
of milliseconds for 50,000 names.
"""

from __future__ import annotations

import base64
import binascii
import errno
import os
import stat
import threading
from pathlib import Path
from typing import BinaryIO

from shared.errors import SessionNotFoundError
from shared.naming import SessionFileName, session_file_name, validate_session_id

SESSIONS_DIR = "sessions"
DELEGATIONS_DIR = "delegations"
LOCK_FILE = "writer.lock"
#: base64url of 128 bytes is 172 characters: with the child id, a marker name stays under 255.
DELEGATION_ID_MAX_BYTES = 128
#: Mode of every file the writer creates (no group or other access).
PRIVATE_FILE_MODE = 0o600
#: Mode of every folder the writer creates.
PRIVATE_DIR_MODE = 0o700


def make_private_dirs(folder: Path) -> None:
    """Create ``folder`` and any missing parent, each with mode 0700 (existing ones are left as
    they are). Raises OSError (FileExistsError when a file stands in the way)."""
    missing: list[Path] = []
    current = folder
    while not current.is_dir():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for path in reversed(missing):
        try:
            os.mkdir(path, PRIVATE_DIR_MODE)
        except FileExistsError:
            if not path.is_dir():
                raise


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


class DataRoot:
    """A data root and its session index (thread-safe)."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        self.sessions_dir = self.root / SESSIONS_DIR
        self._index: dict[str, SessionFileName] = {}
        self._names: dict[str, str] = {}
        self._parsed: dict[str, SessionFileName] = {}
        self._lock = threading.Lock()

    @property
    def lock_path(self) -> Path:
        return self.root / LOCK_FILE

    def ensure(self) -> None:
        """Create the data root and its sessions folder if missing (mode 0700: :func:`make_private_dirs`)."""
        make_private_dirs(self.sessions_dir)

    def delegation_marker(self, parent_session_id: str, delegation_id: str, child_session_id: str) -> Path:
        """Where the marker linking a parent's delegation to a child lives."""
        folder = self.root / DELEGATIONS_DIR / validate_session_id(parent_session_id)
        return folder / f"{delegation_key(delegation_id)}.{child_session_id}"

    def delegations_of(self, parent_session_id: str, delegation_id: str = "") -> list[tuple[str, str]]:
        """(delegation id, child session id) of every marker under a parent, in name order.

        With ``delegation_id``, only that delegation's children. Malformed markers are skipped.
        """
        folder = self.root / DELEGATIONS_DIR / validate_session_id(parent_session_id)
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

    def scan(self) -> list[tuple[SessionFileName, str]]:
        """Every session file as (parsed name, file name), refreshing the index.

        Files whose names are not of the session shape (sidecars, strays) are
        skipped. Names already parsed are reused, so a rescan costs one directory
        read plus the parsing of new names only.
        """
        found: list[tuple[SessionFileName, str]] = []
        try:
            names = os.listdir(self.sessions_dir)
        except FileNotFoundError:
            return found
        with self._lock:
            known = self._parsed
        parsed_names: dict[str, SessionFileName] = {}
        for name in names:
            parsed = known.get(name) or session_file_name(name)
            if parsed is None:
                continue
            parsed_names[name] = parsed
            found.append((parsed, name))
        with self._lock:
            self._parsed = parsed_names
            self._index = {parsed.session_id: parsed for parsed, _ in found}
            self._names = {parsed.session_id: name for parsed, name in found}
        return found

    def register(self, parsed: SessionFileName, name: str) -> None:
        """Record a session file that appeared (created by the caller, or seen in the folder)."""
        with self._lock:
            self._index[parsed.session_id] = parsed
            self._names[parsed.session_id] = name

    def forget(self, parsed: SessionFileName, name: str) -> None:
        """Drop a session file that went (when the id still names that file)."""
        with self._lock:
            if self._names.get(parsed.session_id) == name:
                del self._names[parsed.session_id]
                del self._index[parsed.session_id]

    def locate(
        self, session_id: str, field: str = "session_id", rescan: bool = True
    ) -> tuple[SessionFileName, Path]:
        """The parsed name and path of a session's file.

        Raises FileNameError (naming ``field``, the request field that carried the id)
        for an id that is not a lowercase UUID, SessionNotFoundError when no file holds
        it (after a fresh scan; with ``rescan`` False, when the index has none: the
        caller keeps it current) and OSError ``ELOOP`` when its file is a symbolic link.
        """
        validate_session_id(session_id, field)
        for attempt in range(2 if rescan else 1):
            with self._lock:
                name = self._names.get(session_id)
                parsed = self._index.get(session_id)
            if name is not None and parsed is not None:
                path = self.sessions_dir / name
                if os.path.lexists(path):
                    session_file_stat(path)
                    return parsed, path
            if attempt == 0:
                self.scan()
        raise SessionNotFoundError(session_id)
