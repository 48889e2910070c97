"""Real sessions imported through the writer have the rounds their own tools recorded (ListRounds).

Every corpus file goes in through ``rollout import`` (gRPC, separate writer and reader
processes). The expected rounds are read here from each source file, independently of
the importers and of shared.rounds: a Codex turn is a ``task_started`` event with its
``turn_id`` (complete with its ``task_complete``, interrupted with ``turn_aborted`` or
none), or, in files without turn events, a ``user_message`` event (what the user typed);
a Claude Code round is a prompt (a user record that is not ``isMeta`` and holds more
than tool results), complete when the last assistant message before the next prompt
asks for no tool.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rollout.v1 import reader_pb2, reader_pb2_grpc
from tests.conftest import CORPUS, run_rollout, start_service

CODEX_FILES = sorted((CORPUS / "codex").glob("*.jsonl"))
CLAUDE_FILES = sorted((CORPUS / "claude").glob("*.jsonl"))


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in path.read_text(encoding="utf-8").splitlines() if raw.strip()]


def expected_codex_rounds(path: Path) -> list[dict[str, Any]]:
    """(turn id, status, tool calls, output tokens) of each round of a Codex rollout."""
    lines = _lines(path)
    starts = [i for i, line in enumerate(lines) if (line.get("payload") or {}).get("type") == "task_started"]
    if not starts:
        starts = [
            i for i, line in enumerate(lines) if (line.get("payload") or {}).get("type") == "user_message"
        ]
    rounds = []
    last_total = 0
    for number, start in enumerate(starts):
        end = starts[number + 1] if number + 1 < len(starts) else len(lines)
        turn = lines[start:end]
        payloads = [line.get("payload") or {} for line in turn]
        kinds = [payload.get("type") for payload in payloads]
        if "task_complete" in kinds:
            status = "complete"
        elif "turn_aborted" in kinds:
            status = "interrupted"
        elif "task_started" in kinds:
            status = "interrupted"  # a turn without its end, in a session that stopped
        else:  # an older file: the answer is an assistant message last, with every call answered
            items = [p for line, p in zip(turn, payloads, strict=True) if line.get("type") == "response_item"]
            calls = {p["call_id"] for p in items if p.get("type") in ("function_call", "custom_tool_call")}
            outputs = {p["call_id"] for p in items if str(p.get("type")).endswith("_call_output")}
            last = items[-1] if items else {}
            answered = last.get("type") == "message" and last.get("role") == "assistant"
            status = "complete" if answered and calls <= outputs else "interrupted"
        totals = [
            p["info"]["total_token_usage"]["output_tokens"]
            for p in payloads
            if p.get("type") == "token_count" and p.get("info")
        ]
        output_tokens = totals[-1] - last_total if totals else None
        last_total = totals[-1] if totals else last_total
        rounds.append(
            {
                "turn_id": str(payloads[0].get("turn_id") or "") if kinds[0] == "task_started" else "",
                "status": status,
                "tool_calls": sum(p.get("type") in ("function_call", "custom_tool_call") for p in payloads),
                "output_tokens": output_tokens,
            }
        )
    return rounds


def _is_prompt(record: dict[str, Any]) -> bool:
    if record.get("type") != "user" or record.get("isMeta") or record.get("isCompactSummary"):
        return False
    content = (record.get("message") or {}).get("content")
    return isinstance(content, str) or any(
        isinstance(block, dict) and block.get("type") != "tool_result" for block in content or []
    )


def expected_claude_rounds(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """(status, tool calls, tool failures, (input, output) tokens) of each prompt of one Claude Code
    conversation: tokens from each API message's last usage (input with both cache counters),
    None without any."""
    starts = [i for i, record in enumerate(records) if _is_prompt(record)]
    rounds = []
    for number, start in enumerate(starts):
        part = records[start : starts[number + 1] if number + 1 < len(starts) else len(records)]
        blocks = [
            (record["type"], block)
            for record in part
            for block in ((record.get("message") or {}).get("content") or [])
            if isinstance(block, dict)
        ]
        assistants = [record for record in part if record.get("type") == "assistant"]
        last_id = (assistants[-1].get("message") or {}).get("id") if assistants else None
        last_message = [r for r in assistants if (r.get("message") or {}).get("id") == last_id] or assistants[
            -1:
        ]
        asks_tool = any(
            isinstance(block, dict) and block.get("type") == "tool_use"
            for record in last_message
            for block in (record["message"].get("content") or [])
        )
        usage: dict[str, tuple[int, int]] = {}  # the last usage of each API message, once
        for record in assistants:
            message = record.get("message") or {}
            if isinstance(message.get("usage"), dict):
                used = message["usage"]
                read = sum(
                    used.get(name, 0)
                    for name in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
                )
                usage[message.get("id") or str(len(usage))] = (read, used.get("output_tokens", 0))
        rounds.append(
            {
                "tokens": (sum(i for i, _ in usage.values()), sum(o for _, o in usage.values()))
                if usage
                else None,
                "status": "complete" if assistants and not asks_tool else "interrupted",
                "tool_calls": len(
                    {b["id"] for kind, b in blocks if kind == "assistant" and b.get("type") == "tool_use"}
                ),
                "tool_failures": sum(
                    1
                    for kind, b in blocks
                    if kind == "user" and b.get("type") == "tool_result" and b.get("is_error")
                ),
            }
        )
    return rounds


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> Iterator[tuple[reader_pb2_grpc.RolloutReaderStub, dict[str, list[dict]]]]:
    """Both corpora imported into one writer; the reader's stub and each file's session reports."""
    import grpc

    data = tmp_path_factory.mktemp("rounds") / "data"
    data.mkdir()
    writer, reader = start_service("writer", data), start_service("reader", data)
    try:
        sessions: dict[str, list[dict]] = {}
        for tool, files in (("codex", CODEX_FILES), ("claude", CLAUDE_FILES)):
            result = run_rollout(
                "import", tool, "--json", "--writer", writer.address, *map(str, files), timeout=180
            )
            assert result.returncode == 0, result.stderr
            for report in map(json.loads, result.stdout.splitlines()):
                assert report["status"] == "imported", report
                sessions[Path(report["file"]).name] = report["sessions"]
        sessions["addresses"] = [{"writer": writer.address, "reader": reader.address}]
        with grpc.insecure_channel(reader.address) as channel:
            yield reader_pb2_grpc.RolloutReaderStub(channel), sessions
    finally:
        reader.stop()
        writer.stop()


def list_rounds(stub: reader_pb2_grpc.RolloutReaderStub, session_id: str) -> list[reader_pb2.Round]:
    found: list[reader_pb2.Round] = []
    token = ""
    while True:
        page = stub.ListRounds(
            reader_pb2.ListRoundsRequest(session_id=session_id, page_size=2, page_token=token)
        )
        found.extend(page.rounds)
        assert page.total >= len(found)
        token = page.next_page_token
        if not token:
            return found


def test_the_corpus_is_present() -> None:
    assert len(CODEX_FILES) == 4
    assert len(CLAUDE_FILES) == 4


@pytest.mark.parametrize("path", CODEX_FILES, ids=lambda p: p.name)
def test_codex_rounds_are_its_turns(imported, path: Path) -> None:
    """real-2025-09-vscode: 1 round (no turn events, one user_message), complete; desktop-small and
    exec: 1 turn each, complete; synthetic-modern-demo: 3 turns, the last without task_complete."""
    stub, sessions = imported
    (session,) = sessions[path.name]
    rounds = list_rounds(stub, session["session_id"])
    expected = expected_codex_rounds(path)
    assert expected, "the independent parse found no turn"
    assert [(r.turn_id, r.status, r.tool_calls) for r in rounds] == [
        (e["turn_id"], e["status"], e["tool_calls"]) for e in expected
    ]
    for found, wanted in zip(rounds, expected, strict=True):
        if wanted["output_tokens"] is None:
            assert found.tokens_estimated
        else:
            assert not found.tokens_estimated
            assert found.output_tokens == wanted["output_tokens"]
        assert found.tool_failures == 0
        assert found.started_at <= found.ended_at
    assert [r.number for r in rounds] == list(range(1, len(rounds) + 1))
    assert len({r.round_id for r in rounds}) == len(rounds)


def test_codex_turn_counts_are_the_files_own() -> None:
    """The expected rounds, spelled out per file (what the independent parse must find)."""
    found = {path.name: [e["status"] for e in expected_codex_rounds(path)] for path in CODEX_FILES}
    assert found == {
        "real-2025-09-vscode.jsonl": ["complete"],
        "real-2026-02-desktop-small-redacted.jsonl": ["complete"],
        "real-2026-06-exec-redacted.jsonl": ["complete"],
        "synthetic-2026-modern-demo.jsonl": ["complete", "complete", "interrupted"],
    }


@pytest.mark.parametrize("path", CLAUDE_FILES, ids=lambda p: p.name)
def test_claude_rounds_are_its_prompts(imported, path: Path) -> None:
    """Each imported session (the conversation, and each sub-agent run as a child session) has one
    round per prompt of its records; tool results never start one."""
    stub, sessions = imported
    records = [record for record in _lines(path) if record.get("type") in ("user", "assistant")]
    main = [record for record in records if not record.get("isSidechain")]
    runs: list[list[dict[str, Any]]] = []
    for record in records:
        if record.get("isSidechain"):
            if not record.get("parentUuid"):
                runs.append([])
            runs[-1].append(record)
    reports = sessions[path.name]
    roots = [report for report in reports if report["role"] == "root"]
    children = [report for report in reports if report["role"] != "root"]
    assert len(roots) == (1 if main else 0)
    assert len(children) == len(runs)
    for report, conversation in [*zip(roots, [main], strict=False), *zip(children, runs, strict=True)]:
        rounds = list_rounds(stub, report["session_id"])
        expected = expected_claude_rounds(conversation)
        assert expected
        assert [(r.status, r.tool_calls, r.tool_failures) for r in rounds] == [
            (e["status"], e["tool_calls"], e["tool_failures"]) for e in expected
        ]
        for found, wanted in zip(rounds, expected, strict=True):
            if wanted["tokens"] is None:
                assert found.tokens_estimated
            else:  # Claude Code's own per-message usage, not the bytes/4 estimate
                assert not found.tokens_estimated
                assert (found.input_tokens, found.output_tokens) == wanted["tokens"]


def test_claude_prompt_counts_are_the_files_own() -> None:
    found = {
        path.name: [
            e["status"]
            for e in expected_claude_rounds(
                [
                    r
                    for r in _lines(path)
                    if r.get("type") in ("user", "assistant") and not r.get("isSidechain")
                ]
            )
        ]
        for path in CLAUDE_FILES
    }
    assert found == {
        "claude-code-1.0.108-b.jsonl": ["complete"],
        "claude-code-1.0.98-a.jsonl": ["complete"],
        "claude-code-small.jsonl": ["interrupted", "complete"],
        "claude-code-subagent.jsonl": [],
    }


def test_get_round_returns_its_records_in_seq_order(imported) -> None:
    stub, sessions = imported
    (session,) = sessions["synthetic-2026-modern-demo.jsonl"]
    rounds = list_rounds(stub, session["session_id"])
    got = stub.GetRound(
        reader_pb2.GetRoundRequest(session_id=session["session_id"], round_id=rounds[1].round_id)
    )
    assert got.round == rounds[1]
    seqs = [record.seq for record in got.records]
    assert seqs == list(range(rounds[1].start_seq, rounds[1].end_seq + 1))
    first = json.loads(got.records[0].line)
    assert first["payload"] == {"kind": "task_started", "body": first["payload"]["body"]}
    assert any(json.loads(r.line)["payload"].get("kind") == "task_complete" for r in got.records)


def test_unknown_rounds_and_bad_requests_have_precise_statuses(imported) -> None:
    import grpc

    stub, sessions = imported
    (session,) = sessions["real-2026-06-exec-redacted.jsonl"]
    with pytest.raises(grpc.RpcError) as missing:
        stub.GetRound(
            reader_pb2.GetRoundRequest(
                session_id=session["session_id"], round_id="01900000-0000-8000-8000-000000000000"
            )
        )
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND
    assert "round" in missing.value.details()
    for request in (
        reader_pb2.ListRoundsRequest(session_id=session["session_id"], page_size=1001),
        reader_pb2.ListRoundsRequest(session_id=session["session_id"], page_token="nonsense"),
        reader_pb2.ListRoundsRequest(session_id="not-a-session"),
    ):
        with pytest.raises(grpc.RpcError) as bad:
            stub.ListRounds(request)
        assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT, request
    with pytest.raises(grpc.RpcError) as unknown:
        stub.ListRounds(reader_pb2.ListRoundsRequest(session_id="01900000-0000-7000-8000-00000000dead"))
    assert unknown.value.code() == grpc.StatusCode.NOT_FOUND


def test_the_sdk_and_the_cli_show_the_same_rounds(imported) -> None:
    """session.rounds() gives ListRounds' rounds; `rollout rounds ID` prints one row per round."""
    from rollout_client import RolloutClient
    from shared.wire import round_from_proto

    stub, sessions = imported
    (addresses,) = sessions["addresses"]
    (session,) = sessions["synthetic-2026-modern-demo.jsonl"]
    listed = [round_from_proto(r) for r in list_rounds(stub, session["session_id"])]
    with RolloutClient(addresses["writer"], addresses["reader"]) as client:
        assert client.session(session["session_id"]).rounds() == listed
    result = run_rollout("rounds", session["session_id"], "--reader", addresses["reader"])
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split()[:4] == ["#", "STATUS", "STARTED", "DURATION"]
    rows = [line.split() for line in lines[1:]]
    assert [(row[0], row[1]) for row in rows] == [(str(r.number), r.status.value) for r in listed]
    for row, found in zip(lines[1:], listed, strict=True):
        assert f"{found.tool_calls}/{found.tool_failures}" in row
        assert found.question.splitlines()[0][:8] in row  # cut to the width left
