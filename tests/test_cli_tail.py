"""``rollout tail``: a session's last records, one line each; with -f, each record as it lands."""

from __future__ import annotations

import re
import subprocess
import sys

from rollout.v1 import records_pb2, writer_pb2
from tests.conftest import REPO, run_rollout
from tests.processes import launch

LINE = re.compile(r"^\[(\d+)\] \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} (\S+) ?(.*)$")


def _append(writer, session_id: str, *messages: records_pb2.ChatMessage) -> None:
    writer.Append(
        writer_pb2.AppendRequest(
            session_id=session_id, records=[writer_pb2.AppendRecord(message=m) for m in messages]
        )
    )


def _parsed(line: str) -> tuple[int, str, str]:
    match = LINE.match(line)
    assert match is not None, line
    return int(match.group(1)), match.group(2), match.group(3)


def test_tail_prints_the_last_records_and_exits(writer, reader_process) -> None:
    """Without -f: the last N records (default 10), one line each with seq, time, role or type
    and what it says; tool calls and outputs named; then it exits 0."""
    session_id = writer.CreateSession(writer_pb2.CreateSessionRequest(model="m1")).session_id
    call = records_pb2.ToolCall(
        id="call_1", type="function", function=records_pb2.FunctionCall(name="grep", arguments='{"q":"x"}')
    )
    _append(
        writer,
        session_id,
        records_pb2.ChatMessage(role="user", text="Find x\nplease"),
        records_pb2.ChatMessage(
            role="assistant", tool_calls=[call], reasoning=records_pb2.Reasoning(content="search first")
        ),
        records_pb2.ChatMessage(role="tool", tool_call_id="call_1", text="x at line 3"),
    )
    result = run_rollout("tail", session_id, "--reader", reader_process.address)
    assert result.returncode == 0, result.stderr
    assert [_parsed(line) for line in result.stdout.splitlines()] == [
        (0, "session_meta", "model=m1"),
        (1, "user", "Find x please"),
        (2, "reasoning", "search first"),
        (3, "assistant", '→ grep({"q":"x"})'),
        (4, "tool", "(answers call_1) x at line 3"),
    ]
    result = run_rollout("tail", session_id, "-n", "2", "--reader", reader_process.address)
    assert [_parsed(line)[0] for line in result.stdout.splitlines()] == [3, 4]


def test_tail_follow_prints_records_as_they_land_and_ends_with_the_stop(writer, reader_process) -> None:
    """`rollout tail -f` prints the recent records, then each appended record once it lands
    (read line by line while the command runs), and exits 0 after the stop record."""
    session_id = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    command = [sys.executable, "-m", "rollout_cli.main", "tail", "-f", session_id]
    process = launch(  # reaped after the test, also when it fails before tail ends
        [*command, "--reader", reader_process.address],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={"PYTHONUNBUFFERED": "1", "PATH": "/usr/bin:/bin"},
    )
    assert process.stdout is not None
    assert _parsed(process.stdout.readline())[:2] == (0, "session_meta")
    for number in range(1, 4):
        _append(writer, session_id, records_pb2.ChatMessage(role="user", text=f"live {number}"))
        assert _parsed(process.stdout.readline()) == (number, "user", f"live {number}")
    writer.Stop(
        writer_pb2.StopRequest(session_id=session_id, stop_kind=records_pb2.STOP_KIND_PAUSED, reason="lunch")
    )
    rest = process.stdout.read().splitlines()
    assert process.wait(60) == 0, process.stderr.read() if process.stderr else ""
    assert [_parsed(line)[1:] for line in rest][-1] == ("stop", "paused: lunch")
    assert [_parsed(line)[:2] for line in rest] == [(4, "agent_checkpoint"), (5, "stop")]


def test_tail_of_an_unknown_session_is_a_one_line_error(reader_process) -> None:
    """An unknown session exits 1 with the reader's NOT_FOUND sentence."""
    result = run_rollout("tail", "0197a5e2-3c4d-7e8f-9a0b-1c2d3e4f5a6b", "--reader", reader_process.address)
    assert result.returncode == 1
    assert result.stderr.startswith("Error: NOT_FOUND: ")
