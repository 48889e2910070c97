"""Which entries of the sessions folder are sessions is one rule (shared.naming.session_file_name):
the writer's index, the reader's folder and the data root's scan take the same ones."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import reader_service.session_folder
import shared.layout
import writer_service.session_index
from reader_service.session_folder import SessionFolder
from shared.layout import DataRoot
from shared.naming import build_file_name, new_session_id, session_file_name
from shared.records import encode_line
from writer_service.session_index import build_index

TS = "2026-11-30T10:00:00.000000Z"
MOMENT = datetime(2026, 11, 30, tzinfo=UTC)


def sessions_folder(data_dir: Path) -> set[str]:
    """A sessions folder of two sessions and the entries beside them that are none (a data root of
    one shard: every entry in one folder); their ids."""
    root = DataRoot(data_dir)
    root.create(shards=1)
    folder = root.sessions_folder(0)
    folder.mkdir(parents=True, exist_ok=True)
    ids = set()
    for agent in ("", "planner"):
        session_id = new_session_id()
        name = build_file_name(MOMENT, session_id, agent)
        (folder / name).write_bytes(
            encode_line(0, TS, "session_meta", {"session_id": session_id, "tenant": "t"})
        )
        ids.add(session_id)
    other = build_file_name(MOMENT, new_session_id())
    for stray in (
        f".{other}.tmp-0123abcd",  # a creation cut short
        f"{other}.torn-1",  # bytes set aside by repair
        "notes.txt",
        "bad.jsonl",
        other.replace("2026-11-30", "2026-13-40"),  # no such date
        "2026-11-30_000000_01A22C15-89A6-7D3D-B5B7-165622BD350C.jsonl",  # not lowercase
    ):
        (folder / stray).write_bytes(b"")
    return ids


def writer_ids(data_dir: Path) -> set[str]:
    return set(build_index(DataRoot(data_dir)).entries)


def reader_ids(data_dir: Path) -> set[str]:
    seen: set[str] = set()
    root = DataRoot(data_dir)
    folder = SessionFolder(
        root,
        root.sessions_folder(0),
        lambda parsed, name: seen.add(parsed.session_id),
        lambda *_: None,
        lambda: None,
    )
    try:
        folder.current()
    finally:
        folder.close()
    return seen


def scanned_ids(data_dir: Path) -> set[str]:
    return {parsed.session_id for parsed, _ in DataRoot(data_dir).scan()}


def test_a_session_file_name_is_a_parsed_name_and_anything_else_is_none() -> None:
    """Built names parse back; temporaries, sidecars and strays are no session."""
    session_id = new_session_id()
    name = build_file_name(MOMENT, session_id, "planner")
    parsed = session_file_name(name)
    assert parsed is not None
    assert (parsed.session_id, parsed.agent_name, parsed.created_at) == (session_id, "planner", MOMENT)
    for other in (f".{name}.tmp-0123abcd", f"{name}.torn-1", "bad.jsonl", "", ".jsonl"):
        assert session_file_name(other) is None, other


def test_writer_reader_and_scan_take_the_same_entries_for_sessions(data_dir: Path) -> None:
    """Of a folder holding two sessions, a temporary, a sidecar and strays, the reader's folder,
    the data root's scan and the writer's start-up index all find the two sessions only."""
    ids = sessions_folder(data_dir)
    assert reader_ids(data_dir) == ids
    assert scanned_ids(data_dir) == ids
    assert writer_ids(data_dir) == ids  # last: start-up removes the temporary


@pytest.mark.parametrize(
    ("module", "found"),
    [
        (writer_service.session_index, writer_ids),
        (reader_service.session_folder, reader_ids),
        (shared.layout, scanned_ids),
    ],
    ids=["writer", "reader", "scan"],
)
def test_each_side_takes_sessions_with_the_shared_rule(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, module: Any, found: Any
) -> None:
    """With session_file_name taking no entry for a session, each side finds none."""
    sessions_folder(data_dir)
    assert module.session_file_name is session_file_name
    monkeypatch.setattr(module, "session_file_name", lambda name: None)
    assert found(data_dir) == set()
