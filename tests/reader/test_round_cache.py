"""The reader's round cache: a grown file is read from its committed length only, a replaced one
from its start, and every answer is the one a fresh reading gives."""

from __future__ import annotations

import os
from pathlib import Path

from reader_service.rounds import RoundCache, rounds_page
from rollout.v1 import reader_pb2
from shared.rounds import Lineage, RoundStatus
from tests.shared.test_rounds import SESSION, Session


def fresh(path: Path):
    return RoundCache().rounds(path, lambda: Lineage(SESSION))


def test_a_grown_file_extends_its_rounds_and_a_replaced_one_is_read_again(tmp_path: Path) -> None:
    session = Session()
    session.user("first", kind="trigger", at=0)
    session.usage(100, at=1)
    session.say("one", at=2)
    session.user("second", kind="trigger", at=10)
    path = tmp_path / "s.jsonl"
    written = session.lines()
    path.write_bytes(written)
    cache = RoundCache()
    first = cache.rounds(path, lambda: Lineage(SESSION))
    assert [r.status for r in first] == [RoundStatus.COMPLETE, RoundStatus.PENDING]
    session.usage(1200, at=200)
    session.say("two", at=311)
    with path.open("ab") as grown:
        grown.write(session.lines()[len(written) :] + b'{"v":1,"seq":')  # and a line being written
    grown_rounds = cache.rounds(path, lambda: Lineage(SESSION))
    assert cache.counts == {"unchanged": 0, "extended": 1, "rebuilt": 1}
    assert grown_rounds == fresh(path)
    assert (grown_rounds[1].status, grown_rounds[1].duration_s, grown_rounds[1].output_tokens) == (
        RoundStatus.COMPLETE,
        301,
        1100,
    )
    assert cache.rounds(path, lambda: Lineage(SESSION)) == grown_rounds
    assert cache.counts["unchanged"] == 1
    replaced = tmp_path / "other.jsonl"
    replaced.write_bytes(written)
    os.replace(replaced, path)
    assert cache.rounds(path, lambda: Lineage(SESSION)) == first
    assert cache.counts["rebuilt"] == 2


def test_a_page_made_from_kept_round_bytes_is_the_page_a_fresh_reading_serializes(tmp_path: Path) -> None:
    """ListRounds pages are made from the settled rounds' kept bytes (bench/rounds.py): each page,
    before and after the file grew (the pending round settles, new ones come) and after the kept
    bytes were dropped over the budget, is byte for byte what rounds_page serializes."""
    session = Session()
    for number in range(5):
        session.user(f"question {number}", kind="trigger", at=10 * number)
        session.say(f"answer {number}", at=10 * number + 1)
    session.user("open question", kind="trigger", at=60)
    path = tmp_path / "s.jsonl"
    written = session.lines()
    path.write_bytes(written)
    cache = RoundCache(encoded_budget=1 << 20)

    def pages() -> list[bytes]:
        return [cache.page(path, lambda: Lineage(SESSION), 2, start) for start in (0, 2, 4, 6)]

    def expected() -> list[bytes]:
        found = fresh(path)
        return [rounds_page(found, 2, start).SerializeToString() for start in (0, 2, 4, 6)]

    assert pages() == expected()
    session.say("open answer", at=70)
    session.user("last question", kind="trigger", at=80)
    with path.open("ab") as grown:
        grown.write(session.lines()[len(written) :])
    assert pages() == expected()
    assert reader_pb2.ListRoundsResponse.FromString(pages()[3]).total == 7
    cache.encoded_budget = 0
    assert pages() == expected()


def test_the_round_to_close_of_an_unchanged_file_is_not_read_again(tmp_path: Path) -> None:
    """ListPendingRounds' question (shared.rounds.round_to_close) is answered once per file state:
    an idle session is not read again even once its rounds left the cache; a grown one is."""
    session = Session()
    session.user("first", kind="trigger", at=0)
    path = tmp_path / "s.jsonl"
    written = session.lines()
    path.write_bytes(written)
    cache = RoundCache(max_entries=0)  # nothing stays in the cache itself
    pending = cache.to_close(path, lambda: Lineage(SESSION))
    assert pending is not None
    assert pending.status is RoundStatus.PENDING
    assert cache.to_close(path, lambda: Lineage(SESSION)) == pending
    assert cache.counts["rebuilt"] == 1
    session.say("answered", at=5)
    with path.open("ab") as grown:
        grown.write(session.lines()[len(written) :])
    assert cache.to_close(path, lambda: Lineage(SESSION)) is None
    assert cache.counts["rebuilt"] == 2


def test_a_sweep_for_rounds_to_close_does_not_evict_the_sessions_being_read(tmp_path: Path) -> None:
    """ListPendingRounds asks every session its round to close: files not in the cache are read
    without entering it, so the one session a reader keeps (max_entries=1) stays there."""
    paths = []
    for name in ("kept", "swept-1", "swept-2"):
        session = Session()
        session.user(name, kind="trigger", at=0)
        path = tmp_path / f"{name}.jsonl"
        path.write_bytes(session.lines())
        paths.append(path)
    cache = RoundCache(max_entries=1)
    cache.rounds(paths[0], lambda: Lineage("kept"))
    for path in paths[1:]:
        assert cache.to_close(path, lambda: Lineage("swept")) is not None
    cache.rounds(paths[0], lambda: Lineage("kept"))
    assert cache.counts == {"unchanged": 1, "extended": 0, "rebuilt": 3}


def test_the_origin_index_is_bounded_and_a_file_read_again_notes_its_rounds_again(tmp_path: Path) -> None:
    """With room for 3 round ids, reading a second file of 2 rounds empties the index (its
    generation moves on): the first file counts as never noted, so GetRound by id reads it
    again, and reading it again notes its rounds again even though its entry is still cached."""
    paths = []
    for name in ("a", "b"):
        session = Session()
        session.user("first", kind="trigger", at=0)
        session.say("one", at=1)
        session.user("second", kind="trigger", at=2)
        path = tmp_path / f"{name}.jsonl"
        path.write_bytes(session.lines())
        paths.append(path)
    cache = RoundCache(max_origins=3)
    first = cache.rounds(paths[0], lambda: Lineage("a"))
    assert [cache.origin(r.round_id) for r in first] == [("a", 1), ("a", 3)]
    second = cache.rounds(paths[1], lambda: Lineage("b"))
    assert [cache.origin(r.round_id) for r in second] == [("b", 1), ("b", 3)]
    assert [cache.origin(r.round_id) for r in first] == [None, None]
    assert cache.noted_bytes(paths[0]) == -1
    assert cache.noted_bytes(paths[1]) == paths[1].stat().st_size
    cache.rounds(paths[0], lambda: Lineage("a"))
    assert cache.counts["unchanged"] == 1  # from the cached entry, not read from its start
    assert [cache.origin(r.round_id) for r in first] == [("a", 1), ("a", 3)]
    assert cache.noted_bytes(paths[0]) == paths[0].stat().st_size
    cache.forget(paths[1])  # deleted: nothing of the file is kept, its origins stay for its forks
    assert cache.noted_bytes(paths[1]) == -1
    assert [cache.origin(r.round_id) for r in second] == [("b", 1), ("b", 3)]
