"""The ``rollout`` client commands as people read them: replay, stop-facts, stop, resume, fork,
verify; their exact lines, exit statuses and one-line errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from rollout.v1 import reader_pb2, records_pb2, writer_pb2
from tests.conftest import REPO, run_rollout
from tests.data_roots import session_file

UNKNOWN_ID = "0197a5e2-3c4d-7e8f-9a0b-1c2d3e4f5a6b"


def _session_with_a_call(writer) -> str:
    """A root session: a user message, then an assistant message with reasoning and a tool call."""
    session_id = writer.CreateSession(
        writer_pb2.CreateSessionRequest(agent_name="coder", role=writer_pb2.SESSION_ROLE_ROOT)
    ).session_id
    call = records_pb2.ToolCall(
        id="call_1", type="function", function=records_pb2.FunctionCall(name="grep", arguments='{"q": "x"}')
    )
    messages = [
        records_pb2.ChatMessage(role="user", text="Fix the test"),
        records_pb2.ChatMessage(
            role="assistant",
            text="Looking",
            reasoning=records_pb2.Reasoning(content="read it first"),
            tool_calls=[call],
        ),
    ]
    writer.Append(
        writer_pb2.AppendRequest(
            session_id=session_id, records=[writer_pb2.AppendRecord(message=m) for m in messages]
        )
    )
    return session_id


def _run(*args: str, code: int = 0) -> list[str]:
    result = run_rollout(*args)
    assert result.returncode == code, (result.stdout, result.stderr)
    return result.stdout.splitlines() if code == 0 else result.stderr.splitlines()


def _session_file(data_dir: Path, session_id: str) -> bytes:
    path = session_file(data_dir, session_id)
    return path.read_bytes()


def _offset_of_line(data: bytes, line: int) -> int:
    """The byte offset of 1-based ``line`` in ``data``."""
    return sum(len(raw) + 1 for raw in data.split(b"\n")[: line - 1])


def test_replay_and_stop_facts_print_the_session_as_stored(writer, reader, reader_process, data_dir) -> None:
    """`rollout replay` prints each message (reasoning, text, calls) and the summary lines;
    `rollout stop-facts` says unknown for an open session and every fact for a stopped one."""
    session_id = _session_with_a_call(writer)
    call_offset = _offset_of_line(_session_file(data_dir, session_id), 4)
    at = ("--reader", reader_process.address)
    tokens = reader.GetReplay(reader_pb2.ReplayRequest(session_id=session_id)).estimated_tokens
    assert _run("replay", session_id, *at) == [
        "[0] user",
        "  Fix the test",
        "[1] assistant",
        "  reasoning: read it first",
        "  Looking",
        '  call call_1: grep({"q": "x"})',
        f"-- 2 messages, ~{tokens} tokens, superseded outputs 0, checkpoint no_checkpoint",
        f"-- degraded unanswered_tool_call (line 4, byte {call_offset}): tool call 'call_1' has no output",
        "-- degraded no_checkpoint (line 0, byte 0): no agent_checkpoint: nothing to verify against",
    ]
    assert _run("replay", session_id, "--width", "4", *at)[1:3] == [
        "  Fix … [12 chars]",
        "[1] assistant",
    ]
    assert _run("stop-facts", session_id, *at) == [
        f"{session_id}: unknown (no stop facts in the tail: running, or killed before any Stop)"
    ]
    stop = writer.Stop(
        writer_pb2.StopRequest(session_id=session_id, stop_kind=records_pb2.STOP_KIND_PAUSED, reason="lunch")
    )
    facts = reader.GetStopFacts(reader_pb2.StopFactsRequest(session_id=session_id))
    assert _run("stop-facts", session_id.upper(), *at) == [
        f"session:     {session_id}",
        "stop kind:   paused",
        "reason:      lunch",
        "checkpoint:  seq 4, 2 messages, covers seq ≤ 3",
        f"digest:      {stop.digest}",
        "resume:      may be continued exactly: paused: the run may continue exactly where it stopped",
        f"tail read:   {facts.tail_bytes_read} bytes",
    ]
    assert _run("replay", session_id, "--token-budget", "1", *at)[-3:] == [
        f"-- 2 messages, ~{tokens} tokens, superseded outputs 0, checkpoint verified",
        f"-- degraded unanswered_tool_call (line 4, byte {call_offset}): tool call 'call_1' has no output",
        f"-- REPLAY_TOO_LARGE: ~{tokens} tokens over the budget of 1",
    ]


def test_stop_resume_fork_and_verify_say_what_they_did(
    writer, writer_process, reader_process, data_dir
) -> None:
    """stop, resume, fork and verify print one summary each; a refused resume and an unknown
    session exit 1 with the status and the service's sentence on stderr."""
    session_id = _session_with_a_call(writer)
    to_writer = ("--writer", writer_process.address)
    stopped = _run("stop", session_id, *to_writer)
    (line,) = stopped
    digest = line.rsplit(" ", 1)[1]
    assert line == f"{session_id}: stopped (paused) at seq 5; checkpoint of 2 messages, {digest}"
    assert digest.startswith("sha256:v1:")
    assert _run("resume", session_id, *to_writer) == [
        f"{session_id}: resumed (was paused); calls closed with a synthetic output: call_1; next seq 8"
    ]
    (forked,) = _run("fork", session_id, "--at-seq", "1", *to_writer)
    words = forked.split()
    assert words[:6] == ["forked", session_id, "at", "seq", "1", "into"]
    assert words[6] != session_id
    assert words[7].startswith("(sha256:v1:")
    assert words[7].endswith(")")
    size = len(_session_file(data_dir, session_id))
    assert _run("verify", session_id, "--reader", reader_process.address) == [
        f"{session_id}: OK",
        f"  - 8 records, seqs 0..7, {size} committed bytes, 3 messages in the rebuilt sequence",
        f"  - last checkpoint (seq 4) verifies: {digest}",
    ]
    assert _run("verify", UNKNOWN_ID, "--reader", reader_process.address, code=1) == [
        f"Error: NOT_FOUND: session '{UNKNOWN_ID}' not found"
    ]
    _run("stop", session_id, "--kind", "completed", "--reason", "done", *to_writer)
    assert _run("resume", session_id, *to_writer, code=1) == [
        "Error: FAILED_PRECONDITION: cannot resume: completed: the task finished; start a new session"
        " or fork; rollout resume --force re-opens it anyway"
    ]
    assert _run("fork", session_id, *to_writer, code=2)[-1] == (
        "Error: give exactly one of --at-seq and --before-user"
    )


def test_client_commands_name_the_service_they_cannot_reach() -> None:
    """A writer command pointed at nothing says so and how to point it, without a traceback."""
    result = run_rollout("stop", UNKNOWN_ID, "--writer", "127.0.0.1:1")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "Error: cannot reach the writer at 127.0.0.1:1. Is it running (bash deploy/local/serve.sh)?"
        " Point --writer / ROLLOUT_WRITER at it. If it serves TLS, pass its CA file with --tls-ca / ROLLOUT_TLS_CA."
    ]


def test_option_values_out_of_range_are_refused_before_anything_runs(tmp_path: Path) -> None:
    """A negative --width, a --before-user below 1, a page size over 1000, a serve address that is
    not host:port or that both services are given: a usage error (exit 2) naming the option, before
    any call is made or any service starts (no service runs here)."""
    refused = {
        ("replay", UNKNOWN_ID, "--width", "-5"): "--width",
        ("fork", UNKNOWN_ID, "--before-user", "0"): "--before-user",
        ("ls", "--page-size", "1001"): "--page-size",
        (
            "serve-writer",
            "--data-dir",
            str(tmp_path / "c"),
            "--retain-stopped-days",
            "0",
        ): "--retain-stopped-days",
        ("serve", "--data-dir", str(tmp_path / "d"), "--retain-stopped-days", "-1"): "--retain-stopped-days",
        ("serve", "--data-dir", str(tmp_path / "a"), "--writer-address", "127.0.0.1:5x"): "--writer-address",
        (
            "serve",
            "--data-dir",
            str(tmp_path / "b"),
            "--writer-address",
            "127.0.0.1:50999",
            "--reader-address",
            "127.0.0.1:50999",
        ): "cannot both bind 127.0.0.1:50999",
    }
    for args, named in refused.items():
        result = run_rollout(*args)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert named in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []  # neither serve created its data root


def test_importing_a_named_folder_without_session_files_fails_naming_it(tmp_path: Path) -> None:
    """A folder named on the command line (even one named like a file, x.jsonl/) that holds none of
    the tool's files is named with what was looked for and fails (exit 1); nothing is sent (no
    writer runs here)."""
    folder = tmp_path / "x.jsonl"
    folder.mkdir()
    (folder / "notes.txt").write_text("not a session")
    for tool, label in (("codex", "Codex rollout"), ("claude", "Claude Code transcript")):
        result = run_rollout("import", tool, "--writer", "127.0.0.1:1", f"{folder}/")
        assert result.returncode == 1, result.stderr
        assert (
            result.stderr.strip()
            == f"{folder}: a folder with no {label} (*.jsonl) under it; nothing imported"
        )
        assert "0 imported, 0 skipped (already in the ledger), 1 failed" in result.stdout


def test_importing_from_the_tools_own_folder_when_it_holds_nothing_says_so(tmp_path: Path) -> None:
    """With no PATH, the tool's own folder (under $HOME) missing or empty is nothing to do: it is
    named, no table, exit 0."""
    env = {**os.environ, "HOME": str(tmp_path)}
    for tool, label, folder in (
        ("codex", "Codex rollout", tmp_path / ".codex" / "sessions"),
        ("claude", "Claude Code transcript", tmp_path / ".claude" / "projects"),
    ):
        for exists in (False, True):
            if exists:
                folder.mkdir(parents=True)
            command = [sys.executable, "-m", "rollout_cli.main", "import", tool, "--writer", "127.0.0.1:1"]
            result = subprocess.run(
                command, capture_output=True, text=True, cwd=REPO, env=env, timeout=60, check=False
            )
            assert result.returncode == 0, result.stderr
            assert result.stderr.strip() == f"no {label} files found under {folder}; nothing imported"
            assert "import summary" not in result.stdout


def test_replay_by_rounds_puts_each_message_under_its_rounds_header(writer, reader_process) -> None:
    """`rollout replay --rounds`: a system message before the first round has no header; each
    round's header gives its number, status and why, start, duration, tokens (~: estimated),
    tools and failures; a supplement stays in its round. With --json, a {"round": ...} line
    precedes its messages."""
    session_id = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    call = records_pb2.ToolCall(id="c1", type="function", function=records_pb2.FunctionCall(name="ls"))
    messages = [
        records_pb2.ChatMessage(role="system", text="be brief"),
        records_pb2.ChatMessage(role="user", text="first"),
        records_pb2.ChatMessage(role="assistant", text="one"),
        records_pb2.ChatMessage(role="user", text="second"),
        records_pb2.ChatMessage(role="assistant", tool_calls=[call]),
        records_pb2.ChatMessage(role="user", text="also this"),
        records_pb2.ChatMessage(role="tool", text="boom", tool_call_id="c1", is_error=True),
    ]
    writer.Append(
        writer_pb2.AppendRequest(
            session_id=session_id, records=[writer_pb2.AppendRecord(message=m) for m in messages]
        )
    )
    at = ("--reader", reader_process.address)
    lines = _run("replay", session_id, "--rounds", *at)
    headers = [line for line in lines if line.startswith("==")]
    assert lines[:2] == ["[0] system", "  be brief"]
    assert lines[2].startswith(
        "== round 1: complete (a final assistant message with no open tool call), started "
    )
    assert headers[1].startswith("== round 2: pending, started ")
    assert ", tools 1/1 failed" in headers[1]
    assert ", tokens ~" in headers[1]
    assert lines.index(headers[1]) == lines.index("[3] user") - 1
    assert lines[-1] == "-- 7 messages in 2 rounds"
    assert [line for line in lines if line.startswith("[")] == [
        "[0] system",
        "[1] user",
        "[2] assistant",
        "[3] user",
        "[4] assistant",
        "[5] user",
        "[6] tool (answers c1)",
    ]
    as_json = _run("replay", session_id, "--rounds", "--json", *at)
    assert [line.startswith('{"round":') for line in as_json] == [
        False,
        True,
        False,
        False,
        True,
        False,
        False,
        False,
        False,
    ]


def test_rm_asks_first_deletes_with_yes_and_names_an_unknown_id(writer, writer_process, data_dir) -> None:
    """``rollout rm ID`` asks before deleting (a "no", or no answer, deletes nothing); --yes
    deletes and says when; again says it was already deleted; an unknown id is a one-line
    NOT_FOUND."""
    session_id = _session_with_a_call(writer)
    to_writer = ("--writer", writer_process.address)
    command = [sys.executable, "-m", "rollout_cli.main", "rm", session_id, *to_writer]
    declined = subprocess.run(command, input="n\n", capture_output=True, text=True, cwd=REPO, check=False)
    assert declined.returncode == 1
    assert f"delete session {session_id} for good?" in declined.stdout
    assert session_file(data_dir, session_id).exists()
    unanswered = subprocess.run(command, input="", capture_output=True, text=True, cwd=REPO, check=False)
    assert unanswered.returncode == 1
    assert session_file(data_dir, session_id).exists()
    confirmed = subprocess.run(command, input="y\n", capture_output=True, text=True, cwd=REPO, check=False)
    assert confirmed.returncode == 0, confirmed.stderr
    assert confirmed.stdout.endswith("Z\n")
    assert f"[y/N]: deleted {session_id} at " in confirmed.stdout
    assert not list(data_dir.rglob(f"*{session_id}*.jsonl"))
    (again,) = _run("rm", session_id, "--yes", *to_writer)
    assert again.startswith(f"{session_id}: already deleted (at ")
    assert _run("rm", UNKNOWN_ID, "-y", *to_writer, code=1) == [
        f"Error: NOT_FOUND: session '{UNKNOWN_ID}' not found"
    ]
