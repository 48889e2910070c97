"""Saved per-session state: reopening a session reads a bounded number of bytes (docs/spec.md §2.10).

Validating a tool output needs the tool call ids of the session's current view,
which only the whole file holds. So that reopening a session never re-reads its
whole file, the writer saves, per session, a small state file in its shard's
folder (shared.layout; the data root itself in a legacy root)::

    <shard folder>/writer-state/<session id>.json
    {"v":1,"offset":N,"last_seq":S,"inode":I,"check":"<hex>","calls":[...],"meta":{...}}

``offset`` is a committed length of the session file, ``last_seq`` the seq of the
record ending there, ``check`` a hash of the :data:`CHECK_BYTES` bytes before it,
``calls`` the call view at that offset and ``meta`` the ``session_meta`` payload.
A session is reopened from its state plus the lines after ``offset`` (at most
about :data:`SAVE_EVERY_BYTES`: the writer saves again each time that many bytes
were appended, when it closes an idle session's file and at shutdown).

The state is derived, never the source of truth: it is written without fsync
(temporary name, then rename; a temporary a crash left is removed at start-up,
:func:`remove_stale_saves`), and a state whose inode, offset or check bytes do
not match the file (a crash, a file replaced or cut back) is ignored, and the
session is indexed from its whole file once (bounded memory,
:func:`shared.rebuild_index.index_rebuild`), as is a session that has no state yet
(written by an older version, imported by copying files, or created and never
saved before a crash).
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from shared.committed_lines import CommittedLines
from shared.layout import make_private_dirs, open_session_file
from writer_service.atomic_files import create_temporary, remove_stale_temporaries, write_all

log = logging.getLogger(__name__)

STATE_DIR = "writer-state"
STATE_VERSION = 1
#: Bytes appended to a session after which its state is saved again.
SAVE_EVERY_BYTES = 1 << 20
#: Bytes before the saved offset whose hash must match for the state to be used.
CHECK_BYTES = 64
#: Bytes read at a time when replaying the lines after the saved offset.
READ_CHUNK_BYTES = 256 * 1024

# The read boundary, named so that tests can count what a reopen reads (with
# shared.committed_lines.pread, which reads the lines after the saved offset).
_os_pread = os.pread


@dataclass(frozen=True, slots=True)
class SessionState:
    """A session's call view and meta at a committed ``offset`` of its file (see the module docstring)."""

    offset: int
    last_seq: int
    calls: list[str]
    meta: dict[str, Any]


def state_path(shard_dir: Path, session_id: str) -> Path:
    """Where the state of a session of the shard whose folder is ``shard_dir`` is saved."""
    return shard_dir / STATE_DIR / f"{session_id}.json"


def _check(fd: int, offset: int) -> str | None:
    """Hash of the bytes just before ``offset`` (None when they do not end a line)."""
    start = max(0, offset - CHECK_BYTES)
    data = _os_pread(fd, offset - start, start)
    if len(data) != offset - start or not data.endswith(b"\n"):
        return None
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def save_state(shard_dir: Path, session_id: str, path: Path, state: SessionState) -> None:
    """Write ``state`` for the session file ``path`` (I/O thread); a failure is only logged.

    The bytes up to ``state.offset`` must be durable (they are read back for the check).
    """
    target = state_path(shard_dir, session_id)
    try:
        fd = open_session_file(path)
        try:
            check = _check(fd, state.offset)
            inode = os.fstat(fd).st_ino
        finally:
            os.close(fd)
        if check is None:
            return
        body = orjson.dumps(
            {
                "v": STATE_VERSION,
                "offset": state.offset,
                "last_seq": state.last_seq,
                "inode": inode,
                "check": check,
                "calls": state.calls,
                "meta": state.meta,
            }
        )
        make_private_dirs(target.parent)
        temporary, out = create_temporary(target)
        try:
            write_all(out, body)
        finally:
            os.close(out)
        os.replace(temporary, target)
    except OSError as exc:
        log.warning(
            "could not save the state of %s (%s); its next reopen reads more of its file", session_id, exc
        )


def load_state(shard_dir: Path, session_id: str, fd: int) -> SessionState | None:
    """The saved state of a session whose file is open as ``fd``, or None when missing or stale."""
    try:
        saved = orjson.loads(state_path(shard_dir, session_id).read_bytes())
        offset = saved["offset"]
        status = os.fstat(fd)
        if (
            saved.get("v") != STATE_VERSION
            or not isinstance(offset, int)
            or saved["inode"] != status.st_ino
            or offset > status.st_size
            or saved["check"] != _check(fd, offset)
        ):
            return None
        return SessionState(offset, int(saved["last_seq"]), list(saved["calls"]), dict(saved["meta"]))
    except (OSError, orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None


def remove_stale_saves(shard_dir: Path) -> int:
    """Remove the temporary files of saves a crash cut short in ``shard_dir`` (start-up); returns how many."""
    folder = shard_dir / STATE_DIR
    if not folder.is_dir():
        return 0
    return remove_stale_temporaries(folder, "an unfinished save of a session's state")


def remove_state(shard_dir: Path, session_id: str) -> None:
    state_path(shard_dir, session_id).unlink(missing_ok=True)


def lines_after(fd: int, offset: int, end: int) -> Iterator[bytes]:
    """The complete lines of ``fd`` between ``offset`` and ``end`` (without ``\\n``), read in chunks."""
    return CommittedLines(fd, offset, end, READ_CHUNK_BYTES).lines()
