"""The listing index (docs/spec.md §5 derived state): current summaries, never hiding a session."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import reader_service.listing_index as listing_index
from reader_service.listing import SessionFilters, list_sessions
from reader_service.listing_index import ListingIndex, preview_of
from shared.layout import DataRoot
from shared.naming import build_file_name
from shared.records import encode_line, format_timestamp
from tests.data_roots import session_path

BASE = datetime(2026, 3, 1, tzinfo=UTC)


def session_id(number: int) -> str:
    return f"01900000-0000-7000-8000-{number:012x}"


def write(data_dir: Path, number: int, tenant: str, *records: tuple[str, dict], cwd: str = "") -> Path:
    """A session file with real name and head, then ``records``; one second after the previous number."""
    created = BASE + timedelta(seconds=number)
    meta = {"session_id": session_id(number), "tenant": tenant, "created_at": format_timestamp(created)}
    if cwd:
        meta["cwd"] = cwd
    data = encode_line(0, format_timestamp(created), "session_meta", meta)
    for seq, (record_type, payload) in enumerate(records, start=1):
        data += encode_line(seq, format_timestamp(created + timedelta(minutes=seq)), record_type, payload)
    path = session_path(data_dir, session_id(number), build_file_name(created, session_id(number)))
    path.write_bytes(data)
    return path


def append(
    path: Path, seq: int, record_type: str, payload: dict, ts: str = "2026-03-02T00:00:00.000000Z"
) -> None:
    with path.open("ab") as handle:
        handle.write(encode_line(seq, ts, record_type, payload))


def user(text: str) -> tuple[str, dict]:
    return ("message", {"role": "user", "content": text})


def ids(page) -> list[str]:
    return [listing.name.session_id for listing in page.sessions]


STOP = [
    ("agent_checkpoint", {"digest": "sha256:v1:" + "0" * 64, "message_count": 0, "covers_seq": 0}),
    ("stop", {"stop_kind": "paused", "reason": "later", "checkpoint_seq": 1}),
]


def test_a_summary_holds_the_first_prompt_the_last_change_and_the_message_records(data_dir) -> None:
    """Preview (injected context skipped, blanks collapsed), the last record's time, message records,
    cwd and size come from the index."""
    path = write(
        data_dir,
        1,
        "t",
        ("message", {"role": "developer", "content": "rules"}),
        ("message", {"role": "user", "content": [{"type": "input_text", "text": "<environment_context>x"}]}),
        ("message", {"role": "user", "content": [{"type": "input_text", "text": "Fix  the\nbuild"}]}),
        ("event", {"kind": "token_count", "body": {}}),
        ("message", {"role": "assistant", "content": "done"}),
        cwd="/work/app",
    )
    (listing,) = list_sessions(ListingIndex(DataRoot(data_dir))).sessions
    assert listing.activity.preview == "Fix the build"
    assert listing.activity.message_count == 4
    assert listing.activity.updated_at == format_timestamp(BASE + timedelta(seconds=1, minutes=5))
    assert listing.activity.size == path.stat().st_size
    assert listing.meta["cwd"] == "/work/app"


def test_sessions_created_after_the_index_was_built_are_listed_and_filtered(data_dir) -> None:
    """A session the index has never seen is listed at once, with and without a tenant filter."""
    for number in range(4):
        write(data_dir, number, "a" if number % 2 else "b", user(f"u{number}"))
    index = ListingIndex(DataRoot(data_dir))
    assert len(list_sessions(index, filters=SessionFilters(tenant="a")).sessions) == 2
    write(data_dir, 10, "a", user("new"))
    os.utime(
        session_path(data_dir, session_id(10), "x").parent, ns=(0, 0)
    )  # whatever its folder's time stamp says
    assert ids(list_sessions(index, filters=SessionFilters(tenant="a")))[0] == session_id(10)
    assert ids(list_sessions(index))[0] == session_id(10)


def test_a_stale_summary_is_refreshed_before_it_is_used(data_dir) -> None:
    """A session that stopped, or grew, after it was indexed shows its new stop facts, count and time,
    and a stop-state filter finds it."""
    path = write(data_dir, 1, "t", user("hello"))
    index = ListingIndex(DataRoot(data_dir))
    (before,) = list_sessions(index).sessions
    assert not before.stop_facts.found
    append(path, 2, "message", {"role": "assistant", "content": "hi"})
    append(path, 3, *STOP[0])
    append(path, 4, *STOP[1], ts="2026-03-03T00:00:00.000000Z")
    (after,) = list_sessions(index, filters=SessionFilters(stop_state="paused")).sessions
    assert after.stop_facts.stop_kind == "paused"
    assert after.activity.message_count == 2
    assert after.activity.updated_at == "2026-03-03T00:00:00.000000Z"


def test_a_replaced_or_deleted_file_is_never_answered_from_the_index(data_dir) -> None:
    """A file replaced by another (new inode) is read again; a deleted one leaves the listing."""
    path = write(data_dir, 1, "t", user("first"), user("second"))
    write(data_dir, 2, "t", user("other"))
    index = ListingIndex(DataRoot(data_dir))
    assert [s.activity.message_count for s in list_sessions(index).sessions] == [1, 2]
    replacement = path.with_suffix(".tmp")
    replacement.write_bytes(
        path.read_bytes().split(b"\n")[0]
        + b"\n"
        + encode_line(1, "2026-03-01T00:00:00.000000Z", "message", {"role": "user", "content": "only"})
    )
    os.replace(replacement, path)
    assert [(s.activity.preview, s.activity.message_count) for s in list_sessions(index).sessions] == [
        ("other", 1),
        ("only", 1),
    ]
    path.unlink()
    assert ids(list_sessions(index)) == [session_id(2)]


def test_a_head_not_yet_complete_is_read_again_so_its_session_is_not_hidden(data_dir) -> None:
    """A first line still being written is not remembered as "no session_meta": once complete, the
    session is found under its tenant."""
    path = write(data_dir, 1, "t", user("x"))
    whole = path.read_bytes()
    path.write_bytes(whole[:20])
    index = ListingIndex(DataRoot(data_dir))
    assert list_sessions(index, filters=SessionFilters(tenant="t")).sessions == []
    path.write_bytes(whole)
    assert ids(list_sessions(index, filters=SessionFilters(tenant="t"))) == [session_id(1)]


def test_a_tenant_filter_examines_only_that_tenants_sessions(data_dir, monkeypatch) -> None:
    """Once heads are indexed, a tenant (or parent, or agent) filter walks the sessions holding that
    value: one matching nothing examines none and reads no file; a page of one tenant reads only the
    sessions on it (here: none changed, so none)."""
    for number in range(40):
        write(data_dir, number, "busy" if number % 10 else "rare", user(f"u{number}"))
    index = ListingIndex(DataRoot(data_dir))
    assert len(list_sessions(index, page_size=100).sessions) == 40

    def forbidden(*_args, **_kwargs):
        raise AssertionError("no file is read")

    monkeypatch.setattr(listing_index, "read_session_meta", forbidden)
    monkeypatch.setattr(listing_index, "read_stop_facts", forbidden)
    monkeypatch.setattr(listing_index, "count_messages", forbidden)
    walked: list[object] = []
    name_of = index.name_of
    monkeypatch.setattr(index, "name_of", lambda key: walked.append(key) or name_of(key))
    nothing = list_sessions(index, filters=SessionFilters(tenant="nobody"))
    assert (nothing.sessions, nothing.scanned, nothing.next_page_token) == ([], 0, "")
    assert walked == [], "no session of another tenant is even looked up"
    rare = list_sessions(index, filters=SessionFilters(tenant="rare"))
    assert ids(rare) == [session_id(n) for n in (30, 20, 10, 0)]
    assert rare.scanned == len(walked) == 4
    agents = list_sessions(index, filters=SessionFilters(agent_name="nobody"))
    assert agents.scanned == 0


def test_a_large_first_count_finishes_in_the_background(data_dir, monkeypatch) -> None:
    """A listing counts at most SYNC_COUNT_BYTES of a session itself; the rest is counted by the
    background worker, after which the summary holds the whole count."""
    monkeypatch.setattr(listing_index, "SYNC_COUNT_BYTES", 1000)
    write(data_dir, 1, "t", *[user(f"message {n} " + "x" * 100) for n in range(20)])
    index = ListingIndex(DataRoot(data_dir))
    with monkeypatch.context() as held:
        held.setattr(index, "_start_worker", lambda: None)  # the worker waits until this page is out
        (first,) = list_sessions(index).sessions
    assert 0 < first.activity.message_count < 20
    assert first.activity.preview == "message 0 " + "x" * 100
    index.start_warming()
    deadline = time.monotonic() + 30
    while True:
        (later,) = list_sessions(index).sessions
        if later.activity.message_count == 20 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert later.activity.message_count == 20


@pytest.mark.parametrize(
    ("payload", "preview"),
    [
        ({"role": "user", "content": "  plain\ttext  "}, "plain text"),
        ({"role": "user", "content": "<user_instructions>be brief</user_instructions>"}, ""),
        ({"role": "user", "content": "# AGENTS.md instructions for /repo"}, ""),
        ({"role": "assistant", "content": "not a prompt"}, ""),
        ({"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}, ""),
        ({"role": "user", "content": "y" * 300}, "y" * 199 + "…"),
        (
            {
                "role": "user",
                "content": "<command-message>orchestrator is running…</command-message>\n"
                "<command-name>/orchestrator</command-name>\n<command-args>update CLAUDE.md</command-args>",
            },
            "/orchestrator update CLAUDE.md",
        ),
        ({"role": "user", "content": "<command-name>/init</command-name>"}, "/init"),
        (
            {
                "role": "user",
                "content": [
                    {
                        "type": "input_text",
                        "text": "# Context from my IDE setup:\n\n## Active file: a.py\n\n"
                        "## My request for Codex:\nEvaluate the package",
                    }
                ],
            },
            "Evaluate the package",
        ),
    ],
)
def test_the_preview_is_the_users_own_text(payload, preview) -> None:
    """Only a user's own words make a preview: injected context, other roles and images do not."""
    assert preview_of(payload) == preview
