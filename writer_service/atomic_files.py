"""File operations of the writer: atomic creation and directory fsync.

A session file appears whole or not at all: its first bytes are written to a
hidden temporary name (``.<name>.tmp-<random>``), fsynced, then linked under the
real name (``link`` fails instead of overwriting) and the folder is fsynced. A
crash leaves at most a temporary file, which start-up removes
(:func:`remove_stale_temporaries`): it was never acknowledged.
"""

from __future__ import annotations

import errno
import logging
import os
import re
from pathlib import Path

from shared.errors import SessionExistsError, storage_error
from shared.layout import PRIVATE_FILE_MODE, make_private_dirs, open_session_file, read_session_file

log = logging.getLogger(__name__)

TEMPORARY_MARK = ".tmp-"
#: The whole name :func:`create_temporary` gives: ``.<name>.tmp-<8 lowercase hex>``.
_TEMPORARY_NAME = re.compile(r"\..+" + re.escape(TEMPORARY_MARK) + r"[0-9a-f]{8}")


def fsync_dir(folder: Path) -> None:
    """fsync a folder so that a created, renamed or removed entry is durable."""
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def make_durable_dirs(folder: Path) -> None:
    """Make ``folder`` and any missing parent (mode 0700: shared.layout.make_private_dirs), each
    folder made fsynced into its parent, so that what is created in it survives a crash with it
    (a shard's folders come with its first session). Raises OSError."""
    for made in make_private_dirs(folder):
        fsync_dir(made.parent)


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` (os.write may write fewer)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


#: Bytes one copy_file_range call is asked to copy.
COPY_CHUNK_BYTES = 64 * 1024 * 1024


def copy_range(source: Path, fd: int, start: int, end: int) -> None:
    """Append bytes ``start``..``end`` of ``source`` to ``fd`` in the kernel (``copy_file_range``).

    The bytes never pass through Python objects (a fork of a 500 MB session stays
    small in memory); where the kernel cannot copy between the two files, they are
    copied in 1 MiB reads. Raises OSError.
    """
    with read_session_file(source) as handle:
        src = handle.fileno()
        offset = start
        try:
            while offset < end:
                copied = os.copy_file_range(src, fd, min(COPY_CHUNK_BYTES, end - offset), offset)
                if copied == 0:
                    raise OSError(errno.EIO, f"{source.name} ended before byte {end}")
                offset += copied
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL):
                raise
            while offset < end:
                chunk = os.pread(src, min(1 << 20, end - offset), offset)
                if not chunk:
                    raise OSError(errno.EIO, f"{source.name} ended before byte {end}") from exc
                write_all(fd, chunk)
                offset += len(chunk)


def create_temporary(target: Path, flags: int = 0) -> tuple[Path, int]:
    """Create the hidden temporary file that becomes ``target``: ``.<name>.tmp-<8 hex>`` in its
    folder, mode 0600, opened ``O_WRONLY | O_CREAT | O_EXCL`` plus ``flags``.

    Returns (path, fd). The name is the one start-up removes
    (:func:`remove_stale_temporaries`); used for new session files, import staging
    files and saved states. Raises OSError (FileExistsError on a name collision).
    """
    temporary = target.with_name(f".{target.name}{TEMPORARY_MARK}{os.urandom(4).hex()}")
    return temporary, os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | flags, PRIVATE_FILE_MODE)


def create_file(
    path: Path,
    data: bytes,
    session_id: str,
    copy: tuple[Path, int, int] | None = None,
    trailer: bytes = b"",
) -> int:
    """Create ``path`` holding exactly ``data`` (then bytes ``start``..``end`` of another file
    when ``copy`` = (file, start, end) is given, then ``trailer``), durably; open it for appending.

    Returns an O_RDWR | O_APPEND file descriptor. Raises SessionExistsError when
    the name is taken and StorageWriteError (errno named) when the disk refuses.
    """
    temporary: Path | None = None
    operation = "write"
    try:
        make_durable_dirs(path.parent)
        # copy_file_range refuses O_APPEND; the mode is the session file's (the link keeps it)
        temporary, fd = create_temporary(path)
        try:
            write_all(fd, data)
            if copy is not None:
                copy_range(copy[0], fd, copy[1], copy[2])
            write_all(fd, trailer)
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
        return open_session_file(path, os.O_RDWR | os.O_APPEND)
    except OSError as exc:
        if temporary is not None:
            temporary.unlink(missing_ok=True)
        raise storage_error(exc, operation, f"creating session file {path.name}") from exc


def create_marker(path: Path) -> None:
    """Create an empty delegation marker (0600, its folders 0700) and fsync its folder (see shared.layout).

    Raises StorageWriteError when the disk refuses.
    """
    try:
        make_durable_dirs(path.parent)
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, PRIVATE_FILE_MODE))
        fsync_dir(path.parent)
    except OSError as exc:
        raise storage_error(exc, "write", "creating the delegation marker") from exc


def remove_stale_temporaries(folder: Path, left_by: str = "an unfinished session creation") -> int:
    """Remove the temporary files (:func:`create_temporary`) a crash left in ``folder``; they were
    never acknowledged, ``left_by`` says what made them (logged). Returns how many.

    Only regular files (not followed through a link) whose whole name is a temporary
    name are removed; anything else is left as it is, and an entry that cannot be
    removed is logged and left: start-up goes on. Raises OSError only when ``folder``
    cannot be listed.
    """
    removed = 0
    with os.scandir(folder) as entries:
        for entry in entries:
            if _TEMPORARY_NAME.fullmatch(entry.name) is None or not entry.is_file(follow_symlinks=False):
                continue
            try:
                os.unlink(entry.path)
            except FileNotFoundError:
                continue
            except OSError as exc:
                log.warning("could not remove %s, left by %s: %s", entry.name, left_by, exc)
                continue
            removed += 1
            log.warning("removed %s: %s (never acknowledged)", entry.name, left_by)
    if removed:
        fsync_dir(folder)
    return removed
