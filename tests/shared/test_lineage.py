"""Fork lineage through live and deleted sources (shared.lineage): the one walk both services
name rounds by."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import shared.lineage
import writer_service.resume_fork
from reader_service.server import ReaderConfig, RolloutReaderServicer
from shared.deletions import DELETIONS_FILE, Deletion
from shared.layout import DataRoot
from shared.lineage import MAX_FORK_DEPTH, Lineage, MetaOf, TombstoneOf, fork_source, lineage_of
from shared.naming import build_file_name, new_session_id
from shared.records import encode_line
from shared.rounds import round_id
from tests.data_roots import session_path

TS = "2026-12-03T10:00:00.000000Z"

METAS = {
    "b": {"session_id": "b", "forked_from": {"session_id": "a", "seq": 3}},
    "a": {"session_id": "a"},
}
C_META = {"session_id": "c", "forked_from": {"session_id": "b", "seq": 7}}


def _deleted(session_id: str, source: tuple[str, int] | None) -> Deletion:
    return Deletion(session_id, "default", "anonymous", "2026-12-03T00:00:00.000000Z", forked_from=source)


def _no_tombstone(_: str) -> Deletion | None:
    return None


def test_a_fork_of_a_fork_names_rounds_by_the_oldest_source() -> None:
    assert lineage_of("c", C_META, METAS.get, _no_tombstone) == Lineage("c", (("a", 3), ("b", 7)))
    assert lineage_of("c", C_META, lambda _: None, _no_tombstone) == Lineage("c", (("b", 7),))


def test_a_deleted_source_is_walked_through_by_its_deletion_record() -> None:
    """b is deleted: its deletion record keeps its forked_from, so c's lineage still reaches a."""
    live = {"a": METAS["a"]}
    tombstones = {"b": _deleted("b", ("a", 3))}
    lineage = lineage_of("c", C_META, live.get, tombstones.get)
    assert lineage == Lineage("c", (("a", 3), ("b", 7)))
    assert (lineage.owner(2), lineage.owner(5), lineage.owner(8)) == ("a", "b", "c")
    assert fork_source("b", live.get, tombstones.get) == ("a", 3)
    assert fork_source("a", live.get, tombstones.get) is None
    assert fork_source("gone", live.get, tombstones.get) is None


def test_a_live_session_is_read_before_its_deletion_record() -> None:
    """A file still there (a delete cut short before its file went) is read for its source."""
    tombstones = {"b": _deleted("b", ("x", 1))}
    assert fork_source("b", METAS.get, tombstones.get) == ("a", 3)


def test_a_cycle_or_a_long_chain_ends_the_walk() -> None:
    cycle = {"b": {"forked_from": {"session_id": "c", "seq": 1}}}
    assert lineage_of("c", C_META, cycle.get, _no_tombstone) == Lineage("c", (("b", 7),))
    chain = {f"s{n}": {"forked_from": {"session_id": f"s{n + 1}", "seq": 1}} for n in range(100)}
    found = lineage_of("start", {"forked_from": {"session_id": "s0", "seq": 1}}, chain.get, _no_tombstone)
    assert len(found.forks) == MAX_FORK_DEPTH


# -- both services walk a lineage with these functions ---------------------------------------


def _fork_file(data_dir: Path, source: str) -> tuple[str, Path]:
    """A fork of ``source`` at seq 1 whose round (its trigger at seq 1) is pending."""
    session_id = new_session_id()
    meta = {"session_id": session_id, "tenant": "t", "forked_from": {"session_id": source, "seq": 1}}
    body = encode_line(0, TS, "session_meta", meta)
    body += encode_line(1, TS, "message", {"role": "user", "content": "q", "input_kind": "trigger"})
    name = build_file_name(datetime(2026, 12, 3, tzinfo=UTC), session_id)
    path = session_path(data_dir, session_id, name)
    path.write_bytes(body)
    return session_id, path


def writer_round_id(data_dir: Path, session_id: str, path: Path) -> str:
    found = writer_service.resume_fork.round_left_pending(
        DataRoot(data_dir), session_id, path, path.stat().st_size
    )
    assert found is not None
    return found.round_id


def reader_round_id(data_dir: Path, session_id: str, path: Path) -> str:
    reader = RolloutReaderServicer(ReaderConfig(data_dir, search=False))
    try:
        (found,) = reader._rounds_of(session_id, path)
        return found.round_id
    finally:
        reader.close()


@pytest.mark.parametrize("side", [writer_round_id, reader_round_id], ids=["writer", "reader"])
def test_each_service_names_a_forks_rounds_through_the_shared_step(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, side: Callable[[Path, str, Path], str]
) -> None:
    """A fork of a source found neither live nor deleted names its round by that source; with the
    shared step made to say that source was itself forked from another, each service names it by
    that other one: neither walks a lineage its own way."""
    middle, oldest = new_session_id(), new_session_id()
    session_id, path = _fork_file(data_dir, middle)
    assert side(data_dir, session_id, path) == round_id(middle, 1)
    asked: list[str] = []

    def step(session: str, meta_of: MetaOf, tombstone_of: TombstoneOf) -> tuple[str, int] | None:
        asked.append(session)
        return (oldest, 1) if session == middle else None

    monkeypatch.setattr(shared.lineage, "fork_source", step)
    assert side(data_dir, session_id, path) == round_id(oldest, 1)
    assert middle in asked


def test_each_service_reads_a_deleted_source_from_its_deletion_record(data_dir: Path) -> None:
    """The middle session is gone and its deletion record names its own source: both services
    name the round by that source (shared.deletions.deletion_in is the tombstone lookup)."""
    middle, oldest = new_session_id(), new_session_id()
    session_id, path = _fork_file(data_dir, middle)
    root = DataRoot(data_dir)
    shard_dir = root.shard_dir(root.shard_of(middle))
    shard_dir.mkdir(parents=True, exist_ok=True)
    with open(shard_dir / DELETIONS_FILE, "ab") as records:
        records.write(_deleted(middle, (oldest, 1)).line())
    assert writer_round_id(data_dir, session_id, path) == round_id(oldest, 1)
    assert reader_round_id(data_dir, session_id, path) == round_id(oldest, 1)


def test_the_reader_asks_the_deletion_record_of_a_source_whose_head_it_cannot_read(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A source still listed whose file went (deleted before the listing learnt it) has no head
    to read: the reader's lineage goes on through its deletion record, not ending there (which
    would name the round by the deleted source, and keep that name in its round cache)."""
    middle, oldest = new_session_id(), new_session_id()
    session_id, path = _fork_file(data_dir, middle)
    root = DataRoot(data_dir)
    shard_dir = root.shard_dir(root.shard_of(middle))
    shard_dir.mkdir(parents=True, exist_ok=True)
    with open(shard_dir / DELETIONS_FILE, "ab") as records:
        records.write(_deleted(middle, (oldest, 1)).line())
    reader = RolloutReaderServicer(ReaderConfig(data_dir, search=False))
    gone = path.with_name("gone.jsonl")
    try:
        located, head = reader.index.locate, reader.index.meta

        def still_listed(session: str, field: str = "session_id") -> tuple[Any, Path]:
            return (None, gone) if session == middle else located(session, field)

        monkeypatch.setattr(reader.index, "locate", still_listed)
        monkeypatch.setattr(reader.index, "meta", lambda name: {} if name == gone.name else head(name))
        (found,) = reader._rounds_of(session_id, path)
        assert found.round_id == round_id(oldest, 1)
    finally:
        reader.close()


def test_an_empty_head_is_answered_by_the_deletion_record() -> None:
    tombstones = {"b": _deleted("b", ("a", 3))}
    assert fork_source("b", {"b": {}}.get, tombstones.get) == ("a", 3)
    assert fork_source("b", {"b": {}}.get, _no_tombstone) is None
