"""Stop facts from the tail and resume eligibility (docs/spec.md §5, seed rules 6, 9, 10)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from reader_service.stop_facts import read_stop_facts
from reader_service.wire import stop_facts_to_proto
from rollout.v1 import reader_pb2
from shared.naming import build_file_name, new_session_id
from shared.records import encode_line
from tests.data_roots import session_path

TS = "2026-11-30T10:00:00.000000Z"


def write_session(
    data_dir: Path, records: list[tuple[str, dict]], meta: dict | None = None, padding: int = 0
) -> tuple[str, Path]:
    """A session file with the real on-disk name: session_meta, optional sparse padding, then ``records``."""
    session_id = new_session_id()
    path = session_path(
        data_dir,
        session_id,
        build_file_name(datetime.now(UTC), session_id, (meta or {}).get("agent_name", "")),
    )
    head = encode_line(0, TS, "session_meta", {"session_id": session_id, "tenant": "t", **(meta or {})})
    with path.open("wb") as handle:
        handle.write(head)
        if padding:
            # A large history whose bytes the tail reader must never touch: a filler
            # record line made long by a sparse hole (no disk is used for it).
            handle.write(
                b'{"v":1,"seq":1,"ts":"'
                + TS.encode()
                + b'","type":"event","payload":{"kind":"x","body":{"pad":"'
            )
            handle.seek(padding, 1)
            handle.write(b'"}}}\n')
        seq = 2 if padding else 1
        for record_type, payload in records:
            handle.write(encode_line(seq, TS, record_type, payload))
            seq += 1
    return session_id, path


def checkpoint(digest: str, count: int, kind: str = "paused") -> tuple[str, dict]:
    return (
        "agent_checkpoint",
        {"digest": digest, "message_count": count, "covers_seq": 0, "stop_kind": kind},
    )


def stop(kind: str | None, reason: str) -> tuple[str, dict]:
    payload: dict = {"reason": reason, "checkpoint_seq": 0}
    if kind is not None:
        payload["stop_kind"] = kind
    return ("stop", payload)


def user(text: str) -> tuple[str, dict]:
    return ("message", {"role": "user", "content": text})


def test_last_checkpoint_wins(data_dir) -> None:
    """A session paused and continued twice reports its last checkpoint and stop."""
    _, path = write_session(
        data_dir,
        [
            user("a"),
            checkpoint("sha256:v1:" + "1" * 64, 1),
            stop("paused", "first pause"),
            ("event", {"kind": "resumed", "body": {}}),
            user("b"),
            checkpoint("sha256:v1:" + "2" * 64, 2, "cancelled"),
            stop("cancelled", "second stop"),
        ],
    )
    facts = read_stop_facts(path)
    assert facts.found
    assert facts.checkpoint is not None
    assert facts.checkpoint.digest == "sha256:v1:" + "2" * 64
    assert facts.stop_kind == "cancelled"
    assert facts.reason == "second stop"


def test_no_terminal_record_is_not_found_not_an_error(data_dir) -> None:
    """A session with no stop facts in its tail answers found=false, shown as unknown, never an error."""
    _, path = write_session(data_dir, [user("still running")])
    facts = read_stop_facts(path)
    assert not facts.found
    message = stop_facts_to_proto("x", facts, {})
    assert not message.resume.replayable
    assert message.resume.reason.startswith("unknown")


def test_checkpoint_without_stop_counts_as_stopped(data_dir) -> None:
    """A checkpoint with no stop record after it (killed between the two) is still a stopped session."""
    _, path = write_session(data_dir, [user("a"), checkpoint("sha256:v1:" + "3" * 64, 1, "paused")])
    facts = read_stop_facts(path)
    assert facts.found
    assert not facts.has_stop_record
    assert facts.stop_kind == "paused"
    assert stop_facts_to_proto("x", facts, {}).resume.replayable


def test_uncommitted_last_line_is_ignored(data_dir) -> None:
    """A last line without a newline is not yet committed: the stop before it still counts."""
    _, path = write_session(
        data_dir, [user("a"), checkpoint("sha256:v1:" + "4" * 64, 1), stop("paused", "p")]
    )
    with path.open("ab") as handle:
        handle.write(b'{"v":1,"seq":9,"ts":"x","type":"mess')
    assert read_stop_facts(path).stop_kind == "paused"


def test_legacy_stop_without_kind_is_replayable_as_cancelled(data_dir) -> None:
    """A legacy stop record without stop_kind is treated as cancelled and may be replayed."""
    _, path = write_session(data_dir, [user("a"), stop(None, "old writer")])
    message = stop_facts_to_proto("x", read_stop_facts(path), {})
    assert message.found
    assert message.resume.replayable
    assert "cancelled" in message.resume.reason


def test_unknown_kind_does_not_become_replayable(data_dir) -> None:
    """A stop kind this version does not know is refused by name."""
    _, path = write_session(data_dir, [user("a"), stop("teleported", "newer writer")])
    message = stop_facts_to_proto("x", read_stop_facts(path), {})
    assert not message.resume.replayable
    assert "unrecognized stop kind 'teleported'" in message.resume.reason


@pytest.mark.parametrize("missing", ["delegation_id", "parent_session_id"])
def test_empty_delegation_coordinates_are_not_replayable_and_not_root(data_dir, missing) -> None:
    """A child session missing either coordinate is never replayable as-is, even when paused."""
    meta = {"agent_name": "coder", "delegation_id": "call_7", "parent_session_id": new_session_id()}
    meta.pop(missing)
    _, path = write_session(data_dir, [user("a"), stop("paused", "p")], meta=meta)
    message = stop_facts_to_proto("x", read_stop_facts(path), meta)
    assert not message.resume.replayable
    assert "no delegation coordinates" in message.resume.reason


def test_tail_bytes_read_do_not_grow_with_the_file(data_dir) -> None:
    """Stop facts of a 200 MB session read one 64 KiB window, as a 10 KB session reads its 10 KB."""
    tail = [user("a"), checkpoint("sha256:v1:" + "5" * 64, 1), stop("completed", "done")]
    _, small = write_session(data_dir, tail, padding=10 * 1024)
    _, large = write_session(data_dir, tail, padding=200 * 1024 * 1024)
    assert large.stat().st_size > 200 * 1024 * 1024
    small_facts, large_facts = read_stop_facts(small), read_stop_facts(large)
    assert small_facts.stop_kind == large_facts.stop_kind == "completed"
    assert small_facts.tail_bytes_read == small.stat().st_size
    assert large_facts.tail_bytes_read == 64 * 1024


def test_stop_facts_rpc_explains_eligibility(writer, reader) -> None:
    """GetStopFacts over gRPC answers the stop kind, reason, checkpoint and eligibility."""
    from rollout.v1 import records_pb2, writer_pb2

    sid = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    writer.Stop(
        writer_pb2.StopRequest(session_id=sid, stop_kind=records_pb2.STOP_KIND_FAILED, reason="tool crashed")
    )
    facts = reader.GetStopFacts(reader_pb2.StopFactsRequest(session_id=sid))
    assert facts.found
    assert facts.stop_kind == "failed"
    assert facts.reason == "tool crashed"
    assert facts.checkpoint.message_count == 0
    assert not facts.resume.replayable
    assert facts.resume.reason.startswith("failed")


def test_stop_facts_name_the_next_seq_from_the_tail(data_dir) -> None:
    """The seq after the last complete record, open or stopped (a line still being written is not
    counted); 0 when the tail holds no record."""
    _, path = write_session(data_dir, [user("a"), user("b")])
    assert read_stop_facts(path).next_seq == 3
    with path.open("ab") as handle:
        handle.write(b'{"v":1,"seq":3,"ts":"x","type":"mess')
    assert read_stop_facts(path).next_seq == 3
    _, path = write_session(
        data_dir, [user("a"), checkpoint("sha256:v1:" + "4" * 64, 1), stop("paused", "p")]
    )
    facts = read_stop_facts(path)
    assert (facts.next_seq, stop_facts_to_proto("x", facts, {}).next_seq) == (4, 4)
    path.write_bytes(b"\0" * 10)
    assert read_stop_facts(path).next_seq == 0
