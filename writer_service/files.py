"""File operations of the writer: atomic creation and directory fsync.

A session file appears whole or not at all: its first bytes are written to a
hidden temporary name (``.<name>.tmp-<random>``), fsynced, then linked under the
real name (``link`` fails instead of overwriting) and the folder is fsynced. A
crash leaves at most a temporary file, which start-up removes
(:func:`remove_stale_temporaries`): it was never acknowledged.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from shared.errors import SessionExistsError, storage_error

log = logging.getLogger(__name__)

TEMPORARY_MARK = ".tmp-"


def fsync_dir(folder: Path) -> None:
    """fsync a folder so that a created, renamed or removed entry is durable."""
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` (os.write may write fewer)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def create_file(path: Path, data: bytes, session_id: str) -> int:
    """Create ``path`` holding exactly ``data``, durably, and open it for appending.

    Returns an O_APPEND file descriptor. Raises SessionExistsError when the name
    is taken and StorageWriteError (errno named) when the disk refuses.
    """
    temporary = path.with_name(f".{path.name}{TEMPORARY_MARK}{os.urandom(4).hex()}")
    operation = "write"
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            write_all(fd, data)
            operation = "fsync"
            os.fsync(fd)
        finally:
            os.close(fd)
        operation = "link"
        try:
            os.link(temporary, path)
        except FileExistsError as exc:
            raise SessionExistsError(session_id) from exc
        finally:
            temporary.unlink(missing_ok=True)
        operation = "fsync"
        fsync_dir(path.parent)
        operation = "open"
        return os.open(path, os.O_WRONLY | os.O_APPEND)
    except OSError as exc:
        temporary.unlink(missing_ok=True)
        raise storage_error(exc, operation, f"creating session file {path.name}") from exc


def create_marker(path: Path) -> None:
    """Create an empty delegation marker and fsync its folder (see shared.layout).

    Raises StorageWriteError when the disk refuses.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
        fsync_dir(path.parent)
    except OSError as exc:
        raise storage_error(exc, "write", "creating the delegation marker") from exc


def remove_stale_temporaries(folder: Path) -> int:
    """Remove temporary files a crash left behind (never acknowledged); returns how many."""
    removed = 0
    for entry in folder.glob(f".*{TEMPORARY_MARK}*"):
        entry.unlink(missing_ok=True)
        removed += 1
        log.warning("removed %s: an unfinished session creation (never acknowledged)", entry.name)
    if removed:
        fsync_dir(folder)
    return removed
