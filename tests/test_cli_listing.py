"""``rollout ls`` pages: the "more:" line is a command that continues the same listing."""

from __future__ import annotations

import re
import shlex
from datetime import UTC, datetime, timedelta

import pytest

from reader_service.listing import encode_cursor
from rollout.v1 import records_pb2, writer_pb2
from rollout_cli.session_view import relative_time
from tests.conftest import run_rollout

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _rollout(*args: str) -> str:
    result = run_rollout(*args)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_next_page_command_keeps_the_filters_and_page_size(writer, reader_process) -> None:
    """Three paused sessions among five, pages of one: following each "more:" command lists the
    three paused ones, one per page, and never a completed one (the token holds a position only)."""
    paused = set()
    for number in range(5):
        session_id = writer.CreateSession(
            writer_pb2.CreateSessionRequest(agent_name=f"a{number}", role=writer_pb2.SESSION_ROLE_ROOT)
        ).session_id
        kind = records_pb2.STOP_KIND_PAUSED if number % 2 == 0 else records_pb2.STOP_KIND_COMPLETED
        writer.Stop(writer_pb2.StopRequest(session_id=session_id, stop_kind=kind, reason="test"))
        if kind == records_pb2.STOP_KIND_PAUSED:
            paused.add(session_id)
    command = ["ls", "--reader", reader_process.address, "--stop-state", "paused", "--page-size", "1"]
    listed: list[str] = []
    for _ in range(5):
        output = _rollout(*command)
        rows = [line for line in output.splitlines()[1:] if not line.startswith(("more:", "("))]
        assert len(rows) <= 1
        assert all(" paused " in row for row in rows), output
        listed += [UUID.search(row).group() for row in rows]
        more = [line for line in output.splitlines() if line.startswith("more: ")]
        if not more:
            break
        words = shlex.split(more[0].removeprefix("more: "))
        assert words[:2] == ["rollout", "ls"]
        command = words[1:]
    assert sorted(listed) == sorted(paused)


def test_ls_shows_each_sessions_first_prompt_and_when_it_last_changed(
    writer, reader_process, monkeypatch
) -> None:
    """Like a session picker, `rollout ls` shows the first user prompt (not injected context), the
    time since the last record and the message records, newest first."""
    session_id = writer.CreateSession(writer_pb2.CreateSessionRequest(cwd="/work/app")).session_id
    messages = [
        records_pb2.ChatMessage(role="user", text="<environment_context>cwd</environment_context>"),
        records_pb2.ChatMessage(role="user", text="Add a --format csv option\nto   the export"),
        records_pb2.ChatMessage(role="assistant", text="on it"),
    ]
    writer.Append(
        writer_pb2.AppendRequest(
            session_id=session_id, records=[writer_pb2.AppendRecord(message=m) for m in messages]
        )
    )
    monkeypatch.setenv("COLUMNS", "200")
    output = _rollout("ls", "--reader", reader_process.address)
    header, row = output.splitlines()[:2]
    assert header.split() == [
        "UPDATED",
        "SESSION",
        "AGENT",
        "BRANCH",
        "STATE",
        "RESUME",
        "MSGS",
        "TITLE/PREVIEW",
    ]
    assert row.startswith("just now ")
    assert session_id in row
    assert row.rstrip().endswith(" 3  Add a --format csv option to the export")


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(3, "just now"), (42, "42 s ago"), (150, "2 min ago"), (7300, "2 h ago"), (3 * 86400, "3 days ago")],
)
def test_relative_times_read_like_a_picker(seconds, shown) -> None:
    """Recent times are said as an age; older than 30 days, as the date."""
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    then = (now - timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert relative_time(then, now) == shown
    old = (now - timedelta(days=40)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert relative_time(old, now) == "2026-10-21"


def test_an_empty_listing_says_so_instead_of_a_bare_header(writer, reader_process) -> None:
    """No session at all, or none matching the filters: one line saying which, no table header."""
    at = ("--reader", reader_process.address)
    assert _rollout("ls", *at).splitlines() == ["no sessions"]
    writer.CreateSession(writer_pb2.CreateSessionRequest())
    assert _rollout("ls", *at, "--stop-state", "replayable").splitlines() == [
        "no session matches these filters"
    ]
    assert _rollout("ls", *at).splitlines()[0].split()[:2] == ["UPDATED", "SESSION"]
    # A token past every session (they can be removed between pages): said as such.
    past_the_end = encode_cursor((datetime(2000, 1, 1, tzinfo=UTC), "0" * 36))
    assert _rollout("ls", *at, "--page-token", past_the_end).splitlines() == [
        "no more sessions after this page token"
    ]
