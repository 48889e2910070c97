"""Retention: the writer deletes stopped sessions older than N days (``--retain-stopped-days``).

A session is due when it is stopped (its last record is a stop, or a checkpoint whose stop
record never landed: the writer's index says so) and its file was last written more than
``days`` days before now: the time of its stop, or of its last write after a Resume and a
later Stop. Open sessions are never due, whatever their age. Each due session is deleted as
DeleteSession deletes it (writer_service.deletion), with cause ``retention`` and
``deleted_by`` ``retention`` in its deletion record, and counted in
``rollout_deleted_sessions_total{cause="retention"}``.

The writer runs a pass at start and then every ``interval`` seconds
(:data:`RETENTION_INTERVAL_SECONDS` by default). The clock is a parameter of each pass
(:func:`apply_retention`), so what a pass deletes is decided by the time it is given.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from shared.errors import LedgerError
from writer_service.sessions import SessionLedger

log = logging.getLogger(__name__)

#: Seconds between two retention passes.
RETENTION_INTERVAL_SECONDS = 3600.0
#: Who a retention deletion's record names.
RETENTION = "retention"


async def apply_retention(ledger: SessionLedger, days: float, now: datetime) -> list[str]:
    """Delete every stopped session last written more than ``days`` days before ``now``; returns
    the ids deleted. A session that cannot be deleted now (a Resume in progress, a storage error)
    is logged and left for the next pass."""
    cutoff = now - timedelta(days=days)
    deleted = []
    due = await ledger.run_io(last_written_before, ledger.stopped_sessions(), cutoff.timestamp())
    for session_id in due:
        entry = ledger.index.get(session_id)
        if entry is None or entry.stopped_kind is None:
            continue  # deleted or resumed while earlier ones were deleted
        try:
            await ledger.delete(session_id, cause=RETENTION, deleted_by=RETENTION)
        except LedgerError as exc:
            log.warning("retention could not delete %s now (tried again next pass): %s", session_id, exc)
            continue
        deleted.append(session_id)
    if deleted:
        log.info("retention deleted %d sessions stopped before %s", len(deleted), cutoff.isoformat())
    return deleted


def last_written_before(candidates: list[tuple[str, Path]], cutoff: float) -> list[str]:
    """The ids of ``candidates`` (id, file) whose file was last modified before ``cutoff`` (Unix
    seconds); a file that cannot be looked at is left out (I/O thread)."""
    due = []
    for session_id, path in candidates:
        try:
            if os.lstat(path).st_mtime < cutoff:
                due.append(session_id)
        except OSError:
            continue
    return due


async def retain(
    ledger: SessionLedger,
    days: float,
    interval: float = RETENTION_INTERVAL_SECONDS,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> None:
    """Run :func:`apply_retention` at once and then every ``interval`` seconds, until cancelled."""
    while True:
        await apply_retention(ledger, days, clock())
        await asyncio.sleep(interval)
