"""``rollout ls`` pages: the "more:" line is a command that continues the same listing."""

from __future__ import annotations

import shlex

from rollout.v1 import records_pb2, writer_pb2
from tests.conftest import run_rollout


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
        rows = [line.split() for line in output.splitlines()[1:] if not line.startswith(("more:", "("))]
        assert len(rows) <= 1
        assert all(row[3] == "paused" for row in rows), output
        listed += [row[1] for row in rows]
        more = [line for line in output.splitlines() if line.startswith("more: ")]
        if not more:
            break
        words = shlex.split(more[0].removeprefix("more: "))
        assert words[:2] == ["rollout", "ls"]
        command = words[1:]
    assert sorted(listed) == sorted(paused)
