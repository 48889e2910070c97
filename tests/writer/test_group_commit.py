"""Group commit batch formation (docs/spec.md §2.2), counted at the write/fsync boundary, never timed."""

from __future__ import annotations

import asyncio
import errno
import os
import threading

import orjson
import pytest

import writer_service.committer as committer
from rollout.v1 import records_pb2, writer_pb2
from shared.session_meta import SessionSpec
from shared.wire import append_payloads
from writer_service.committer import CommitConfig
from writer_service.sessions import SessionLedger, WriterConfig


def user(text: str) -> list:
    return append_payloads(
        writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="user", text=text)), 0
    )


class CountingDisk:
    """Counts the records (lines) each write carried and the syncs; can hold the first sync.

    ``write_dsync`` stands for one pwritev2(RWF_DSYNC) call: a write and its sync.
    """

    def __init__(self, hold_first: bool = False) -> None:
        self.batches: list[int] = []
        self.syncs = 0
        self.release = threading.Event()
        if not hold_first:
            self.release.set()

    def write(self, fd: int, data) -> int:
        self.batches.append(bytes(data).count(b"\n"))
        return os.write(fd, data)

    def fdatasync(self, fd: int) -> None:
        self.syncs += 1
        assert self.release.wait(10)
        os.fdatasync(fd)

    def write_dsync(self, fd: int, data) -> int:
        self.batches.append(bytes(data).count(b"\n"))
        self.syncs += 1
        assert self.release.wait(10)
        return os.pwritev(fd, [data], -1, os.RWF_DSYNC)


async def until(condition, timeout: float = 10.0) -> None:
    """Wait (polling the event loop) until ``condition()`` holds; fail after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, "condition not reached"
        await asyncio.sleep(0.002)


def run(data_dir, monkeypatch, disk: CountingDisk, scenario, write_dsync=None, **commit) -> None:
    """Run ``scenario(ledger, sid)`` on a fresh session with ``disk`` at the write/sync boundary.

    ``write_dsync`` replaces the disk's single-call write (a refusing file system, say).
    """
    monkeypatch.setattr(committer, "_os_write", disk.write)
    monkeypatch.setattr(committer, "_os_fdatasync", disk.fdatasync)
    monkeypatch.setattr(committer, "_os_write_dsync", write_dsync or disk.write_dsync)

    async def main() -> None:
        ledger = SessionLedger(WriterConfig(data_dir=data_dir, commit=CommitConfig(**commit)))
        try:
            sid, _ = await ledger.create_session(SessionSpec())
            await scenario(ledger, sid)
        finally:
            disk.release.set()
            await ledger.close()

    asyncio.run(main())


def test_a_large_request_is_never_split(data_dir, monkeypatch, sync_path) -> None:
    """A single 100-record request is one batch: one write, one sync."""
    disk = CountingDisk()

    async def scenario(ledger, sid) -> None:
        await ledger.append(sid, [user(f"r{i}") for i in range(100)])

    run(data_dir, monkeypatch, disk, scenario)
    assert disk.batches == [100]
    assert disk.syncs == 1


def test_requests_arriving_during_a_flush_form_batches_of_at_most_32(
    data_dir, monkeypatch, sync_path
) -> None:
    """While one batch is being fsynced, 40 queued requests are written as 32 + 8, in order."""
    disk = CountingDisk(hold_first=True)

    async def scenario(ledger, sid) -> None:
        first = asyncio.ensure_future(ledger.append(sid, [user("first")]))
        await until(lambda: disk.batches == [1])  # the first batch is now held in its fsync
        queued = [asyncio.ensure_future(ledger.append(sid, [user(f"q{i}")])) for i in range(40)]
        state = ledger._sessions[sid]
        await until(lambda: state.log.queued_records == 40)
        disk.release.set()
        results = await asyncio.gather(first, *queued)
        assert [seqs for seqs, _ in results] == [[n] for n in range(1, 42)]

    run(data_dir, monkeypatch, disk, scenario)
    assert disk.batches == [1, 32, 8]
    assert disk.syncs == 3


def test_no_append_is_acknowledged_before_its_batch_is_synced(data_dir, monkeypatch, sync_path) -> None:
    """While the first batch's sync is held, neither it nor the requests queued behind it resolve;
    once released, all resolve, in order (acknowledgements may be gathered, never sent early)."""
    disk = CountingDisk(hold_first=True)

    async def scenario(ledger, sid) -> None:
        first = asyncio.ensure_future(ledger.append(sid, [user("held")]))
        await until(lambda: disk.batches == [1])
        behind = [asyncio.ensure_future(ledger.append(sid, [user(f"b{i}")])) for i in range(3)]
        for _ in range(50):  # give a wrong early acknowledgement every chance to run
            await asyncio.sleep(0.001)
        assert not first.done()
        assert not any(future.done() for future in behind)
        disk.release.set()
        results = await asyncio.gather(first, *behind)
        assert [seqs for seqs, _ in results] == [[1], [2], [3], [4]]

    run(data_dir, monkeypatch, disk, scenario)
    assert disk.batches == [1, 3]


def test_an_idle_writer_writes_at_once_and_linger_gathers_company(data_dir, monkeypatch, sync_path) -> None:
    """Without linger each request sent alone is its own batch; with a linger, requests sent together share one."""
    alone = CountingDisk()

    async def one_by_one(ledger, sid) -> None:
        for i in range(3):
            await ledger.append(sid, [user(f"a{i}")])

    run(data_dir, monkeypatch, alone, one_by_one)
    assert alone.batches == [1, 1, 1]

    together = CountingDisk()

    async def at_once(ledger, sid) -> None:
        await asyncio.gather(*(ledger.append(sid, [user(f"b{i}")]) for i in range(5)))

    run(data_dir / "linger", monkeypatch, together, at_once, linger_ms=15.0, batch_max_wait_ms=20.0)
    assert together.batches == [5]


def test_unsafe_no_fsync_never_syncs(data_dir, monkeypatch, sync_path) -> None:
    """In unsafe_no_fsync mode batches are written but never synced, by either path (process-crash safety only)."""
    from writer_service.committer import Durability

    disk = CountingDisk()

    async def scenario(ledger, sid) -> None:
        for i in range(3):
            await ledger.append(sid, [user(f"u{i}")])

    run(data_dir, monkeypatch, disk, scenario, durability=Durability.UNSAFE_NO_FSYNC)
    assert disk.batches == [1, 1, 1]
    assert disk.syncs == 0  # neither an fdatasync nor a pwritev2(RWF_DSYNC)


def test_a_refused_rwf_dsync_falls_back_to_write_and_fdatasync_and_loses_nothing(
    data_dir, monkeypatch
) -> None:
    """A file system that refuses RWF_DSYNC (EOPNOTSUPP, nothing written): that batch and later ones
    are written with write + fdatasync, every record lands once, and the call is not tried again."""
    disk = CountingDisk()
    refused: list[int] = []

    def refuse(fd: int, data) -> int:
        refused.append(fd)
        raise OSError(errno.EOPNOTSUPP, os.strerror(errno.EOPNOTSUPP))

    monkeypatch.setattr(committer, "_dsync_writes", True)
    lines: list[bytes] = []

    async def scenario(ledger, sid) -> None:
        for i in range(3):
            assert await ledger.append(sid, [user(f"f{i}")]) == ([i + 1], i + 2)
        lines.extend(ledger.root.locate(sid)[1].read_bytes().splitlines())

    run(data_dir, monkeypatch, disk, scenario, write_dsync=refuse)
    assert len(refused) == 1
    assert committer._dsync_writes is False
    assert disk.batches == [1, 1, 1]
    assert disk.syncs == 3
    assert [orjson.loads(line)["payload"].get("content") for line in lines[1:]] == ["f0", "f1", "f2"]


def test_a_refusal_after_a_short_rwf_dsync_write_finishes_the_batch_with_write_and_fdatasync(
    data_dir, monkeypatch
) -> None:
    """pwritev2 writes half a batch, then the flag is refused: the other half goes by write and one
    fdatasync covers the whole batch; the request lands whole, once."""
    disk = CountingDisk()
    dsync_calls: list[int] = []

    def short_then_refused(fd: int, data) -> int:
        dsync_calls.append(len(data))
        if len(dsync_calls) == 1:
            return os.write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))

    monkeypatch.setattr(committer, "_dsync_writes", True)
    lines: list[bytes] = []

    async def scenario(ledger, sid) -> None:
        assert await ledger.append(sid, [user(f"s{i}") for i in range(4)]) == ([1, 2, 3, 4], 5)
        lines.extend(ledger.root.locate(sid)[1].read_bytes().splitlines())

    run(data_dir, monkeypatch, disk, scenario, write_dsync=short_then_refused)
    assert len(dsync_calls) == 2
    assert dsync_calls[1] < dsync_calls[0]  # the second call carried only the rest
    assert disk.syncs == 1
    assert [orjson.loads(line)["payload"].get("content") for line in lines[1:]] == ["s0", "s1", "s2", "s3"]


def test_sync_call_fdatasync_always_writes_then_fdatasyncs(data_dir, monkeypatch) -> None:
    """``--sync-call fdatasync`` never takes the single-call path, even where the kernel has it."""
    from writer_service.committer import SyncCall

    disk = CountingDisk()
    monkeypatch.setattr(committer, "_dsync_writes", True)
    single_calls: list[int] = []

    def single_call(fd: int, data) -> int:
        single_calls.append(fd)
        return os.write(fd, data)

    async def scenario(ledger, sid) -> None:
        for i in range(3):
            await ledger.append(sid, [user(f"c{i}")])

    run(data_dir, monkeypatch, disk, scenario, write_dsync=single_call, sync_call=SyncCall.FDATASYNC)
    assert single_calls == []
    assert disk.batches == [1, 1, 1]
    assert disk.syncs == 3


def test_the_start_up_log_names_how_batches_are_made_durable(monkeypatch) -> None:
    """The writer's start-up line says which durable write it uses: single call, two calls, or none."""
    from writer_service.committer import Durability, RoundSync, SyncCall, durable_write_method

    monkeypatch.setattr(committer, "_dsync_writes", True)
    assert durable_write_method(CommitConfig()).startswith("one pwritev2(RWF_DSYNC) call per batch")
    assert durable_write_method(CommitConfig(sync_call=SyncCall.FDATASYNC)).startswith(
        "write + fdatasync per batch"
    )
    assert durable_write_method(CommitConfig(durability=Durability.UNSAFE_NO_FSYNC)).startswith("write only")
    assert "one syncfs() for a round of several" in durable_write_method(CommitConfig())
    per_file = durable_write_method(CommitConfig(round_sync=RoundSync.PER_FILE))
    assert "syncfs" not in per_file
    monkeypatch.setattr(committer, "_dsync_writes", False)  # the kernel refused the flag
    assert durable_write_method(CommitConfig()).startswith("write + fdatasync per batch")


def test_the_single_call_really_asks_the_kernel_for_a_data_sync(data_dir, monkeypatch) -> None:
    """Unfaked, each batch is one os.pwritev at the file's position with RWF_DSYNC set: without the
    flag an acknowledged record would sit in the page cache (docs/spec.md §2.2: fsynced before the ack)."""
    if not committer._dsync_writes:
        pytest.skip("this kernel or file system refuses pwritev2(RWF_DSYNC)")
    calls: list[tuple[int, int]] = []
    real_pwritev = os.pwritev

    def recording_pwritev(fd: int, buffers, offset: int, flags: int = 0) -> int:
        calls.append((offset, flags))
        return real_pwritev(fd, buffers, offset, flags)

    monkeypatch.setattr(os, "pwritev", recording_pwritev)

    async def main() -> None:
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        try:
            sid, _ = await ledger.create_session(SessionSpec())
            for i in range(3):
                await ledger.append(sid, [user(f"d{i}")])
        finally:
            await ledger.close()

    asyncio.run(main())
    assert calls == [(-1, os.RWF_DSYNC)] * 3


def test_a_linger_never_exceeds_the_batch_max_wait(data_dir, monkeypatch) -> None:
    """With --linger-ms 1000 and --batch-max-wait-ms 20, a partly filled batch waits for company
    at most 20 ms (docs/spec.md §2.2: no record waits more than the configured window)."""
    disk = CountingDisk()
    waits: list[float] = []

    async def scenario(ledger, sid) -> None:
        await ledger.append(sid, [user("opens the session")])
        condition = ledger.committer._more
        real_wait = condition.wait

        def recording_wait(timeout: float | None = None) -> bool:
            waits.append(timeout if timeout is not None else float("inf"))
            return real_wait(timeout)

        monkeypatch.setattr(condition, "wait", recording_wait)
        await ledger.append(sid, [user("alone")])

    run(data_dir, monkeypatch, disk, scenario, linger_ms=1000.0, batch_max_wait_ms=20.0)
    assert waits, "a partly filled batch did not linger at all"
    assert max(waits) <= 0.020
    assert disk.batches == [1, 1]
