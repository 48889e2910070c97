"""Real Codex sessions go in through the writer and come back out of the reader exactly.

The writer and the reader run as separate processes on free ports; the import
runs through the ``rollout import codex`` command (gRPC only). The expected
sequence is an independent parse of each source file done here, not by the
importer's code.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rollout.v1 import reader_pb2
from shared.records import parse_timestamp
from tests.conftest import CORPUS, run_rollout
from tests.data_roots import session_file as locate_file

CODEX_FILES = sorted((CORPUS / "codex").glob("*.jsonl"))


def _parts_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(part.get("text", f"[{part.get('type')}]") for part in content)


def expected_messages(path: Path) -> list[dict[str, Any]]:
    """The model-visible sequence of a Codex rollout, parsed independently of the importer."""
    expected: list[dict[str, Any]] = []
    reasoning: list[dict[str, Any]] = []  # every reasoning item since the last assistant step
    lines = [json.loads(raw) for raw in path.read_text(encoding="utf-8").splitlines() if raw.strip()]
    # The newest layout has what the user typed only in item_completed events; older ones also
    # write it as a user response item of the same turn (turns start at task_started).
    turn, typed_as_items = 0, set()
    for line in lines:
        payload = line.get("payload") or {}
        turn += payload.get("type") == "task_started"
        if line.get("type") == "response_item" and payload.get("role") == "user":
            typed_as_items.add((turn, _parts_text(payload["content"]).strip()))
    turn = 0
    for line in lines:
        payload = line.get("payload") or {}
        turn += payload.get("type") == "task_started"
        if payload.get("type") == "item_completed" and payload["item"]["type"] == "UserMessage":
            text = _parts_text(payload["item"]["content"])
            if (turn, text.strip()) not in typed_as_items:
                expected.append({"role": "user", "text": text})
            continue
        if line.get("type") != "response_item":
            continue
        item = line["payload"]
        kind = item["type"]
        if kind == "reasoning":
            reasoning.append(
                {
                    "content": "\n\n".join(part["text"] for part in item.get("summary") or []),
                    "encrypted": item.get("encrypted_content"),
                }
            )
            continue
        if kind == "message":
            entry: dict[str, Any] = {"role": item["role"], "text": _parts_text(item["content"])}
        elif kind in ("function_call", "custom_tool_call"):
            arguments = item["arguments"] if kind == "function_call" else item["input"]
            entry = {"role": "assistant", "text": "", "calls": [(item["call_id"], item["name"], arguments)]}
        elif kind in ("function_call_output", "custom_tool_call_output"):
            entry = {"role": "tool", "text": _parts_text(item["output"]), "answers": item["call_id"]}
        else:
            continue
        if entry["role"] == "assistant" and reasoning:
            entry["reasoning"] = reasoning
            reasoning = []
        expected.append(entry)
    return expected


def replayed_messages(response: reader_pb2.ReplayResponse) -> list[dict[str, Any]]:
    """The same view of what the reader returned."""
    found: list[dict[str, Any]] = []
    for message in response.messages:
        kind = message.WhichOneof("content")
        if kind == "text":
            text = message.text
        elif kind == "parts":
            text = "\n".join(
                part.struct_value["text"] if "text" in part.struct_value else f"[{part.struct_value['type']}]"
                for part in message.parts.values
            )
        else:
            text = ""
        entry: dict[str, Any] = {"role": message.role, "text": text}
        if message.tool_calls:
            entry["calls"] = [(c.id, c.function.name, c.function.arguments) for c in message.tool_calls]
        if message.HasField("tool_call_id"):
            entry["answers"] = message.tool_call_id
        blocks = list(message.reasoning_blocks) or (
            [message.reasoning] if message.HasField("reasoning") else []
        )
        if blocks:
            entry["reasoning"] = [
                {
                    "content": block.content,
                    "encrypted": block.encrypted if block.HasField("encrypted") else None,
                }
                for block in blocks
            ]
        found.append(entry)
    return found


def source_session_id(path: Path) -> str:
    first = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
    return str(first["payload"]["id"])


@pytest.fixture
def imported(writer_process, reader):
    """Every corpus Codex file imported through ``rollout import codex``."""
    result = run_rollout(
        "import", "codex", "--json", "--writer", writer_process.address, *map(str, CODEX_FILES), timeout=120
    )
    assert result.returncode == 0, result.stderr
    reports = [json.loads(line) for line in result.stdout.splitlines()]
    assert [report["status"] for report in reports] == ["imported"] * len(CODEX_FILES), result.stdout
    return reader


def test_corpus_is_present() -> None:
    """The corpus holds the four Codex sessions this suite replays."""
    assert len(CODEX_FILES) == 4


@pytest.mark.parametrize("path", CODEX_FILES, ids=lambda p: p.name)
def test_replay_equals_independent_parse(imported, path: Path) -> None:
    """Replay returns roles, text, tool calls, outputs and reasoning exactly as the source had them."""
    response = imported.GetReplay(reader_pb2.ReplayRequest(session_id=source_session_id(path)))
    expected = expected_messages(path)
    assert expected, "the independent parse found no messages"
    assert replayed_messages(response) == expected


@pytest.mark.parametrize("path", CODEX_FILES, ids=lambda p: p.name)
def test_checkpoint_verifies_and_stop_facts_are_found(imported, path: Path) -> None:
    """The checkpoint written at Stop matches the reader's recomputed digest; stop facts are in the tail."""
    session_id = source_session_id(path)
    response = imported.GetReplay(reader_pb2.ReplayRequest(session_id=session_id))
    assert response.digest_status == reader_pb2.DIGEST_STATUS_VERIFIED
    assert response.last_checkpoint.digest == response.computed_digest
    assert response.last_checkpoint.message_count == len(response.messages)
    facts = imported.GetStopFacts(reader_pb2.StopFactsRequest(session_id=session_id))
    assert facts.found
    assert facts.has_stop_record
    assert facts.checkpoint.digest == response.computed_digest
    assert facts.stop_kind in {"completed", "interrupted", "cancelled"}


def with_a_second_reasoning_item(source: Path, target: Path) -> int:
    """Copy ``source`` to ``target`` with a second reasoning item after each one (Codex's several-item turns).

    Returns how many were added. The source file itself is never changed.
    """
    added = 0
    out = []
    for raw in source.read_text(encoding="utf-8").splitlines():
        out.append(raw)
        line = json.loads(raw) if raw.strip() else {}
        if line.get("type") == "response_item" and line["payload"].get("type") == "reasoning":
            extra = {
                **line["payload"],
                "summary": [{"type": "summary_text", "text": f"second thought {added}"}],
            }
            extra["encrypted_content"] = f"gAAAA-second-{added}"
            out.append(json.dumps({**line, "payload": extra}))
            added += 1
    target.write_text("\n".join(out) + "\n", encoding="utf-8")
    return added


def test_a_turn_with_several_reasoning_items_replays_every_one(writer_process, reader, tmp_path) -> None:
    """A Codex file whose turns hold two reasoning items each imports and replays both, in order."""
    source = CORPUS / "codex" / "real-2025-09-vscode.jsonl"
    copy = tmp_path / "rollout-several-reasoning.jsonl"
    assert with_a_second_reasoning_item(source, copy) > 0
    result = run_rollout(
        "import", "codex", "--json", "--writer", writer_process.address, str(copy), timeout=120
    )
    assert result.returncode == 0, result.stderr
    response = reader.GetReplay(reader_pb2.ReplayRequest(session_id=source_session_id(source)))
    expected = expected_messages(copy)
    assert sum(len(m.get("reasoning", [])) == 2 for m in expected) > 0
    assert replayed_messages(response) == expected
    assert response.digest_status == reader_pb2.DIGEST_STATUS_VERIFIED
    assert not [entry for entry in response.degraded if entry.kind == "dangling_reasoning"]


@pytest.mark.parametrize("path", CODEX_FILES, ids=lambda p: p.name)
def test_imported_record_times_are_the_sources(imported, data_dir, path: Path) -> None:
    """Every stored record carries the time of a source line, from the first line's time to the last's."""
    source_times = {
        parse_timestamp(line["timestamp"])
        for line in map(json.loads, path.read_text(encoding="utf-8").splitlines())
        if "timestamp" in line
    }
    session_file = locate_file(data_dir, source_session_id(path))
    stored = {parse_timestamp(json.loads(raw)["ts"]) for raw in session_file.read_text().splitlines()[1:]}
    assert stored <= source_times
    assert (min(stored), max(stored)) == (min(source_times), max(source_times))


def test_listing_shows_every_session_newest_first_in_pages_of_two(imported) -> None:
    """ListSessions pages through every imported session, newest first, each exactly once."""
    seen: list[reader_pb2.SessionSummary] = []
    token = ""
    pages = 0
    while True:
        page = imported.ListSessions(reader_pb2.ListSessionsRequest(page_size=2, page_token=token))
        assert len(page.sessions) <= 2
        seen.extend(page.sessions)
        pages += 1
        token = page.next_page_token
        if not token:
            break
    ids = [summary.session_id for summary in seen]
    assert sorted(ids) == sorted(source_session_id(path) for path in CODEX_FILES)
    assert len(set(ids)) == len(ids)
    assert pages == 2
    created = [summary.created_at for summary in seen]
    assert created == sorted(created, reverse=True)
    assert all(summary.stop_facts.found for summary in seen)


def test_a_codex_thread_named_in_its_file_and_its_home_s_index_lists_with_the_newest_name(
    writer_process, reader, tmp_path
) -> None:
    """No corpus file names its thread, so one is given names of the shape Codex documents: a
    ``thread_name_updated`` line in the file, and a newer name in ``session_index.jsonl`` of the
    Codex home it is imported from (``rollout import codex <home>/sessions``). The listing shows
    the newest name."""
    source = CORPUS / "codex" / "real-2026-06-exec-redacted.jsonl"
    thread = source_session_id(source)
    home = tmp_path / "codex-home"
    day = home / "sessions" / "2026" / "06" / "05"
    day.mkdir(parents=True)
    renamed = {
        "timestamp": "2026-06-05T04:59:00.000Z",
        "type": "event_msg",
        "payload": {"type": "thread_name_updated", "thread_id": thread, "thread_name": "exec probe"},
    }
    text = source.read_text(encoding="utf-8")
    (day / f"rollout-{thread}.jsonl").write_text(text + json.dumps(renamed) + "\n", encoding="utf-8")
    index = {"id": thread, "thread_name": "Release follow-up", "updated_at": "2026-06-05T05:30:00Z"}
    (home / "session_index.jsonl").write_text(json.dumps(index) + "\n", encoding="utf-8")
    result = run_rollout(
        "import", "codex", "--json", "--writer", writer_process.address, str(home / "sessions"), timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert [json.loads(line)["status"] for line in result.stdout.splitlines()] == ["imported"]
    listed = reader.ListSessions(reader_pb2.ListSessionsRequest(page_size=100))
    (summary,) = [s for s in listed.sessions if s.session_id == thread]
    assert summary.title == "Release follow-up"
