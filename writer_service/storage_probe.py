"""Probing storage that failed, so that health recovers by itself (docs/spec.md §2.3: the writer keeps
serving once storage recovers, and says so).

A failed durability round turns the writer's storage health unhealthy
(:class:`~writer_service.committer.StorageHealth`: gRPC health NOT_SERVING, the
``rollout_storage_healthy`` gauge 0). A good round turns it back, but a writer that
health checks took out of service (a readiness probe, a load balancer) receives no
append to make one. So while storage is unhealthy, and only then, :class:`StorageProbe`
tries it every ``interval`` seconds on an I/O thread (:func:`probe_storage`): the data
root's file system must have room for the round that failed (``statvfs``), and take a
small file written and fsynced there (the errors a write or a sync meets: no space, a
quota, an I/O error, a read-only file system). The first probe that passes reports
storage healthy; the next round that fails turns it unhealthy again. A healthy writer
probes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

from shared.layout import make_private_dirs
from writer_service.atomic_files import create_temporary, write_all
from writer_service.committer import StorageHealth
from writer_service.saved_state import STATE_DIR

log = logging.getLogger(__name__)

#: Bytes a probe writes and fsyncs (one page).
PROBE_BYTES = 4096
#: Seconds between two probes of unhealthy storage.
PROBE_INTERVAL_SECONDS = 1.0


def probe_storage(root: Path, needed_bytes: int) -> str | None:
    """Whether the file system of data root ``root`` takes writes again (I/O thread): None when it
    has ``needed_bytes`` free for unprivileged writers and a :data:`PROBE_BYTES` file written and
    fsynced in ``<root>/writer-state`` (removed after; a crash leaves a temporary start-up removes),
    else the reason it does not."""
    folder = root / STATE_DIR
    try:
        make_private_dirs(folder)
        stats = os.statvfs(folder)
        free = stats.f_bavail * stats.f_frsize
        if free < needed_bytes:
            return f"{free} bytes free, {needed_bytes} needed by the round that failed"
        path, fd = create_temporary(folder / "storage-probe")
        try:
            try:
                write_all(fd, bytes(PROBE_BYTES))
                os.fsync(fd)
            finally:
                os.close(fd)
        finally:
            path.unlink(missing_ok=True)
    except OSError as exc:
        return f"a probe write failed: {exc.strerror or exc}"
    return None


class StorageProbe:
    """Probes storage every ``interval`` seconds while ``health`` is unhealthy (see the module doc).

    Observe ``health`` with it (``health.observe(probe)``); ``run_io`` runs a blocking function
    on the writer's I/O threads. Event loop only.
    """

    def __init__(
        self,
        health: StorageHealth,
        root: Path,
        run_io: Callable[..., Awaitable[str | None]],
        interval: float = PROBE_INTERVAL_SECONDS,
    ) -> None:
        self._health = health
        self._root = root
        self._run_io = run_io
        self._interval = interval
        self._task: asyncio.Task[None] | None = None
        self.probes = 0

    def __call__(self, healthy: bool) -> None:
        """The health observer: start probing when storage turns unhealthy."""
        if not healthy and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(self._probe_until_healthy())

    async def _probe_until_healthy(self) -> None:
        reason = ""
        while not self._health.healthy:
            await asyncio.sleep(self._interval)
            if self._health.healthy:  # a round got through meanwhile
                return
            self.probes += 1
            found = await self._run_io(probe_storage, self._root, self._health.failed_bytes)
            if found is None:
                if not self._health.healthy:
                    log.info("storage is writable again (a probe write passed); health SERVING")
                    self._health.report(True)
                return
            if found != reason:
                log.warning("storage still refuses writes: %s; probing every %g s", found, self._interval)
                reason = found

    async def close(self) -> None:
        """Stop probing (the writer is stopping)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
