"""Start-up repair of torn session tails (docs/spec.md §2.10).

A crash mid-write can leave a session file ending in a partial line (no ``\\n``),
a line that is not JSON, or a run of NUL bytes (space the file system allocated
but never filled). Any last line that is not a complete valid record of the session
is treated the same way (valid JSON included: ``{}``, a line whose check fails, a
record whose seq does not follow the one before it; shared.tail.record_fits).
Only the writer repairs, and only the tail: the damaged bytes
are copied to a sidecar ``<file>.torn-<n>`` next to the file (never lost), the
file is truncated to the end of its last complete record and fsynced, and the
repair is logged. Damage in the middle of a file is left alone; the reader
reports it as degraded.

A repair that cannot be done (no space for the sidecar, a file that cannot be read
or written) raises, leaving the file as it was and no sidecar behind (never an
empty one): the writer then refuses that session (UNAVAILABLE, with the reason),
serves every other one, and tries again later (writer_service.session_index).
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable
from pathlib import Path

from shared.errors import SessionUnavailableError
from shared.layout import PRIVATE_FILE_MODE, open_session_file, read_session_file, session_file_stat
from shared.tail import record_fits
from writer_service import metrics
from writer_service.atomic_files import fsync_dir, write_all

log = logging.getLogger(__name__)

#: How far back from the end repair looks for the last complete record.
REPAIR_WINDOW_BYTES = 1 << 20


def _good_end(tail: bytes, base: int) -> int | None:
    """Offset (absolute) just after the last complete line in ``tail`` that is a valid record
    of the session (shared.tail.record_fits), if any.

    ``tail`` starts at absolute offset ``base``; None when no such line is found.
    """
    end = len(tail)
    while True:
        cut = tail.rfind(b"\n", 0, end)
        if cut < 0:
            return None
        start = tail.rfind(b"\n", 0, cut) + 1
        if start == 0 and base > 0:
            return None  # the line may begin before the window; caller widens it
        if record_fits(tail, start, cut, base):
            return base + cut + 1
        end = cut


def repair_torn_tail(path: Path) -> int:
    """Move a torn tail of ``path`` aside and truncate; returns the bytes moved (0: clean).

    A file without one complete record is moved aside whole (it is then no session).

    Raises OSError when the file cannot be read, written or synced.
    """
    size = session_file_stat(path).st_size
    if size == 0:  # a creation cut short before its first byte: no session, free the id
        sidecar = _sidecar_path(path)
        os.rename(path, sidecar)
        fsync_dir(path.parent)
        log.warning("moved the empty file %s aside as %s", path.name, sidecar.name)
        return 0
    window = min(size, REPAIR_WINDOW_BYTES)
    with read_session_file(path) as handle:
        handle.seek(size - window)
        tail = handle.read(window)
    if tail.endswith(b"\n"):
        last_start = tail.rfind(b"\n", 0, len(tail) - 1) + 1
        if (last_start > 0 or size == window) and record_fits(tail, last_start, len(tail) - 1, size - window):
            return 0
    while True:
        good = _good_end(tail, size - window)
        if good is not None or window == size:
            break
        window = min(size, window * 4)
        with read_session_file(path) as handle:
            handle.seek(size - window)
            tail = handle.read(window)
    good_end = good or 0
    sidecar = _sidecar_path(path)
    if good_end == 0:
        # Not one complete record (a session_meta torn by a crash): the file is not a
        # session. Move it aside whole, so that the id is free and nothing is lost.
        os.rename(path, sidecar)
        fsync_dir(path.parent)
        log.warning("moved %s aside as %s: it holds no complete record", path.name, sidecar.name)
        return size
    damaged = tail[good_end - (size - window) :]
    _write_sidecar(sidecar, damaged)
    fd = open_session_file(path, os.O_RDWR)
    try:
        os.ftruncate(fd, good_end)
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(path.parent)
    log.warning(
        "repaired torn tail of %s: %d bytes moved to %s, file cut to %d bytes",
        path.name,
        len(damaged),
        sidecar.name,
        good_end,
    )
    return len(damaged)


def _write_sidecar(sidecar: Path, damaged: bytes) -> None:
    """Write the set-aside bytes to a new sidecar, durably; on any failure remove it (no empty
    or partial sidecar is ever left) and raise the OSError."""
    fd = os.open(sidecar, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, PRIVATE_FILE_MODE)
    try:
        write_all(fd, damaged)
        os.fsync(fd)
    except OSError:
        os.close(fd)
        sidecar.unlink(missing_ok=True)
        raise
    os.close(fd)


def _sidecar_path(path: Path) -> Path:
    number = 1
    while True:
        candidate = path.with_name(f"{path.name}.torn-{number}")
        if not candidate.exists():
            return candidate
        number += 1


def unavailable(name: str, exc: OSError) -> SessionUnavailableError:
    """The refusal of a session whose file could not be repaired or read (``exc``)."""
    return SessionUnavailableError(
        f"session file {name} could not be repaired or read ({exc.strerror or exc}); this session is"
        " refused until it is (the writer retries in the background and at each call); every other"
        " session serves",
        errno_name=errno.errorcode.get(exc.errno or 0, ""),
    )


class RepairBacklog:
    """Sessions refused because their file could not be repaired or read (session id -> reason).

    Exported as ``rollout_sessions_awaiting_repair`` (and each failure counted in
    ``rollout_repair_failures_total``); observers hear whether the backlog is empty
    after each change (the server turns that into the writer's gRPC health).
    Event loop only, but for :func:`writer_service.session_index.build_index`, which
    fills it before serving starts.
    """

    def __init__(self) -> None:
        self.pending: dict[str, str] = {}
        self._observers: list[Callable[[bool], None]] = []

    def observe(self, observer: Callable[[bool], None]) -> None:
        self._observers.append(observer)

    def failed(self, session_id: str, reason: str) -> None:
        """A repair or read of ``session_id`` failed (again)."""
        metrics.REPAIR_FAILURES.inc()
        log.error("%s", reason)
        was_empty = not self.pending
        self.pending[session_id] = reason
        self._changed(was_empty)

    def repaired(self, session_id: str) -> None:
        """``session_id`` serves again."""
        if self.pending.pop(session_id, None) is not None:
            log.warning("session %s serves again: its file was repaired", session_id)
            self._changed(False)

    def dropped(self, session_id: str) -> None:
        """``session_id`` was deleted: nothing of it awaits a repair any more."""
        if self.pending.pop(session_id, None) is not None:
            self._changed(False)

    def _changed(self, was_empty: bool) -> None:
        metrics.SESSIONS_AWAITING_REPAIR.set(len(self.pending))
        if was_empty != (not self.pending):
            for observer in self._observers:
                observer(not self.pending)
