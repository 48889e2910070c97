"""Session listing: newest first, stable cursor, filters, scan cap (docs/spec.md §5 Listing)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import pytest

from reader_service.listing import SessionFilters, list_sessions
from reader_service.listing_index import ListingIndex
from rollout.v1 import reader_pb2, records_pb2, writer_pb2
from shared.layout import DataRoot
from shared.naming import build_file_name
from shared.records import encode_line, format_timestamp
from tests.data_roots import session_file, session_path

BASE = datetime(2026, 1, 1, tzinfo=UTC)


def make_sessions(data_dir: Path, count: int, *, stopped_every: int = 0) -> list[str]:
    """``count`` session files with real names, one second apart; returns ids oldest first."""
    ids = []
    for index in range(count):
        created = BASE + timedelta(seconds=index)
        session_id = f"01900000-0000-7000-8000-{index:012x}"
        lines = encode_line(
            0,
            format_timestamp(created),
            "session_meta",
            {
                "session_id": session_id,
                "tenant": "even" if index % 2 == 0 else "odd",
                "created_at": format_timestamp(created),
            },
        )
        if stopped_every and index % stopped_every == 0:
            lines += encode_line(
                1,
                format_timestamp(created),
                "agent_checkpoint",
                {
                    "digest": "sha256:v1:" + "0" * 64,
                    "message_count": 0,
                    "covers_seq": 0,
                    "stop_kind": "paused",
                },
            )
            lines += encode_line(
                2,
                format_timestamp(created),
                "stop",
                {"stop_kind": "paused", "reason": "p", "checkpoint_seq": 1},
            )
        session_path(data_dir, session_id, build_file_name(created, session_id)).write_bytes(lines)
        ids.append(session_id)
    return ids


def test_ten_thousand_sessions_in_pages_of_100_each_exactly_once_while_sessions_are_created(
    data_dir, writer, reader
) -> None:
    """Walking 10,000 sessions in pages of 100 loses and repeats none while new sessions appear."""
    old = make_sessions(data_dir, 10_000)
    stop_creating = threading.Event()
    created: list[str] = []

    def keep_creating() -> None:
        while not stop_creating.is_set() and len(created) < 200:
            created.append(writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id)

    creator = threading.Thread(target=keep_creating)
    creator.start()
    seen: list[str] = []
    token = ""
    try:
        while True:
            page = reader.ListSessions(reader_pb2.ListSessionsRequest(page_size=100, page_token=token))
            seen.extend(s.session_id for s in page.sessions)
            token = page.next_page_token
            if not token:
                break
    finally:
        stop_creating.set()
        creator.join()
    assert created, "sessions were created during the walk"
    assert len(seen) == len(set(seen)), "no session is listed twice"
    assert set(old) <= set(seen), "no old session is lost"
    assert set(seen) <= set(old) | set(created)
    old_order = [sid for sid in seen if sid in set(old)]
    assert old_order == list(reversed(old)), "newest first, stable"


def test_unknown_sessions_are_listed_and_filters_apply(data_dir) -> None:
    """Sessions without stop facts are listed as unknown; tenant, range and stop-state filters narrow."""
    ids = make_sessions(data_dir, 30, stopped_every=3)
    root = ListingIndex(DataRoot(data_dir))
    everything = list_sessions(root, page_size=100)
    assert len(everything.sessions) == 30
    assert sum(not s.stop_facts.found for s in everything.sessions) == 20
    unknown = list_sessions(root, page_size=100, filters=SessionFilters(stop_state="unknown")).sessions
    assert len(unknown) == 20
    paused = list_sessions(root, page_size=100, filters=SessionFilters(stop_state="paused")).sessions
    assert {s.name.session_id for s in paused} == {ids[i] for i in range(0, 30, 3)}
    replayable = list_sessions(root, page_size=100, filters=SessionFilters(stop_state="replayable")).sessions
    assert len(replayable) == 10
    even = list_sessions(root, page_size=100, filters=SessionFilters(tenant="even")).sessions
    assert len(even) == 15
    window = SessionFilters(
        created_after=BASE + timedelta(seconds=10), created_before=BASE + timedelta(seconds=19)
    )
    ranged = list_sessions(root, page_size=100, filters=window).sessions
    assert [s.name.session_id for s in ranged] == list(reversed(ids[10:20]))


def test_scan_cap_ends_a_page_early_and_says_so(data_dir) -> None:
    """With a scan cap, a sparse filter returns a short page, scan_capped, and a token that continues."""
    ids = make_sessions(data_dir, 50, stopped_every=10)
    root = ListingIndex(DataRoot(data_dir))
    filters = SessionFilters(stop_state="paused")
    page = list_sessions(root, page_size=10, filters=filters, max_scan=15)
    assert page.scan_capped
    assert page.scanned == 15
    found = [s.name.session_id for s in page.sessions]
    token = page.next_page_token
    while token:
        page = list_sessions(root, page_size=10, page_token=token, filters=filters, max_scan=15)
        found += [s.name.session_id for s in page.sessions]
        token = page.next_page_token
    assert found == [ids[i] for i in (40, 30, 20, 10, 0)]


def test_bad_page_token_is_invalid_argument(reader) -> None:
    """A page token that ListSessions did not issue is INVALID_ARGUMENT."""
    with pytest.raises(grpc.RpcError) as caught:
        reader.ListSessions(reader_pb2.ListSessionsRequest(page_token="not-a-token"))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_stop_state_filter_over_grpc(writer, reader) -> None:
    """ListSessions filters by stop state and shows the reason of each session."""
    a = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    b = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    writer.Stop(
        writer_pb2.StopRequest(session_id=a, stop_kind=records_pb2.STOP_KIND_COMPLETED, reason="done")
    )
    stopped = reader.ListSessions(reader_pb2.ListSessionsRequest(stop_state="stopped")).sessions
    assert [s.session_id for s in stopped] == [a]
    unknown = reader.ListSessions(reader_pb2.ListSessionsRequest(stop_state="unknown")).sessions
    assert [s.session_id for s in unknown] == [b]
    assert unknown[0].stop_facts.resume.reason.startswith("unknown")


def test_listing_never_rebuilds_a_session(data_dir, monkeypatch) -> None:
    """Listing reads names, heads and tails only: it works with every rebuild disabled."""
    import importlib

    import reader_service.listing
    import reader_service.stop_facts

    def forbidden(*_args, **_kwargs):
        raise AssertionError("listing must not rebuild a session")

    for module in (reader_service.listing, reader_service.stop_facts):
        for name in ("rebuild", "index_rebuild", "replay_file"):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, forbidden)
    # shared/__init__ re-exports rebuild under its module's name: patch the modules themselves.
    monkeypatch.setattr(importlib.import_module("shared.rebuild"), "rebuild", forbidden)
    monkeypatch.setattr(importlib.import_module("shared.rebuild_index"), "index_rebuild", forbidden)
    make_sessions(data_dir, 12, stopped_every=4)
    page = list_sessions(ListingIndex(DataRoot(data_dir)), page_size=5)
    assert len(page.sessions) == 5
    assert page.next_page_token


def add_session(data_dir: Path, seconds: int, number: int) -> str:
    """One more session file, created ``seconds`` after BASE, of id ``number`` (tenant "even")."""
    created = BASE + timedelta(seconds=seconds)
    session_id = f"01900000-0000-7000-8000-{number:012x}"
    meta = {"session_id": session_id, "tenant": "even", "created_at": format_timestamp(created)}
    path = session_path(data_dir, session_id, build_file_name(created, session_id))
    path.write_bytes(encode_line(0, format_timestamp(created), "session_meta", meta))
    return session_id


@pytest.mark.parametrize("tenant", ["", "even"])
def test_a_session_created_or_removed_between_pages_is_listed_in_its_place(data_dir, tenant) -> None:
    """Between two pages, a session created below the cursor is listed in its place by the next
    pages, one created above it only on a new first page; one removed is not listed; none twice."""
    ids = make_sessions(data_dir, 40)[::2] if tenant else make_sessions(data_dir, 20)
    index = ListingIndex(DataRoot(data_dir))
    filters = SessionFilters(tenant=tenant)
    first = list_sessions(index, page_size=5, filters=filters)
    assert [s.name.session_id for s in first.sessions] == ids[::-1][:5]
    below = add_session(data_dir, 2 * 7 if tenant else 7, 1000)  # next to the 8th oldest
    above = add_session(data_dir, 100, 1001)
    removed = ids[3]
    session_file(data_dir, removed).unlink()
    rest: list[str] = []
    token = first.next_page_token
    while token:
        page = list_sessions(index, page_size=5, page_token=token, filters=filters)
        rest += [s.name.session_id for s in page.sessions]
        token = page.next_page_token
    expected = [sid for sid in ids[::-1][5:] if sid != removed]
    expected.insert(expected.index(ids[7]), below)
    assert rest == expected
    assert list_sessions(index, page_size=1, filters=filters).sessions[0].name.session_id == above
    index.close()


def test_a_session_created_during_a_page_below_the_walk_is_on_that_page(data_dir, monkeypatch) -> None:
    """The walk steps from session to session as the index holds them at each step: a session that
    another call makes known while a page is walked, further down the walk, is on that page."""
    ids = make_sessions(data_dir, 10)
    index = ListingIndex(DataRoot(data_dir))
    list_sessions(index)
    activity = index.activity
    created: list[str] = []

    def activity_then_create(name: str):
        if ids[8] in name and not created:
            created.append(add_session(data_dir, 3, 1000))
            index.sync()  # another call's
        return activity(name)

    monkeypatch.setattr(index, "activity", activity_then_create)
    page = list_sessions(index, page_size=100)
    listed = [s.name.session_id for s in page.sessions]
    assert listed == [*ids[:3:-1], created[0], *ids[3::-1]]
    index.close()
