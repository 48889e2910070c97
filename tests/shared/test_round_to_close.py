"""Whether a session's tail leaves a round a crash cut off is one rule (shared.rounds.round_to_close):
the writer's Resume (which records it interrupted) and the reader's ListPendingRounds (which
lists it) agree on every tail, and each side goes through the rule."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import reader_service.rounds
import shared.rounds
import writer_service.resume_fork
from reader_service.rounds import RoundCache
from shared.layout import DataRoot
from shared.naming import parse_file_name
from shared.rounds import Lineage, RoundTracker, round_to_close
from tests.shared.test_stop_of_tail import checkpoint, stop, write_session

USER = ("message", {"role": "user", "content": "q", "input_kind": "trigger"})
CALL = (
    "message",
    {
        "role": "assistant",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "sh", "arguments": "{}"}}],
    },
)
ANSWER = ("message", {"role": "assistant", "content": "a"})
RESUMED = ("event", {"kind": "resumed", "body": {}})
INTERRUPTED = ("event", {"kind": "round_interrupted", "body": {}})

#: Records after the session_meta -> (number, trigger seq) of the round left to close, or None.
TAILS: dict[str, tuple[list[tuple[str, dict[str, Any]]], tuple[int, int] | None]] = {
    "no round": ([], None),
    "a pending round": ([USER, CALL], (1, 1)),
    "an answered round": ([USER, ANSWER], None),
    "a pending round after an answered one": ([USER, ANSWER, USER, CALL], (2, 3)),
    "stopped mid-round": ([USER, CALL, checkpoint("paused"), stop("paused")], None),
    "a trailing checkpoint mid-round": ([USER, CALL, checkpoint("cancelled")], None),
    "resumed after a pause mid-round": ([USER, CALL, checkpoint("paused"), stop("paused"), RESUMED], (1, 1)),
    "recorded interrupted": ([USER, CALL, INTERRUPTED, RESUMED], None),
}


def _session_id(path: Path) -> str:
    return parse_file_name(path.name).session_id


def writer_side(data_dir: Path, path: Path) -> Any:
    return writer_service.resume_fork.round_left_pending(
        DataRoot(data_dir), _session_id(path), path, path.stat().st_size
    )


def reader_side(data_dir: Path, path: Path) -> Any:
    return RoundCache().to_close(path, lambda: Lineage(_session_id(path)))


def shared_rule(path: Path) -> Any:
    tracker = RoundTracker(Lineage(_session_id(path)))
    tracker.add_lines(path.read_bytes().splitlines())
    return round_to_close(tracker)


@pytest.mark.parametrize("case", sorted(TAILS))
def test_writer_and_reader_find_the_same_round_to_close(data_dir: Path, case: str) -> None:
    records, left = TAILS[case]
    path = write_session(data_dir, records)
    expected = shared_rule(path)
    found = (expected.number, expected.start_seq) if expected is not None else None
    assert found == left
    assert writer_side(data_dir, path) == expected, "writer"
    assert reader_side(data_dir, path) == expected, "reader"


@pytest.mark.parametrize(
    ("module", "read"),
    # The writer reads through shared.rounds.pending_round_of, which calls the rule in its module.
    [(shared.rounds, writer_side), (reader_service.rounds, reader_side)],
    ids=["writer", "reader"],
)
def test_each_side_decides_with_the_shared_rule(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, module: Any, read: Callable[[Path, Path], Any]
) -> None:
    """A rule that closed nothing makes each side find nothing to close in a pending round."""
    path = write_session(data_dir, TAILS["a pending round"][0])
    assert module.round_to_close is shared.rounds.round_to_close
    calls: list[int] = []

    def nothing(tracker: RoundTracker) -> None:
        calls.append(tracker.last_seq)

    monkeypatch.setattr(module, "round_to_close", nothing)
    assert read(data_dir, path) is None
    assert calls


@pytest.mark.parametrize(
    ("module", "read"),
    # The writer reads through shared.rounds.pending_round_of, which calls the loop in its module.
    [(shared.rounds, writer_side), (reader_service.rounds, reader_side)],
    ids=["writer", "reader"],
)
def test_each_side_reads_a_file_with_the_shared_loop(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, module: Any, read: Callable[[Path, Path], Any]
) -> None:
    """A loop that fed the tracker nothing makes each side find nothing to close in a pending
    round: neither reads a session file for its rounds its own way."""
    path = write_session(data_dir, TAILS["a pending round"][0])
    assert module.track_file is shared.rounds.track_file
    fed: list[int] = []

    def nothing(tracker: RoundTracker, fd: int, start: int, end: int, read_bytes: int = 0) -> Iterator[Any]:
        fed.append(end)
        return iter(())

    monkeypatch.setattr(module, "track_file", nothing)
    assert read(data_dir, path) is None
    assert fed
