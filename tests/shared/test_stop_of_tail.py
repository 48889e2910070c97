"""A session's next seq and stop state from its tail are one rule each (shared.tail.next_seq_of_tail,
stop_of_tail): the writer's index and the reader's stop facts agree on every tail, a trailing
checkpoint included."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import reader_service.stop_facts
import shared.tail
import writer_service.session_index
from reader_service.stop_facts import read_stop_facts
from rollout.v1 import records_pb2, writer_pb2
from shared.errors import SessionStateError
from shared.layout import DataRoot
from shared.naming import build_file_name, new_session_id
from shared.reasons import SESSION_IS_OPEN
from shared.records import encode_line
from shared.session_meta import SessionSpec
from shared.stop_kinds import StopKind
from shared.tail import read_tail, stop_of_tail
from shared.wire import append_payloads
from tests.data_roots import session_file, session_path
from writer_service.session_index import build_index, read_entry
from writer_service.sessions import SessionLedger, WriterConfig

TS = "2026-11-30T10:00:00.000000Z"
USER = ("message", {"role": "user", "content": "a"})
RESUMED = ("event", {"kind": "resumed", "body": {}})


def checkpoint(kind: Any) -> tuple[str, dict[str, Any]]:
    return (
        "agent_checkpoint",
        {"digest": "sha256:v1:" + "0" * 64, "message_count": 1, "covers_seq": 1, "stop_kind": kind},
    )


def stop(kind: Any) -> tuple[str, dict[str, Any]]:
    payload: dict[str, Any] = {"reason": "r", "checkpoint_seq": 2}
    if kind is not None:
        payload["stop_kind"] = kind
    return ("stop", payload)


#: Records after the session_meta -> (stop kind, or None for open; whether a stop record ends it).
TAILS: dict[str, tuple[list[tuple[str, dict[str, Any]]], str | None, bool]] = {
    "meta only": ([], None, False),
    "open": ([USER, USER], None, False),
    "stopped": ([USER, checkpoint("paused"), stop("paused")], "paused", True),
    "a trailing checkpoint": ([USER, checkpoint("cancelled")], "cancelled", False),
    "a stop without a kind": ([USER, checkpoint("paused"), stop(None)], "", True),
    "a checkpoint whose kind is null": ([USER, checkpoint(None)], "", False),
    "resumed after a stop": ([USER, checkpoint("paused"), stop("paused"), RESUMED], None, False),
    "a checkpoint mid-file": ([USER, checkpoint("paused"), stop("paused"), RESUMED, USER], None, False),
}


def write_session(data_dir: Path, records: list[tuple[str, dict[str, Any]]]) -> Path:
    """A session file with its real on-disk name: session_meta, then ``records``."""
    session_id = new_session_id()
    body = encode_line(0, TS, "session_meta", {"session_id": session_id, "tenant": "t"})
    for seq, (record_type, payload) in enumerate(records, start=1):
        body += encode_line(seq, TS, record_type, payload)
    path = session_path(data_dir, session_id, build_file_name(datetime(2026, 11, 30, tzinfo=UTC), session_id))
    path.write_bytes(body)
    return path


def writer_stop(path: Path) -> str | None:
    """The stop kind the writer's index gives the file (None: open)."""
    return read_entry(path).stopped_kind


def reader_stop(path: Path) -> tuple[str | None, bool]:
    """(the stop kind the reader's stop facts give, or None when not found; has a stop record)."""
    facts = read_stop_facts(path)
    return (facts.stop_kind if facts.found else None), facts.has_stop_record


def shared_stop(path: Path) -> str | None:
    fd = os.open(path, os.O_RDONLY)
    try:
        stop = stop_of_tail(read_tail(fd, want=2).records)
    finally:
        os.close(fd)
    return stop.kind if stop is not None else None


@pytest.mark.parametrize("case", sorted(TAILS))
def test_writer_and_reader_give_every_tail_the_same_stop_state(data_dir: Path, case: str) -> None:
    """Open, stopped, a trailing checkpoint (killed between the two lines of a Stop), a stop or
    checkpoint without a kind, resumed: the writer's index entry and the reader's stop facts say
    the same, as shared.tail.stop_of_tail does."""
    records, kind, has_stop_record = TAILS[case]
    path = write_session(data_dir, records)
    assert writer_stop(path) == kind, "writer"
    assert reader_stop(path) == (kind, has_stop_record), "reader"
    assert shared_stop(path) == kind, "shared"
    assert read_entry(path).next_seq == read_stop_facts(path).next_seq == len(records) + 1


@pytest.mark.parametrize(
    ("module", "read"),
    [(writer_service.session_index, writer_stop), (reader_service.stop_facts, reader_stop)],
    ids=["writer", "reader"],
)
def test_each_side_decides_the_stop_state_with_the_shared_rule(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, module: Any, read: Callable[[Path], Any]
) -> None:
    """Each service's reading goes through shared.tail.stop_of_tail: a rule that called every
    tail open makes a stopped session open on that side."""
    path = write_session(data_dir, TAILS["stopped"][0])
    assert module.stop_of_tail is shared.tail.stop_of_tail
    calls: list[int] = []

    def never_stopped(records: Any) -> None:
        calls.append(len(records))

    monkeypatch.setattr(module, "stop_of_tail", never_stopped)
    assert read(path) in (None, (None, False))
    assert calls


def test_a_writer_restarted_on_a_trailing_checkpoint_refuses_appends_until_resumed(data_dir: Path) -> None:
    """A Stop whose stop line never reached the file (the writer killed between its two lines)
    leaves the session stopped for the restarted writer as for the reader: an append is refused
    (SESSION_IS_OPEN) and Resume lifts the checkpoint's stop kind."""
    user = [
        append_payloads(writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="user", text="a")), 0)
    ]

    async def scenario() -> None:
        config = WriterConfig(data_dir=data_dir)
        ledger = SessionLedger(config)
        try:
            session_id, _ = await ledger.create_session(SessionSpec())
            await ledger.append(session_id, user)
            await ledger.stop(session_id, StopKind.PAUSED, "lunch", None, "")
        finally:
            await ledger.close()
        path = session_file(data_dir, session_id)
        data = path.read_bytes()
        path.write_bytes(data[: data.rstrip(b"\n").rfind(b"\n") + 1])  # the stop line never written
        assert reader_stop(path) == ("paused", False)

        ledger = SessionLedger(config, build_index(DataRoot(data_dir)))
        try:
            with pytest.raises(SessionStateError) as refused:
                await ledger.append(session_id, user)
            assert refused.value.precondition == SESSION_IS_OPEN
            resumed = await ledger.resume(session_id)
            assert resumed.previous_stop_kind == "paused"
            await ledger.append(session_id, user)
        finally:
            await ledger.close()

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("module", "next_seq"),
    [
        (writer_service.session_index, lambda path: read_entry(path).next_seq),
        (reader_service.stop_facts, lambda path: read_stop_facts(path).next_seq),
    ],
    ids=["writer", "reader"],
)
def test_each_side_takes_the_next_seq_with_the_shared_rule(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, module: Any, next_seq: Callable[[Path], int]
) -> None:
    """Each service's next seq of a session comes from shared.tail.next_seq_of_tail."""
    path = write_session(data_dir, [USER, USER])
    assert module.next_seq_of_tail is shared.tail.next_seq_of_tail
    assert next_seq(path) == 3
    monkeypatch.setattr(module, "next_seq_of_tail", lambda records: 99)
    assert next_seq(path) == 99
