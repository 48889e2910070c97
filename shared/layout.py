"""Where sessions live under a data root, and how an id finds its file.

Layout (local files, the embedded default)::

    <data root>/
      writer.lock                  held by the one writer process (SPEC §2.1)
      sessions/<file name>.jsonl   one file per session, named by shared.naming
      sessions/<file name>.jsonl.torn-<n>   bytes set aside by start-up repair

Clients only ever hold session ids (SPEC §6); this module is the one place that
turns an id into a path, so another storage can replace it without touching a
client. An id is resolved through an in-process index of the directory, which
is refreshed from a directory scan on a miss (a scan of 10,000 names costs a
few milliseconds), so readers stay stateless and see sessions the writer made.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from shared.errors import FileNameError, SessionNotFoundError
from shared.naming import FILE_SUFFIX, SessionFileName, parse_file_name, validate_session_id

SESSIONS_DIR = "sessions"
LOCK_FILE = "writer.lock"


class DataRoot:
    """A data root and its session index (thread-safe)."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        self.sessions_dir = self.root / SESSIONS_DIR
        self._index: dict[str, SessionFileName] = {}
        self._names: dict[str, str] = {}
        self._lock = threading.Lock()

    @property
    def lock_path(self) -> Path:
        return self.root / LOCK_FILE

    def ensure(self) -> None:
        """Create the data root and its sessions folder if missing."""
        self.sessions_dir.mkdir(parents=True, exist_ok=True)

    def scan(self) -> list[tuple[SessionFileName, str]]:
        """Every session file as (parsed name, file name), refreshing the index.

        Files whose names are not of the session shape (sidecars, strays) are skipped.
        """
        found: list[tuple[SessionFileName, str]] = []
        try:
            entries = os.scandir(self.sessions_dir)
        except FileNotFoundError:
            return found
        with entries:
            for entry in entries:
                if not entry.name.endswith(FILE_SUFFIX):
                    continue
                try:
                    parsed = parse_file_name(entry.name)
                except FileNameError:
                    continue
                found.append((parsed, entry.name))
        with self._lock:
            self._index = {parsed.session_id: parsed for parsed, _ in found}
            self._names = {parsed.session_id: name for parsed, name in found}
        return found

    def register(self, parsed: SessionFileName, name: str) -> None:
        """Record a file the caller just created (the writer)."""
        with self._lock:
            self._index[parsed.session_id] = parsed
            self._names[parsed.session_id] = name

    def locate(self, session_id: str) -> tuple[SessionFileName, Path]:
        """The parsed name and path of a session's file.

        Raises FileNameError for an id that is not a lowercase UUID and
        SessionNotFoundError when no file holds it (after a fresh scan).
        """
        validate_session_id(session_id)
        for attempt in range(2):
            with self._lock:
                name = self._names.get(session_id)
                parsed = self._index.get(session_id)
            if name is not None and parsed is not None:
                path = self.sessions_dir / name
                if path.exists():
                    return parsed, path
            if attempt == 0:
                self.scan()
        raise SessionNotFoundError(session_id)
