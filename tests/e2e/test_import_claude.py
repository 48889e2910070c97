"""Real Claude Code transcripts go in through ``rollout import claude`` and come back out of the reader exactly.

The expected sequence is an independent reading of each source file done here:
the conversation is followed from the last main-line record back through
``parentUuid``, records of one API message are merged by ``message.id``, and
sidechain runs are matched to Task calls by their prompt. None of the
importer's code is used for it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from rollout.v1 import reader_pb2
from shared.records import parse_timestamp
from tests.conftest import CORPUS, run_rollout
from tests.data_roots import session_file

CLAUDE_FILES = sorted((CORPUS / "claude").glob("*.jsonl"))


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in path.read_text(encoding="utf-8").splitlines() if raw.strip()]


def _conversation(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The user and assistant records of the main line's chain ending at its last message, in file order."""
    main = [r for r in records if not r.get("isSidechain") and r.get("type") in ("user", "assistant")]
    if not any("parentUuid" in record for record in main):
        return main
    by_uuid = {r["uuid"]: r for r in records if "uuid" in r}
    chain_ids = set()
    current: dict[str, Any] | None = main[-1]
    while current is not None:
        chain_ids.add(current["uuid"])
        current = by_uuid.get(current.get("parentUuid") or "")
    return [r for r in main if r["uuid"] in chain_ids]


def expected_messages(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Role, text, calls (id, name, input), outputs (call id, text, is_error) and thinking of each message."""
    expected: list[dict[str, Any]] = []
    for record in records:
        message = record["message"]
        content = message["content"]
        if record["type"] == "assistant":
            if message.get("id") and expected and expected[-1].get("api_id") == message["id"]:
                entry = expected[-1]
            else:
                entry = {
                    "role": "assistant",
                    "api_id": message.get("id"),
                    "text": [],
                    "calls": [],
                    "thinking": [],
                }
                expected.append(entry)
            for block in content:
                if block["type"] == "text":
                    entry["text"].append(block["text"])
                elif block["type"] == "tool_use":
                    entry["calls"].append((block["id"], block["name"], block["input"]))
                elif block["type"] == "thinking":
                    entry["thinking"].append((block["thinking"], block.get("signature")))
            continue
        if isinstance(content, str):
            expected.append({"role": "user", "text": [content]})
            continue
        for block in content:
            if block["type"] == "tool_result":
                result = block["content"]
                text = result if isinstance(result, str) else "\n".join(p["text"] for p in result)
                expected.append(
                    {
                        "role": "tool",
                        "answers": block["tool_use_id"],
                        "text": [text],
                        "is_error": bool(block.get("is_error")),
                    }
                )
        rest = [block for block in content if block["type"] != "tool_result"]
        if rest:
            expected.append({"role": "user", "text": [b["text"] for b in rest if b["type"] == "text"]})
    for entry in expected:
        entry.pop("api_id", None)
    return expected


def replayed_messages(response: reader_pb2.ReplayResponse) -> list[dict[str, Any]]:
    """The same view of what the reader returned."""
    found: list[dict[str, Any]] = []
    for message in response.messages:
        kind = message.WhichOneof("content")
        if kind == "text":
            texts = [message.text]
        elif kind == "parts":
            texts = [
                part.struct_value["text"] for part in message.parts.values if "text" in part.struct_value
            ]
        else:
            texts = []
        entry: dict[str, Any] = {"role": message.role, "text": texts}
        if message.role == "assistant":
            entry["calls"] = [
                (call.id, call.function.name, orjson.loads(call.function.arguments))
                for call in message.tool_calls
            ]
            blocks = list(message.reasoning_blocks) or (
                [message.reasoning] if message.HasField("reasoning") else []
            )
            entry["thinking"] = [
                (b.content, b.signature if b.HasField("signature") else None) for b in blocks
            ]
        if message.role == "tool":
            entry["answers"] = message.tool_call_id
            entry["is_error"] = message.is_error
            if kind == "parts":
                entry["text"] = ["\n".join(entry["text"])]
        found.append(entry)
    return found


@pytest.fixture
def imported(writer_process, reader):
    """Every corpus Claude Code file imported through ``rollout import claude --json``."""
    result = run_rollout(
        "import", "claude", "--json", "--writer", writer_process.address, str(CORPUS / "claude"), timeout=120
    )
    assert result.returncode == 0, result.stderr
    reports = {Path(report["file"]).name: report for report in map(json.loads, result.stdout.splitlines())}
    assert set(reports) == {path.name for path in CLAUDE_FILES}
    return reader, reports


@pytest.mark.parametrize("path", CLAUDE_FILES, ids=lambda p: p.name)
def test_replay_equals_an_independent_reading_of_the_source(imported, path: Path) -> None:
    """Each session's replay holds the source conversation's messages, calls, outputs and thinking exactly."""
    reader, reports = imported
    records = _records(path)
    sessions = reports[path.name]["sessions"]
    conversation = _conversation(records)
    if not conversation:  # a transcript of sub-agent runs only: see the test of runs without a Task call
        assert [session["role"] for session in sessions] == ["child_without_coordinates"]
        return
    root = sessions[0]
    assert root["role"] == "root"
    response = reader.GetReplay(reader_pb2.ReplayRequest(session_id=root["session_id"]))
    assert replayed_messages(response) == expected_messages(conversation)
    assert response.digest_status == reader_pb2.DIGEST_STATUS_VERIFIED


def test_each_sub_agent_run_is_a_child_found_from_its_parents_task_call(imported) -> None:
    """The two runs of the 1.0.108 transcript are children of its session, found both ways by the Task call ids."""
    reader, reports = imported
    path = CORPUS / "claude" / "claude-code-1.0.108-b.jsonl"
    records = _records(path)
    prompts = {
        block["input"]["prompt"]: block["id"]
        for record in records
        if record.get("type") == "assistant" and not record.get("isSidechain")
        for block in record["message"]["content"]
        if block.get("type") == "tool_use" and block["name"] == "Task" and "prompt" in block["input"]
    }
    run_prompts = [
        r["message"]["content"] for r in records if r.get("isSidechain") and r.get("parentUuid") is None
    ]
    parent = reports[path.name]["sessions"][0]["session_id"]
    found = reader.FindDelegations(reader_pb2.FindDelegationsRequest(parent_session_id=parent)).delegations
    assert sorted(link.delegation_id for link in found) == sorted(prompts[p] for p in run_prompts)
    for link in found:
        (back,) = reader.FindDelegations(
            reader_pb2.FindDelegationsRequest(child_session_id=link.child_session_id)
        ).delegations
        assert (back.parent_session_id, back.delegation_id) == (parent, link.delegation_id)
        child = reader.GetReplay(reader_pb2.ReplayRequest(session_id=link.child_session_id))
        assert child.messages[0].text == next(p for p, call in prompts.items() if call == link.delegation_id)


def test_a_run_without_its_task_call_is_a_child_without_coordinates(imported) -> None:
    """The sidechain-only transcript is a child session without coordinates: never a root, never resumable."""
    reader, reports = imported
    [child] = reports["claude-code-subagent.jsonl"]["sessions"]
    assert child["role"] == "child_without_coordinates"
    facts = reader.GetStopFacts(reader_pb2.StopFactsRequest(session_id=child["session_id"]))
    assert not facts.resume.replayable
    assert "no delegation coordinates" in facts.resume.reason


def test_imported_record_times_are_the_sources(imported, data_dir) -> None:
    """Every record of an imported session carries the time of the source line it came from."""
    _, reports = imported
    path = CORPUS / "claude" / "claude-code-1.0.98-a.jsonl"
    source_times = {parse_timestamp(r["timestamp"]) for r in _records(path) if "timestamp" in r}
    session_id = reports[path.name]["sessions"][0]["session_id"]
    path = session_file(data_dir, session_id)
    stored = [orjson.loads(raw) for raw in path.read_bytes().splitlines()]
    times = {parse_timestamp(record["ts"]) for record in stored[1:]}
    assert times <= source_times
    assert min(times) == min(source_times)
    assert max(times) == max(source_times)


def test_importing_again_skips_every_session(imported, writer_process) -> None:
    """A second import of the same folder writes nothing and says skipped."""
    result = run_rollout(
        "import", "claude", "--json", "--writer", writer_process.address, str(CORPUS / "claude"), timeout=120
    )
    assert result.returncode == 0, result.stderr
    statuses = {json.loads(line)["status"] for line in result.stdout.splitlines()}
    assert statuses == {"skipped"}
