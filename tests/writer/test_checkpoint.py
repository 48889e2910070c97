"""Checkpoints: only on Stop, over the whole file, after draining the queue (docs/spec.md §2.6, §2.7)."""

from __future__ import annotations

import asyncio
import gc
import importlib
import threading
from pathlib import Path
from typing import Any

import orjson

import reader_service.replay
import writer_service.rebuilt_facts
import writer_service.resume_fork
from reader_service.replay import DigestStatus, replay_file
from rollout.v1 import records_pb2, writer_pb2
from shared.errors import SessionStateError
from shared.session_meta import SessionSpec
from shared.stop_kinds import StopKind
from shared.wire import append_payloads
from writer_service.committer import SessionLog
from writer_service.sessions import SessionLedger, WriterConfig

REPO = Path(__file__).resolve().parents[2]
# shared/__init__.py re-exports the functions digest and rebuild under the names of
# their modules, so the modules themselves are taken from importlib.
digest_module = importlib.import_module("shared.digest")
rebuild_module = importlib.import_module("shared.rebuild")
rebuild_index_module = importlib.import_module("shared.rebuild_index")


def message(role: str, text: str) -> writer_pb2.AppendRecord:
    return writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role=role, text=text))


def records_of(path: Path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def test_checkpoint_sees_records_still_queued_when_stop_arrives(data_dir, monkeypatch) -> None:
    """Stop drains the queue first, so its checkpoint covers records queued behind a slow flush."""
    release = threading.Event()
    original_write = SessionLog.write_batch
    blocked_once = []

    def slow_write(self: SessionLog, data: bytes, sync: bool) -> None:
        if not blocked_once:
            blocked_once.append(True)
            assert release.wait(10)
        original_write(self, data, sync)

    monkeypatch.setattr(SessionLog, "write_batch", slow_write)

    async def scenario() -> tuple[Path, int]:
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        try:
            sid, _ = await ledger.create_session(SessionSpec())

            def append(i: int) -> asyncio.Future:
                return asyncio.ensure_future(
                    ledger.append(sid, [append_payloads(message("user", f"m{i}"), 0)])
                )

            state = ledger._sessions[sid]
            deadline = asyncio.get_running_loop().time() + 10
            appends = [append(0)]
            while not blocked_once:  # the first flush is now blocked in its write
                assert asyncio.get_running_loop().time() < deadline, "the first flush never started"
                await asyncio.sleep(0.002)
            appends += [append(i) for i in range(1, 5)]
            while state.log.queued_records != 4:  # four requests queue behind it
                assert asyncio.get_running_loop().time() < deadline, "the appends never queued"
                await asyncio.sleep(0.002)
            stop = asyncio.ensure_future(ledger.stop(sid, StopKind.PAUSED, "pause"))
            await asyncio.sleep(0)
            assert state.busy == "Stop", "Stop has begun and is waiting for the queue to drain"
            release.set()
            await asyncio.gather(*appends)
            result = await stop
            path = ledger.root.locate(sid)[1]
            return path, result.message_count
        finally:
            release.set()
            await ledger.close()

    path, count = asyncio.run(scenario())
    assert count == 5
    records = records_of(path)
    assert [r["type"] for r in records][-2:] == ["agent_checkpoint", "stop"]
    assert records[-2]["payload"]["message_count"] == 5
    assert records[-2]["payload"]["covers_seq"] == records[-3]["seq"]
    assert replay_file(path).digest_status == DigestStatus.VERIFIED


def test_no_checkpoint_is_written_except_on_stop(data_dir) -> None:
    """Many appends write no agent_checkpoint; one Stop writes exactly one, then the stop record."""

    async def scenario() -> Path:
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        try:
            sid, _ = await ledger.create_session(SessionSpec())
            for turn in range(20):
                await ledger.append(
                    sid,
                    [
                        append_payloads(message("user", f"q{turn}"), 0),
                        append_payloads(message("assistant", f"a{turn}"), 1),
                    ],
                )
            path = ledger.root.locate(sid)[1]
            assert not any(r["type"] == "agent_checkpoint" for r in records_of(path))
            await ledger.stop(sid, StopKind.COMPLETED, "done")
            return path
        finally:
            await ledger.close()

    types = [r["type"] for r in records_of(asyncio.run(scenario()))]
    assert types.count("agent_checkpoint") == 1
    assert types[-2:] == ["agent_checkpoint", "stop"]


def test_writer_checkpoint_and_reader_share_one_rebuild_and_one_digest() -> None:
    """The writer's checkpoint and the reader call the very same shared rebuild and digest functions."""
    # Both feed shared.digest's own builder (the one digest() is made of) from the shared
    # bounded-memory rebuild (the same rules as rebuild(), subclassed, not copied), and read
    # an older checkpoint by the one shared rule.
    assert writer_service.rebuilt_facts.digest_of_payloads is digest_module.digest_of_payloads
    assert reader_service.replay.digest_of_payloads is digest_module.digest_of_payloads
    assert reader_service.replay.DigestBuilder is digest_module.DigestBuilder
    assert writer_service.rebuilt_facts.read_checkpoint is rebuild_module.read_checkpoint
    assert reader_service.replay.read_checkpoint is rebuild_module.read_checkpoint
    assert writer_service.rebuilt_facts.index_rebuild is rebuild_index_module.index_rebuild
    assert reader_service.replay.index_rebuild is rebuild_index_module.index_rebuild
    assert reader_service.replay.rebuild is rebuild_module.rebuild
    hashing = [
        path.relative_to(REPO).as_posix()
        for folder in (
            "shared",
            "serving",
            "writer_service",
            "reader_service",
            "rollout_cli",
            "rollout_memory",
        )
        for path in (REPO / folder).rglob("*.py")
        if "sha256(" in path.read_text(encoding="utf-8")
    ]
    assert hashing == ["shared/digest.py"]


def test_checkpoint_digest_equals_a_fresh_rebuild_of_the_file(data_dir) -> None:
    """The stored checkpoint digest is the shared digest of the file's rebuilt messages, reasoning included."""

    async def scenario() -> tuple[Path, str]:
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        try:
            sid, _ = await ledger.create_session(SessionSpec())
            thinking = records_pb2.ChatMessage(
                role="assistant", text="ok", reasoning=records_pb2.Reasoning(content="think")
            )
            await ledger.append(
                sid,
                [
                    append_payloads(message("system", "be brief"), 0),
                    append_payloads(writer_pb2.AppendRecord(message=thinking), 1),
                ],
            )
            result = await ledger.stop(sid, StopKind.PAUSED, "pause")
            return ledger.root.locate(sid)[1], result.digest
        finally:
            await ledger.close()

    path, stored = asyncio.run(scenario())
    rebuilt = rebuild_module.rebuild(path.read_bytes())
    assert rebuilt.messages[1]["reasoning"] == {"content": "think"}
    assert stored == digest_module.digest(rebuilt.messages)
    without_reasoning = [{k: v for k, v in m.items() if k != "reasoning"} for m in rebuilt.messages]
    assert stored != digest_module.digest(without_reasoning)


def test_stop_resume_and_fork_rebuild_on_an_io_thread_under_the_collector_pause(
    data_dir, monkeypatch
) -> None:
    """The whole-file work of Stop, Resume and Fork (rebuild, digest, finding and checking the
    fork point) never runs on the event loop, where it would hold up every other session's
    appends; the rebuild and digest run with the collector paused."""
    seen: list[tuple[str, str, bool]] = []
    real_rebuild = writer_service.rebuilt_facts.index_rebuild

    def spying_rebuild(path: Path, **options: Any) -> rebuild_module.Rebuild:
        seen.append(("rebuild", threading.current_thread().name, gc.isenabled()))
        return real_rebuild(path, **options)

    real_digest = writer_service.rebuilt_facts.digest_of_payloads

    def spying_digest(messages: Any, count: int) -> str:
        seen.append(("digest", threading.current_thread().name, gc.isenabled()))
        return real_digest(messages, count)

    monkeypatch.setattr(writer_service.rebuilt_facts, "index_rebuild", spying_rebuild)
    monkeypatch.setattr(writer_service.rebuilt_facts, "digest_of_payloads", spying_digest)
    for name in ("find_fork_point", "check_fork_keeps_pairs"):
        real = getattr(writer_service.resume_fork, name)

        def spying(*args: object, _name: str = name, _real: Any = real) -> Any:
            seen.append((_name, threading.current_thread().name, False))
            return _real(*args)

        monkeypatch.setattr(writer_service.resume_fork, name, spying)

    async def scenario() -> str:
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        try:
            sid, _ = await ledger.create_session(SessionSpec())
            await ledger.append(sid, [append_payloads(message("user", "hi"), 0)])
            await ledger.stop(sid, StopKind.PAUSED, "pause")
            await ledger.resume(sid)
            await ledger.fork(sid, 1, None)
            return threading.current_thread().name
        finally:
            await ledger.close()

    loop_thread = asyncio.run(scenario())
    # Stop: rebuild + digest; Resume: rebuild; Fork: find the point, rebuild + digest, check pairs.
    assert [step for step, _, _ in seen] == [
        "rebuild",
        "digest",
        "rebuild",
        "find_fork_point",
        "rebuild",
        "digest",
        "check_fork_keeps_pairs",
    ]
    assert all(thread != loop_thread and thread.startswith("rollout-io") for _, thread, _ in seen), seen
    assert not any(enabled for _, _, enabled in seen), seen
    assert gc.isenabled()


def hold_writes_containing(marker: bytes, monkeypatch) -> tuple[threading.Event, threading.Event]:
    """Make the writes of batches holding ``marker`` wait: returns (writing, release) events,
    set once such a write has begun, and to be set to let it go on."""
    writing, release = threading.Event(), threading.Event()
    original_write = SessionLog.write_batch

    def held_write(self: SessionLog, data: bytes, sync: bool) -> None:
        if marker in data:
            writing.set()
            assert release.wait(10)
        original_write(self, data, sync)

    monkeypatch.setattr(SessionLog, "write_batch", held_write)
    return writing, release


def test_a_stop_cancelled_while_its_lines_are_written_leaves_the_session_stopped(
    data_dir, monkeypatch
) -> None:
    """A Stop whose caller goes away (deadline, disconnect) during the write of its checkpoint and
    stop lines: the lines are still written, so the session is stopped and the next append is
    refused, never written after the stop record."""
    writing, release = hold_writes_containing(b'"type":"stop"', monkeypatch)

    async def scenario() -> tuple[Path, str]:
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        try:
            sid, _ = await ledger.create_session(SessionSpec())
            await ledger.append(sid, [append_payloads(message("user", "hi"), 0)])
            stopping = asyncio.ensure_future(ledger.stop(sid, StopKind.PAUSED, "pause"))
            while not writing.is_set():
                await asyncio.sleep(0.01)
            stopping.cancel()
            release.set()
            await ledger._sessions[sid].log.drain()
            try:
                await ledger.append(sid, [append_payloads(message("user", "after"), 0)])
            except SessionStateError as exc:
                refusal = str(exc)
            else:
                refusal = "accepted"
            return ledger.root.locate(sid)[1], refusal
        finally:
            release.set()
            await ledger.close()

    path, refusal = asyncio.run(scenario())
    assert refusal.startswith("session is stopped (paused)")
    assert [record["type"] for record in records_of(path)][-2:] == ["agent_checkpoint", "stop"]


def test_a_stop_after_a_cancelled_append_still_waits_for_that_append_to_be_written(
    data_dir, monkeypatch
) -> None:
    """An Append whose caller goes away while its batch is written is still written (its seq is
    taken); a Stop right after must wait for that batch, or its checkpoint would cover a seq it
    never read and the session would not verify."""
    writing, release = hold_writes_containing(b"cancelled-caller", monkeypatch)

    async def scenario() -> Path:
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        try:
            sid, _ = await ledger.create_session(SessionSpec())
            appending = asyncio.ensure_future(
                ledger.append(sid, [append_payloads(message("user", "cancelled-caller"), 0)])
            )
            while not writing.is_set():
                await asyncio.sleep(0.01)
            appending.cancel()
            stopping = asyncio.ensure_future(ledger.stop(sid, StopKind.PAUSED, "pause"))
            await asyncio.sleep(0.2)
            release.set()
            await stopping
            return ledger.root.locate(sid)[1]
        finally:
            release.set()
            await ledger.close()

    path = asyncio.run(scenario())
    replay = replay_file(path)
    assert [m["content"] for m in replay.rebuilt.messages] == ["cancelled-caller"]
    assert replay.digest_status is DigestStatus.VERIFIED


def test_a_refused_resume_reads_no_file(data_dir, monkeypatch) -> None:
    """Resume decides eligibility (default-deny, docs/spec.md §2.8) from the session's stop kind before any
    whole-file rebuild: a refusal costs no read of the file and writes nothing."""
    rebuilds: list[Path] = []
    real_rebuild = writer_service.rebuilt_facts.index_rebuild

    def counting_rebuild(path: Path, **options: Any) -> rebuild_module.Rebuild:
        rebuilds.append(path)
        return real_rebuild(path, **options)

    monkeypatch.setattr(writer_service.rebuilt_facts, "index_rebuild", counting_rebuild)

    async def scenario() -> tuple[Path, str]:
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        try:
            sid, _ = await ledger.create_session(SessionSpec())
            await ledger.append(sid, [append_payloads(message("user", "hi"), 0)])
            await ledger.stop(sid, StopKind.COMPLETED, "done")
            rebuilds.clear()
            try:
                await ledger.resume(sid)
            except SessionStateError as exc:
                return ledger.root.locate(sid)[1], str(exc)
            return ledger.root.locate(sid)[1], "resumed"
        finally:
            await ledger.close()

    path, refusal = asyncio.run(scenario())
    assert refusal.startswith("cannot resume: completed")
    assert rebuilds == []
    assert [record["type"] for record in records_of(path)][-1] == "stop"
