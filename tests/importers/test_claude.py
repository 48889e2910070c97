"""The Claude Code importer: the main chain, sub-agent runs as children, every block mapped or kept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from rollout.v1 import records_pb2
from rollout_cli.importers import ImportedSession
from rollout_cli.importers.claude import convert_claude
from shared.records import parse_timestamp
from shared.session_meta import SessionRole
from shared.stop_kinds import StopKind
from tests.conftest import CORPUS

CLAUDE = CORPUS / "claude"
SESSION = "5c0375b4-57a5-4f26-b12d-d022ee4e51b7"


def line(kind: str, uuid: str | None, parent: str | None, content: Any = None, **fields: Any) -> bytes:
    """One transcript record (a message of ``kind`` when ``content`` is given)."""
    record: dict[str, Any] = {
        "type": kind,
        "uuid": uuid,
        "parentUuid": parent,
        "isSidechain": False,
        "sessionId": SESSION,
        "timestamp": f"2025-09-07T09:00:{len(uuid or ''):02d}.5Z",
        **fields,
    }
    if content is not None:
        record["message"] = {"role": kind, "content": content, **record.pop("message", {})}
    return orjson.dumps(record)


def assistant(
    uuid: str | None, parent: str | None, message_id: str, *blocks: dict[str, Any], **fields: Any
) -> bytes:
    return line(
        "assistant", uuid, parent, list(blocks), message={"id": message_id, "model": "claude-x"}, **fields
    )


def messages(session: ImportedSession) -> list[records_pb2.ChatMessage]:
    return [r.record.message for r in session.records if r.record.WhichOneof("record") == "message"]


def events(session: ImportedSession, kind: str) -> list[dict[str, Any]]:
    from shared.wire import struct_to_python

    return [
        struct_to_python(r.record.event.body)
        for r in session.records
        if r.record.WhichOneof("record") == "event" and r.record.event.kind == kind
    ]


def test_sub_agent_runs_become_children_of_the_task_calls_that_started_them() -> None:
    """Each sidechain run whose prompt is a Task call's prompt is a child with that call's id as delegation id."""
    path = CLAUDE / "claude-code-1.0.108-b.jsonl"
    imported = convert_claude(path.read_bytes().splitlines(), path)
    main, *children = imported.sessions
    assert (main.session_id, main.role) == (SESSION, SessionRole.ROOT)
    tasks = {
        call.id: orjson.loads(call.function.arguments)
        for message in messages(main)
        for call in message.tool_calls
        if call.function.name == "Task"
    }
    assert [child.delegation_id for child in children] == [
        "toolu_014YF9TXhDRR7BnpasNJ7gjC",
        "toolu_01LKfUwrsnof18CpWZQcJH44",
    ]
    for child in children:
        assert child.role is SessionRole.CHILD
        assert child.parent is main
        assert child.agent_name == tasks[child.delegation_id]["subagent_type"]
        first = messages(child)[0]
        assert (first.role, first.text) == ("user", tasks[child.delegation_id]["prompt"])
    sidechain_lines = {
        number
        for number, raw in enumerate(path.read_bytes().splitlines(), 1)
        if orjson.loads(raw).get("isSidechain")
    }
    assert {r.line for child in children for r in child.records} == sidechain_lines
    assert not sidechain_lines & {r.line for r in main.records}


def test_a_run_with_no_matching_task_call_is_a_child_without_coordinates() -> None:
    """A sidechain-only transcript becomes a child session without coordinates, never a root, and says so."""
    path = CLAUDE / "claude-code-subagent.jsonl"
    imported = convert_claude(path.read_bytes().splitlines(), path)
    [child] = imported.sessions
    assert child.role is SessionRole.CHILD_WITHOUT_COORDINATES
    assert (child.parent, child.delegation_id) == (None, "")
    assert any("without delegation coordinates" in note for note in child.notes)


def test_records_of_one_api_message_form_one_assistant_message() -> None:
    """Five records sharing one message.id (five tool_use blocks) are one assistant message with five calls."""
    path = CLAUDE / "claude-code-1.0.98-a.jsonl"
    main = convert_claude(path.read_bytes().splitlines(), path).sessions[0]
    assistants = [m for m in messages(main) if m.role == "assistant"]
    source_ids = []
    for raw in path.read_bytes().splitlines():
        record = orjson.loads(raw)
        if record.get("type") == "assistant" and record["message"]["id"] not in source_ids:
            source_ids.append(record["message"]["id"])
    assert len(assistants) == len(source_ids)
    assert max(len(m.tool_calls) for m in assistants) == 5


def test_thinking_blocks_become_every_reasoning_block_in_order() -> None:
    """thinking (with signature) and redacted_thinking blocks of one API message are its reasoning blocks, in order."""
    lines = [
        line("user", "u1", None, "why?"),
        assistant("a1", "u1", "msg_1", {"type": "thinking", "thinking": "first", "signature": "sig1"}),
        assistant("a2", "a1", "msg_1", {"type": "redacted_thinking", "data": "opaque"}),
        assistant("a3", "a2", "msg_1", {"type": "thinking", "thinking": "third", "signature": "sig3"}),
        assistant("a4", "a3", "msg_1", {"type": "text", "text": "because"}),
    ]
    [main] = convert_claude(lines).sessions
    [answer] = [m for m in messages(main) if m.role == "assistant"]
    assert answer.text == "because"
    assert list(answer.reasoning_blocks) == [
        records_pb2.Reasoning(content="first", signature="sig1"),
        records_pb2.Reasoning(content="", encrypted="opaque"),
        records_pb2.Reasoning(content="third", signature="sig3"),
    ]
    assert main.stop_kind is StopKind.COMPLETED


def test_a_rewind_keeps_the_last_branch_as_the_conversation_and_the_other_as_events() -> None:
    """After a rewind the chain from the last record is the conversation; the abandoned branch is kept as events."""
    lines = [
        line("user", "u1", None, "first question"),
        assistant("a1", "u1", "m1", {"type": "text", "text": "first answer"}),
        line("user", "u2", "a1", "abandoned follow-up"),
        assistant("a2", "u2", "m2", {"type": "text", "text": "abandoned answer"}),
        line("user", "u3", "a1", "redone follow-up"),
        assistant("a3", "u3", "m3", {"type": "text", "text": "final answer"}),
    ]
    [main] = convert_claude(lines).sessions
    assert [m.text for m in messages(main)] == [
        "first question",
        "first answer",
        "redone follow-up",
        "final answer",
    ]
    branch = events(main, "claude.branch")
    assert [record["uuid"] for record in branch] == ["u2", "a2"]
    assert main.kept_as_event["claude.branch"] == 2
    assert any("rewind" in note for note in main.notes)


def test_a_compaction_becomes_compacted_with_the_summary_and_old_outputs_stay_events() -> None:
    """compact_boundary + the isCompactSummary record is one compacted record; a result for a pre-compaction call is kept."""
    call = {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}}
    lines = [
        line("user", "u1", None, "start"),
        assistant("a1", "u1", "m1", call),
        orjson.dumps(
            {
                "type": "system",
                "subtype": "compact_boundary",
                "uuid": "b1",
                "parentUuid": None,
                "logicalParentUuid": "a1",
                "content": "Conversation compacted",
                "timestamp": "2025-09-07T10:00:00Z",
            }
        ),
        line("user", "s1", "b1", "Summary: we listed files.", isCompactSummary=True),
        line("user", "r1", "s1", [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "late"}]),
        assistant("a2", "r1", "m2", {"type": "text", "text": "done"}),
    ]
    [main] = convert_claude(lines).sessions
    kinds = [r.record.WhichOneof("record") for r in main.records if r.record.WhichOneof("record") != "event"]
    compactions = [r.record.compacted for r in main.records if r.record.WhichOneof("record") == "compacted"]
    assert [c.summary for c in compactions] == ["Summary: we listed files."]
    assert not compactions[0].HasField("replacement_history")
    assert kinds.count("message") == 3  # start, the call, done: the summary record is the compaction itself
    assert [e["tool_use_id"] for e in events(main, "claude.orphan_tool_result")] == ["toolu_1"]


def test_tool_results_keep_is_error_parts_and_images() -> None:
    """A failed tool result keeps is_error; block content stays parts; an image in a user turn stays a part."""
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    call = {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"file_path": "/x"}}
    result = {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "is_error": True,
        "content": [{"type": "text", "text": "no such file"}],
    }
    lines = [
        line("user", "u1", None, [{"type": "text", "text": "look"}, image]),
        assistant("a1", "u1", "m1", call),
        line("user", "r1", "a1", [result]),
    ]
    [main] = convert_claude(lines).sessions
    user, call_message, output = messages(main)
    assert [part.struct_value["type"] for part in user.parts.values] == ["text", "image"]
    assert user.parts.values[1].struct_value["source"]["data"] == "iVBORw0KGgo="
    assert orjson.loads(call_message.tool_calls[0].function.arguments) == {"file_path": "/x"}
    assert (output.role, output.tool_call_id, output.is_error) == ("tool", "toolu_1", True)
    assert output.parts.values[0].struct_value["text"] == "no such file"
    assert main.stop_kind is StopKind.INTERRUPTED  # the source ended on a tool output, not an answer


@pytest.mark.parametrize("path", sorted(CLAUDE.glob("*.jsonl")), ids=lambda p: p.name)
def test_every_corpus_line_is_accounted_for_and_keeps_its_time(path: Path) -> None:
    """Each non-empty line yields a record naming it, stamped with the line's own time when it has one."""
    lines = path.read_bytes().splitlines()
    imported = convert_claude(lines, path)
    numbered = {number: raw for number, raw in enumerate(lines, 1) if raw.strip()}
    records = [r for session in imported.sessions for r in session.records]
    assert {r.line for r in records} == set(numbered)
    for source_record in records:
        stamp = orjson.loads(numbered[source_record.line]).get("timestamp")
        if stamp and source_record.record.WhichOneof("record") != "turn_context":
            assert parse_timestamp(source_record.record.ts) == parse_timestamp(stamp), source_record.line


def test_summary_lines_are_titles_kept_as_events_not_compactions() -> None:
    """A summary line (a picker title) does not change the model's view: it is a counted claude.summary event."""
    path = CLAUDE / "claude-code-small.jsonl"
    [main] = convert_claude(path.read_bytes().splitlines(), path).sessions
    assert not [r for r in main.records if r.record.WhichOneof("record") == "compacted"]
    assert [e["summary"] for e in events(main, "claude.summary")] == ["Test session for JSONL parsing"]
    assert messages(main)[0].text == "Create a hello world function"


def test_a_file_of_another_tool_is_not_recognized() -> None:
    """Lines that are no Claude Code records give no session at all."""
    imported = convert_claude([b'{"timestamp":"x","type":"session_meta","payload":{}}', b"not json"])
    assert (imported.recognized, imported.sessions) == (0, [])


def texts(session: ImportedSession) -> list[str]:
    return [m.text for m in messages(session)]


def test_records_with_null_uuids_are_the_conversation_in_file_order() -> None:
    """Records whose uuid and parentUuid are null (no tree to follow) are read in file order: every
    message is imported, none skipped, the assistant's answer ends it."""
    lines = [
        line("user", None, None, "first"),
        assistant(None, None, "m1", {"type": "text", "text": "one"}),
        line("user", None, None, "second"),
        assistant(None, None, "m2", {"type": "text", "text": "two"}),
    ]
    [main] = convert_claude(lines).sessions
    assert texts(main) == ["first", "one", "second", "two"]
    assert main.stop_kind is StopKind.COMPLETED
    assert not main.kept_as_event


def test_records_whose_parents_are_all_null_are_read_in_file_order() -> None:
    """Records with uuids but no parentUuid anywhere (no record names another) are one conversation
    in file order, not the last record alone with the others as branches."""
    lines = [
        line("user", "u1", None, "first"),
        assistant("a1", None, "m1", {"type": "text", "text": "one"}),
        line("user", "u2", None, "second"),
    ]
    [main] = convert_claude(lines).sessions
    assert texts(main) == ["first", "one", "second"]
    assert main.kept_as_event["claude.branch"] == 0


def test_a_record_whose_uuid_was_lost_is_followed_in_file_order() -> None:
    """In a tree, a record with a null uuid follows the record before it, and a record naming a uuid
    no record has (the lost one) follows the record before it: the chain goes on through both; a
    real rewind is still a branch."""
    lines = [
        line("user", "u1", None, "first"),
        assistant("a1", "u1", "m1", {"type": "text", "text": "abandoned"}),
        assistant("a2", "u1", "m2", {"type": "text", "text": "one"}),
        line("user", None, "a2", "second"),
        assistant("a3", "lost-uuid", "m3", {"type": "text", "text": "two"}),
    ]
    [main] = convert_claude(lines).sessions
    assert texts(main) == ["first", "one", "second", "two"]
    assert [record["uuid"] for record in events(main, "claude.branch")] == ["a1"]


def test_sidechain_records_without_uuids_form_one_run() -> None:
    """Sub-agent records without uuids follow each other in file order: one child session."""
    lines = [
        line("user", None, None, "sub task", isSidechain=True),
        assistant(None, None, "m1", {"type": "text", "text": "done"}, isSidechain=True),
    ]
    imported = convert_claude(lines)
    [child] = imported.sessions
    assert child.role is SessionRole.CHILD_WITHOUT_COORDINATES
    assert texts(child) == ["sub task", "done"]


def test_a_file_of_titles_only_says_it_holds_no_conversation() -> None:
    """A transcript of summary lines only gives no session and a note saying what it held."""
    imported = convert_claude([orjson.dumps({"type": "summary", "summary": "a title", "leafUuid": "x"})])
    assert imported.recognized == 1
    assert imported.sessions == []
    assert imported.notes == ["no conversation in it (lines: summary ×1); nothing imported"]


def nested(depth: int) -> object:
    """Objects nested ``depth`` deep around a string."""
    value: object = "bottom"
    for _ in range(depth):
        value = {"inner": value}
    return value


def test_a_line_nested_deeper_than_a_record_can_hold_is_kept_as_its_text_in_place() -> None:
    """A tool result whose toolUseResult nests past protobuf's limit: the line is a counted
    claude.unrepresentable_line holding its text, the file still converts, and the records after it
    stay on the conversation (the tree keeps the line)."""
    call = {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}}
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}
    deep_line = line("user", "r1", "a1", [result], toolUseResult=nested(40))
    lines = [
        line("user", "u1", None, "go"),
        assistant("a1", "u1", "m1", call),
        deep_line,
        assistant("a2", "r1", "m2", {"type": "text", "text": "done"}),
    ]
    [main] = convert_claude(lines).sessions
    assert main.kept_as_event["claude.unrepresentable_line"] == 1
    [kept] = events(main, "claude.unrepresentable_line")
    assert orjson.loads(kept["text"]) == orjson.loads(deep_line)
    assert "past the" in kept["reason"]
    assert texts(main)[-1] == "done"
    assert [r.line for r in main.records if r.record.event.kind == "claude.unrepresentable_line"] == [3]


def test_an_assistant_record_too_deep_for_a_record_leaves_its_message_whole() -> None:
    """Of three records of one API message, the too-deep middle one is kept as its text; the other
    two still form one assistant message."""
    lines = [
        line("user", "u1", None, "go"),
        assistant("a1", "u1", "m1", {"type": "text", "text": "one"}),
        assistant("a2", "a1", "m1", {"type": "text", "text": "two"}, extra=nested(40)),
        assistant("a3", "a2", "m1", {"type": "text", "text": "three"}),
    ]
    [main] = convert_claude(lines).sessions
    [answer] = [m for m in messages(main) if m.role == "assistant"]
    assert [part.struct_value["text"] for part in answer.parts.values] == ["one", "three"]
    assert main.kept_as_event["claude.unrepresentable_line"] == 1


def test_content_with_a_part_that_is_not_an_object_is_kept_as_its_json_text() -> None:
    """A user content list or a tool result content list holding a string (no part: the writer
    refuses it) becomes the list's JSON text, not parts."""
    call = {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}}
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": ["plain", {"type": "text"}]}
    lines = [
        line("user", "u1", None, ["just text", {"type": "text", "text": "x"}]),
        assistant("a1", "u1", "m1", call),
        line("user", "r1", "a1", [result]),
    ]
    [main] = convert_claude(lines).sessions
    user, _, output = messages(main)
    assert not user.HasField("parts")
    assert orjson.loads(user.text) == ["just text", {"type": "text", "text": "x"}]
    assert orjson.loads(output.text) == ["plain", {"type": "text"}]


def test_the_title_is_the_custom_title_over_the_ai_title_wherever_they_stand() -> None:
    """custom-title > ai-title > summary (issue 26): one title record ends the session; the source
    lines stay as events. Without any, no title record (the listing shows the first prompt)."""
    conversation = [
        line("user", "u1", None, "fix the upload test"),
        assistant("a1", "u1", "m1", {"type": "text", "text": "done"}),
    ]
    titles = [
        orjson.dumps({"type": "summary", "summary": "Upload test", "leafUuid": "a1"}),
        orjson.dumps({"type": "custom-title", "customTitle": "my upload fix", "sessionId": SESSION}),
        orjson.dumps({"type": "ai-title", "aiTitle": "Fixing the flaky upload test", "sessionId": SESSION}),
    ]
    [main] = convert_claude([*titles[:2], *conversation, titles[2]]).sessions
    assert events(main, "title") == [{"title": "my upload fix"}]
    assert main.records[-1].record.event.kind == "title"
    [main] = convert_claude([titles[0], *conversation, titles[2]]).sessions
    assert events(main, "title") == [{"title": "Fixing the flaky upload test"}]
    [main] = convert_claude(conversation).sessions
    assert events(main, "title") == []
