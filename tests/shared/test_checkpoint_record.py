"""A checkpoint is read one way (shared.rebuild.checkpoint_record): the rebuild (replays, the
writer's Stop and Resume) and the reader's stop facts give every checkpoint the same fields."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest

import reader_service.stop_facts
from reader_service.stop_facts import read_stop_facts
from shared.rebuild import rebuild
from tests.shared.test_stop_of_tail import USER, write_session

#: The module (``shared.rebuild`` as an attribute is its function, re-exported by shared).
REBUILD = importlib.import_module("shared.rebuild")
DIGEST = "sha256:v1:" + "0" * 64
PINNED = "blake2b:" + "1" * 32

#: agent_checkpoint payloads, and whether each is a checkpoint at all.
PAYLOADS: dict[str, tuple[dict[str, Any], bool]] = {
    "whole": (
        {
            "digest": DIGEST,
            "message_count": 1,
            "covers_seq": 1,
            "stop_kind": "paused",
            "lines_digest": PINNED,
        },
        True,
    ),
    "older, without a lines digest": (
        {"digest": DIGEST, "message_count": 1, "covers_seq": 1, "stop_kind": "paused"},
        True,
    ),
    "a null kind and lines digest": (
        {"digest": DIGEST, "message_count": 1, "covers_seq": 1, "stop_kind": None, "lines_digest": None},
        True,
    ),
    "a count as text": ({"digest": DIGEST, "message_count": "1", "covers_seq": 1}, True),
    "no digest": ({"message_count": 1, "covers_seq": 1, "stop_kind": "paused"}, False),
    "a count that is no number": ({"digest": DIGEST, "message_count": "one", "covers_seq": 1}, False),
}


def fields(checkpoint: Any) -> tuple[Any, ...] | None:
    """What both readings must agree on (line, offset and soundness are the rebuild's alone)."""
    if checkpoint is None:
        return None
    return (
        checkpoint.seq,
        checkpoint.digest,
        checkpoint.message_count,
        checkpoint.covers_seq,
        checkpoint.stop_kind,
        checkpoint.lines_digest,
    )


@pytest.mark.parametrize("case", sorted(PAYLOADS))
def test_the_rebuild_and_the_stop_facts_read_a_checkpoint_alike(data_dir: Path, case: str) -> None:
    """A trailing checkpoint, and one before its stop, reads the same in a rebuild of the file and
    in the reader's stop facts; an absent or null kind or lines digest is ""."""
    payload, is_checkpoint = PAYLOADS[case]
    stop = ("stop", {"stop_kind": "paused", "reason": "r", "checkpoint_seq": 2})
    for records in ([USER, ("agent_checkpoint", payload)], [USER, ("agent_checkpoint", payload), stop]):
        path = write_session(data_dir, records)
        rebuilt = rebuild(path.read_bytes()).last_checkpoint
        from_tail = read_stop_facts(path).checkpoint
        assert fields(rebuilt) == fields(from_tail), case
        assert (rebuilt is not None) is is_checkpoint
        if rebuilt is not None:
            assert rebuilt.stop_kind in ("paused", "")
            assert rebuilt.lines_digest in (PINNED, "")


@pytest.mark.parametrize(
    ("module", "read"),
    [
        (REBUILD, lambda path: rebuild(path.read_bytes()).last_checkpoint),
        (reader_service.stop_facts, lambda path: read_stop_facts(path).checkpoint),
    ],
    ids=["rebuild", "stop facts"],
)
def test_each_reading_takes_checkpoints_with_the_shared_rule(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, module: Any, read: Any
) -> None:
    """With checkpoint_record refusing every payload, neither the rebuild nor the stop facts find
    a checkpoint."""
    path = write_session(data_dir, [USER, ("agent_checkpoint", PAYLOADS["whole"][0])])
    assert module.checkpoint_record is REBUILD.checkpoint_record
    assert read(path) is not None
    monkeypatch.setattr(module, "checkpoint_record", lambda *args: None)
    assert read(path) is None
