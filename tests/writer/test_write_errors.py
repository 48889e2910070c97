"""Write errors are never silent: callers fail, no partial line, the writer recovers (docs/spec.md §2.3)."""

from __future__ import annotations

import asyncio
import errno
import os
import time

import grpc
import orjson
import pytest
from google.rpc import error_details_pb2

import writer_service.committer as committer
from rollout.v1 import records_pb2, writer_pb2
from shared.errors import StorageWriteError
from shared.rebuild import rebuild
from shared.session_meta import SessionSpec
from shared.status import _status_of
from shared.stop_kinds import StopKind
from shared.wire import append_payloads
from tests.data_roots import session_file
from writer_service import metrics
from writer_service.sessions import SessionLedger, WriterConfig


def user(text: str) -> list:
    return append_payloads(
        writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="user", text=text)), 0
    )


class FaultyDisk:
    """Fails the Nth write with a partial write then ``error``, or the Nth fsync.

    ``on="pwritev2"`` fails the Nth single pwritev2(RWF_DSYNC) call the
    same way: part of the batch reaches the file, then the error.
    """

    def __init__(self, fail_call: int, error: int, on: str) -> None:
        self.fail_call = fail_call
        self.error = error
        self.on = on
        self.writes = 0
        self.syncs = 0
        self.dsync_writes = 0

    def write(self, fd: int, data) -> int:
        self.writes += 1
        if self.on == "write" and self.writes == self.fail_call:
            os.write(fd, bytes(data[: len(data) // 2]))  # a torn, partial line reaches the file
            raise OSError(self.error, os.strerror(self.error))
        return os.write(fd, data)

    def fdatasync(self, fd: int) -> None:
        self.syncs += 1
        if self.on == "fsync" and self.syncs == self.fail_call:
            raise OSError(self.error, os.strerror(self.error))
        os.fdatasync(fd)

    def write_dsync(self, fd: int, data) -> int:
        self.dsync_writes += 1
        if self.on == "pwritev2" and self.dsync_writes == self.fail_call:
            os.write(fd, bytes(data[: len(data) // 2]))
            raise OSError(self.error, os.strerror(self.error))
        return os.pwritev(fd, [data], -1, os.RWF_DSYNC)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(committer, "_os_write", self.write)
        monkeypatch.setattr(committer, "_os_fdatasync", self.fdatasync)
        monkeypatch.setattr(committer, "_os_write_dsync", self.write_dsync)


@pytest.mark.parametrize(
    ("dsync", "on", "error"),
    [
        (False, "write", errno.ENOSPC),
        (False, "fsync", errno.EIO),
        (True, "pwritev2", errno.ENOSPC),
        (True, "pwritev2", errno.EIO),
    ],
)
def test_a_failed_batch_fails_its_callers_leaves_no_partial_line_and_later_batches_land(
    data_dir, monkeypatch, dsync, on, error
) -> None:
    """The 4th of 6 batches fails: exactly its caller gets the error, the file is cut back, 5 and 6 land."""
    disk = FaultyDisk(fail_call=4, error=error, on=on)
    disk.install(monkeypatch)
    monkeypatch.setattr(committer, "_dsync_writes", dsync)
    errors_before = metrics.WRITE_ERRORS._value.get()
    health_changes: list[bool] = []

    async def scenario() -> tuple[list, str]:
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        ledger.storage_health.observe(health_changes.append)
        try:
            sid, _ = await ledger.create_session(SessionSpec())  # not through the committer
            outcomes = []
            for batch in range(1, 7):
                try:
                    outcomes.append(await ledger.append(sid, [user(f"batch {batch}")]))
                except StorageWriteError as exc:
                    outcomes.append(exc)
            return outcomes, sid
        finally:
            await ledger.close()

    outcomes, sid = asyncio.run(scenario())
    failed = outcomes[3]
    assert isinstance(failed, StorageWriteError)
    assert failed.operation == on
    assert failed.errno_name == errno.errorcode[error]
    assert [o[0] for i, o in enumerate(outcomes) if i != 3] == [[1], [2], [3], [4], [5]]
    path = session_file(data_dir, sid)
    data = path.read_bytes()
    assert data.endswith(b"\n")
    texts = [orjson.loads(line)["payload"].get("content") for line in data.splitlines()[1:]]
    assert texts == ["batch 1", "batch 2", "batch 3", "batch 5", "batch 6"]
    assert not [e for e in rebuild(data).degraded if e.kind != "no_checkpoint"]
    assert metrics.WRITE_ERRORS._value.get() == errors_before + 1
    assert health_changes == [False, True]


def test_disk_full_maps_to_resource_exhausted_and_io_errors_to_unavailable() -> None:
    """ENOSPC is RESOURCE_EXHAUSTED, EIO is UNAVAILABLE; both carry an ErrorInfo naming errno and operation."""
    full = StorageWriteError("full", errno_name="ENOSPC", operation="write")
    code, _, details = _status_of(full, "")
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert isinstance(details[0], error_details_pb2.ErrorInfo)
    assert details[0].reason == "ENOSPC"
    assert details[0].metadata["operation"] == "write"
    code, _, details = _status_of(StorageWriteError("io", errno_name="EIO", operation="fsync"), "")
    assert code == grpc.StatusCode.UNAVAILABLE
    assert details[0].metadata["operation"] == "fsync"


def test_a_failed_stop_leaves_the_session_open_and_stop_can_be_retried(
    data_dir, monkeypatch, sync_path
) -> None:
    """When the checkpoint batch fails, nothing of it is kept and a retried Stop succeeds."""
    disk = FaultyDisk(fail_call=2, error=errno.EIO, on="pwritev2" if sync_path == "pwritev2" else "write")
    disk.install(monkeypatch)

    async def scenario() -> bytes:
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        try:
            sid, _ = await ledger.create_session(SessionSpec())
            await ledger.append(sid, [user("a")])
            with pytest.raises(StorageWriteError):
                await ledger.stop(sid, StopKind.PAUSED, "first try")
            await ledger.stop(sid, StopKind.PAUSED, "second try")
            return ledger.root.locate(sid)[1].read_bytes()
        finally:
            await ledger.close()

    records = [orjson.loads(line) for line in asyncio.run(scenario()).splitlines()]
    assert [r["type"] for r in records] == ["session_meta", "message", "agent_checkpoint", "stop"]
    assert records[-1]["payload"]["reason"] == "second try"


def _hold_loop_until(condition, timeout: float) -> bool:
    """Hold the event loop's thread (no callback runs) until ``condition()`` or ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


def test_no_request_behind_a_failed_batch_lands_or_is_acknowledged_before_the_failure(
    data_dir, monkeypatch, sync_path
) -> None:
    """A is durable but not yet acknowledged (the loop is busy), B's batch fails, C is submitted
    before B's failure is delivered: outcomes arrive as A ok, B failed, C failed. C's seq followed
    B's, so C is never written: the file has no seq gap and the next append takes B's seq."""
    on = "pwritev2" if sync_path == "pwritev2" else "write"
    disk = FaultyDisk(fail_call=0, error=errno.ENOSPC, on=on)
    disk.install(monkeypatch)
    outcomes: list[tuple[str, str]] = []

    def calls() -> int:
        return disk.dsync_writes if on == "pwritev2" else disk.writes

    def track(name: str, future) -> None:
        future.add_done_callback(lambda done: outcomes.append((name, "failed" if done.exception() else "ok")))

    async def scenario() -> tuple[list[int], bytes]:
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        try:
            sid, _ = await ledger.create_session(SessionSpec())
            await ledger.append(sid, [user("opened")])  # the session is open: enqueue never waits
            session_log = ledger._sessions[sid].log
            group = ledger.committer
            # From here on the loop's thread is held between steps: no acknowledgement runs.
            *_, future_a = await ledger.enqueue(sid, [user("A")])
            track("A", future_a)
            assert _hold_loop_until(lambda: calls() == 2 and group._durable, 10)
            disk.fail_call = 3
            *_, future_b = await ledger.enqueue(sid, [user("B")])
            track("B", future_b)
            assert _hold_loop_until(lambda: session_log.failing, 10)
            *_, future_c = await ledger.enqueue(sid, [user("C")])
            track("C", future_c)
            _hold_loop_until(lambda: calls() > 3, 0.3)  # give a wrong write of C every chance
            await asyncio.gather(future_a, future_b, future_c, return_exceptions=True)
            seqs, _ = await ledger.append(sid, [user("D")])
            return seqs, ledger.root.locate(sid)[1].read_bytes()
        finally:
            await ledger.close()

    seqs, data = asyncio.run(scenario())
    assert outcomes == [("A", "ok"), ("B", "failed"), ("C", "failed")]
    assert calls() == 4  # opened, A, B (failed), D: C never reached the disk
    assert seqs == [3]
    records = [orjson.loads(line) for line in data.splitlines()]
    assert [r["seq"] for r in records] == [0, 1, 2, 3]
    assert [r["payload"].get("content") for r in records[1:]] == ["opened", "A", "D"]


def test_a_retry_with_the_request_id_of_a_failed_write_writes_it_once(data_dir, monkeypatch) -> None:
    """A request whose write failed is not remembered by its request_id: once storage recovers, the
    same request with the same id is written (exactly once), not answered with the old failure."""
    disk = FaultyDisk(fail_call=1, error=errno.EIO, on="pwritev2")
    disk.install(monkeypatch)
    monkeypatch.setattr(committer, "_dsync_writes", True)

    async def scenario() -> tuple[str, object, list[int]]:
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        try:
            sid, _ = await ledger.create_session(SessionSpec())
            records = [user("once")]
            _, _, durable = await ledger.enqueue(sid, records, request_id="req-1")
            try:
                await durable
                first: object = "written"
            except StorageWriteError as exc:
                first = exc
            seqs, _, durable = await ledger.enqueue(sid, records, request_id="req-1")
            await durable
            return sid, first, seqs
        finally:
            await ledger.close()

    sid, first, seqs = asyncio.run(scenario())
    assert isinstance(first, StorageWriteError)
    assert seqs == [1]
    path = session_file(data_dir, sid)
    texts = [orjson.loads(line)["payload"].get("content") for line in path.read_bytes().splitlines()[1:]]
    assert texts == ["once"]
