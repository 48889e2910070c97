"""Retention (``--retain-stopped-days``): exactly the stopped sessions last written before the
cutoff are deleted, never an open one, counted in the writer's metrics (writer_service.retention).
The clock is a parameter of each pass: nothing here waits for time to pass."""

from __future__ import annotations

import asyncio
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import orjson
from prometheus_client import REGISTRY

from rollout.v1 import records_pb2, writer_pb2, writer_pb2_grpc
from shared.deletions import DELETIONS_FILE
from shared.layout import DataRoot
from shared.session_meta import SessionRole, SessionSpec
from shared.stop_kinds import StopKind
from tests.conftest import start_service
from tests.data_roots import session_file
from writer_service.retention import apply_retention
from writer_service.server import append_payloads
from writer_service.session_index import build_index
from writer_service.sessions import SessionLedger, WriterConfig

DAY = 24 * 3600.0
USER = [append_payloads(writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="user", text="a")), 0)]


def _age(data_dir: Path, session_id: str, days: float) -> None:
    """Make a session's file look last written ``days`` days ago."""
    path = session_file(data_dir, session_id)
    then = time.time() - days * DAY
    os.utime(path, (then, then))


def _retention_count() -> float:
    return REGISTRY.get_sample_value("rollout_deleted_sessions_total", {"cause": "retention"}) or 0.0


def test_retention_deletes_exactly_the_stopped_sessions_older_than_the_cutoff(data_dir: Path) -> None:
    """Old and stopped: deleted. Recent and stopped, old and open, old and resumed: kept. A pass
    with a later clock takes the recent one too, never the open ones."""

    async def scenario() -> None:
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        try:
            made = {}
            for name in ("old_stopped", "recent_stopped", "old_open", "old_resumed", "old_legacy"):
                made[name], _ = await ledger.create_session(SessionSpec(role=SessionRole.ROOT))
                await ledger.append(made[name], USER)
            for name in ("old_stopped", "recent_stopped", "old_resumed"):
                await ledger.stop(made[name], StopKind.PAUSED, "later")
            await ledger.resume(made["old_resumed"])
            await ledger.stop(made["old_legacy"], StopKind.COMPLETED, "done")
            for name in ("old_stopped", "old_open", "old_resumed", "old_legacy"):
                _age(data_dir, made[name], 10)
            _age(data_dir, made["recent_stopped"], 2)
            before = _retention_count()
            now = datetime.now(UTC)
            deleted = await apply_retention(ledger, 7, now)
            assert sorted(deleted) == sorted([made["old_stopped"], made["old_legacy"]])
            assert _retention_count() == before + 2
            for name in ("recent_stopped", "old_open", "old_resumed"):
                assert ledger.index.get(made[name]) is not None, name
            assert await apply_retention(ledger, 7, now) == []
            later = await apply_retention(ledger, 7, now + timedelta(days=6))
            assert later == [made["recent_stopped"]]
            assert _retention_count() == before + 3
            assert ledger.index.get(made["old_open"]) is not None
            assert ledger.index.get(made["old_resumed"]) is not None
            return made
        finally:
            await ledger.close()

    made = asyncio.run(scenario())
    records = [
        orjson.loads(line)
        for path in data_dir.rglob(DELETIONS_FILE)
        for line in path.read_bytes().splitlines()
    ]
    assert sorted(record["session_id"] for record in records) == sorted(
        [made["old_stopped"], made["old_legacy"], made["recent_stopped"]]
    )
    assert {(record["cause"], record["deleted_by"]) for record in records} == {("retention", "retention")}
    index = build_index(DataRoot(data_dir))
    assert set(index.entries) == {made["old_open"], made["old_resumed"]}


def test_serve_writer_applies_retention_at_start(data_dir: Path) -> None:
    """``serve-writer --retain-stopped-days N`` runs a pass as it starts: the old stopped session
    goes, the recent one stays."""
    process = start_service("writer", data_dir)
    with grpc.insecure_channel(process.address) as channel:
        writer = writer_pb2_grpc.RolloutWriterStub(channel)
        ids = []
        for _ in range(2):
            session_id = writer.CreateSession(
                writer_pb2.CreateSessionRequest(role=writer_pb2.SESSION_ROLE_ROOT)
            ).session_id
            writer.Stop(writer_pb2.StopRequest(session_id=session_id, stop_kind=records_pb2.STOP_KIND_PAUSED))
            ids.append(session_id)
    process.stop()
    old, recent = ids
    _age(data_dir, old, 3)
    process = start_service("writer", data_dir, "--retain-stopped-days", "2")
    try:
        path = session_file(data_dir, old)
        deadline = time.monotonic() + 60  # the first pass runs as the writer starts
        while path.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not path.exists()
        assert session_file(data_dir, recent).exists()
        (record,) = [
            orjson.loads(line)
            for deletions in data_dir.rglob(DELETIONS_FILE)
            for line in deletions.read_bytes().splitlines()
        ]
        assert (record["session_id"], record["cause"]) == (old, "retention")
    finally:
        process.stop()
