"""The Codex importer: every source line is mapped or kept as a counted event; the stop kind follows the ending."""

from __future__ import annotations

import errno
import uuid

import orjson
import pytest

from rollout_cli.importers.codex import convert_codex
from shared.records import parse_timestamp
from shared.stop_kinds import StopKind
from tests.conftest import CORPUS


def envelope(kind: str, payload: dict) -> bytes:
    return orjson.dumps({"timestamp": "2026-01-01T00:00:00Z", "type": kind, "payload": payload})


META = envelope(
    "session_meta", {"id": "01900000-0000-7000-8000-000000000001", "timestamp": "2026-01-01T00:00:00Z"}
)
USER = envelope(
    "response_item", {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
)


@pytest.mark.parametrize(
    ("ending", "kind"),
    [
        (
            [
                envelope("event_msg", {"type": "task_started"}),
                envelope("event_msg", {"type": "task_complete"}),
            ],
            StopKind.COMPLETED,
        ),
        (
            [
                envelope("event_msg", {"type": "task_started"}),
                envelope("event_msg", {"type": "turn_aborted"}),
            ],
            StopKind.CANCELLED,
        ),
        ([envelope("event_msg", {"type": "task_started"})], StopKind.INTERRUPTED),
        (
            [
                envelope(
                    "response_item",
                    {"type": "function_call", "name": "sh", "arguments": "{}", "call_id": "c"},
                )
            ],
            StopKind.INTERRUPTED,
        ),
        (
            [envelope("response_item", {"type": "message", "role": "assistant", "content": []})],
            StopKind.COMPLETED,
        ),
    ],
)
def test_the_stop_kind_follows_how_the_source_ended(ending, kind) -> None:
    """task_complete -> completed, turn_aborted -> cancelled, an unfinished turn -> interrupted."""
    assert convert_codex([META, USER, *ending]).sessions[0].stop_kind is kind


def test_unmapped_items_are_kept_as_counted_events_never_dropped() -> None:
    """An unknown item type, an orphan output and a broken line each become a codex.* event and are counted."""
    lines = [
        META,
        USER,
        envelope("response_item", {"type": "web_search_call", "query": "x"}),
        envelope("response_item", {"type": "function_call_output", "call_id": "nobody", "output": "x"}),
        b"{not json",
    ]
    session = convert_codex(lines).sessions[0]
    assert dict(session.kept_as_event) == {
        "codex.web_search_call": 1,
        "codex.orphan_output": 1,
        "codex.unparseable_line": 1,
    }
    kinds = [r.record.event.kind for r in session.records if r.record.WhichOneof("record") == "event"]
    assert kinds.count("codex.web_search_call") == 1
    assert session.session_id == "01900000-0000-7000-8000-000000000001"


@pytest.mark.parametrize("path", sorted((CORPUS / "codex").glob("*.jsonl")), ids=lambda p: p.name)
def test_every_corpus_line_is_accounted_for_and_keeps_its_time(path) -> None:
    """Each non-empty line of a real session yields a record naming that line, stamped with the line's time."""
    lines = path.read_bytes().splitlines()
    imported = convert_codex(lines, path)
    [session] = imported.sessions
    numbered = {number: raw for number, raw in enumerate(lines, 1) if raw.strip()}
    assert imported.recognized == len(numbered)
    assert {r.line for r in session.records} == set(numbered)
    for source_record in session.records:
        stamp = orjson.loads(numbered[source_record.line]).get("timestamp")
        if stamp:
            expected = parse_timestamp(stamp)
            assert parse_timestamp(source_record.record.ts) == expected, source_record.line


def test_a_file_without_a_session_id_gets_the_same_derived_id_every_time() -> None:
    """A bare file with no usable id is named by its content, so importing it again finds it."""
    lines = [envelope("response_item", {"type": "message", "role": "user", "content": "hi"})]
    first = convert_codex(lines).sessions[0].session_id
    assert first == convert_codex(list(lines)).sessions[0].session_id
    assert first != convert_codex([*lines, USER]).sessions[0].session_id
    assert uuid.UUID(first).version == 5


def test_several_reasoning_items_before_one_call_are_all_kept_in_order() -> None:
    """Two reasoning items then a call: both become reasoning records, in order, before the call."""
    reasoning = [
        envelope(
            "response_item",
            {
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": t}],
                "encrypted_content": f"enc-{t}",
            },
        )
        for t in ("one", "two")
    ]
    call = envelope(
        "response_item", {"type": "function_call", "name": "sh", "arguments": "{}", "call_id": "c"}
    )
    session = convert_codex([META, USER, *reasoning, call]).sessions[0]
    kinds = [r.record.WhichOneof("record") for r in session.records]
    first = kinds.index("reasoning")
    assert kinds[first : first + 3] == ["reasoning", "reasoning", "message"]
    assert [session.records[first + i].record.reasoning.encrypted for i in (0, 1)] == ["enc-one", "enc-two"]


def _typed(text: str) -> bytes:
    item = {"type": "UserMessage", "id": "item-1", "content": [{"type": "text", "text": text}]}
    return envelope("event_msg", {"type": "item_completed", "turn_id": "t1", "item": item})


def test_what_the_user_typed_in_the_newest_layout_becomes_a_user_message() -> None:
    """With no user response item in the file, an item_completed UserMessage becomes a user message
    (its parts as given) and the event stays, without the content."""
    session = convert_codex([META, _typed("add csv export")]).sessions[0]
    [message] = [r.record.message for r in session.records if r.record.WhichOneof("record") == "message"]
    assert message.role == "user"
    assert message.parts.values[0].struct_value["text"] == "add csv export"
    [event] = [r.record.event for r in session.records if r.record.event.kind == "item_completed"]
    assert event.body["turn_id"] == "t1"
    assert set(event.body["item"].keys()) == {"type", "id"}


def test_a_file_with_user_response_items_does_not_get_the_typed_text_twice() -> None:
    """When the user's words are also response items, the item_completed event is kept as it is."""
    session = convert_codex([META, USER, _typed("hi")]).sessions[0]
    users = [
        r
        for r in session.records
        if r.record.WhichOneof("record") == "message" and r.record.message.role == "user"
    ]
    assert len(users) == 1
    [event] = [r.record.event for r in session.records if r.record.event.kind == "item_completed"]
    assert "content" in event.body["item"]


def test_injected_context_as_a_user_item_does_not_hide_what_the_user_typed() -> None:
    """A turn whose only user response item is injected context still gets the typed prompt of its
    item_completed event as a user message; the same text in both is kept once."""
    context = envelope(
        "response_item",
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "<environment_context/>"}],
        },
    )
    started = envelope("event_msg", {"type": "task_started"})
    lines = [META, started, context, _typed("add csv export"), _typed("<environment_context/>")]
    session = convert_codex(lines).sessions[0]
    users = [r.record.message for r in session.records if r.record.WhichOneof("record") == "message"]
    assert [m.parts.values[0].struct_value["text"] for m in users] == [
        "<environment_context/>",
        "add csv export",
    ]


def test_a_line_nested_deeper_than_a_record_can_hold_is_kept_as_its_text() -> None:
    """JSON nested past protobuf's depth limit: the line becomes a counted codex.unrepresentable_line
    event holding its text, and the lines around it convert as usual."""
    deep: object = "bottom"
    for _ in range(150):
        deep = {"inner": deep}
    nested = envelope("event_msg", {"type": "token_count", "info": deep})
    session = convert_codex([META, USER, nested, USER]).sessions[0]
    assert session.kept_as_event["codex.unrepresentable_line"] == 1
    [kept] = [r for r in session.records if r.record.event.kind == "codex.unrepresentable_line"]
    assert kept.line == 3
    assert orjson.loads(kept.record.event.body["text"]) == orjson.loads(nested)
    assert [r.line for r in session.records if r.record.WhichOneof("record") == "message"] == [2, 4]


def test_a_user_item_that_cannot_be_held_does_not_hide_the_same_typed_text() -> None:
    """A user response item kept as an unrepresentable line counts for nothing: the item_completed
    event with the same text still becomes the user message."""
    deep: object = "bottom"
    for _ in range(150):
        deep = [deep]
    item = {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": "PROMPT-ONE"}, {"type": "input_image", "nested": deep}],
    }
    lines = [
        META,
        envelope("event_msg", {"type": "task_started"}),
        envelope("response_item", item),
        _typed("PROMPT-ONE"),
    ]
    session = convert_codex(lines).sessions[0]
    assert session.kept_as_event["codex.unrepresentable_line"] == 1
    users = [r.record.message for r in session.records if r.record.WhichOneof("record") == "message"]
    assert [m.parts.values[0].struct_value["text"] for m in users] == ["PROMPT-ONE"]


def test_content_with_a_part_that_is_not_an_object_is_kept_as_its_json_text() -> None:
    """A message content or a tool output that is a list holding a non-object (the writer refuses
    such parts) becomes the list's JSON text; a list of objects stays parts."""
    call = envelope(
        "response_item", {"type": "function_call", "name": "sh", "arguments": "{}", "call_id": "c"}
    )
    output = envelope("response_item", {"type": "function_call_output", "call_id": "c", "output": ["a", 1]})
    odd_user = envelope("response_item", {"type": "message", "role": "user", "content": ["typed", {"x": 1}]})
    session = convert_codex([META, USER, call, output, odd_user]).sessions[0]
    messages = [r.record.message for r in session.records if r.record.WhichOneof("record") == "message"]
    user, _, tool, odd = messages
    assert user.HasField("parts")
    assert (tool.role, orjson.loads(tool.text)) == ("tool", ["a", 1])
    assert not odd.HasField("parts")
    assert orjson.loads(odd.text) == ["typed", {"x": 1}]


def test_a_type_that_is_not_text_is_kept_as_an_event_not_a_crash() -> None:
    """A line or an item whose type is a list or an object converts (kept as an event), and the
    file still converts."""
    odd_envelope = orjson.dumps({"timestamp": "2026-01-01T00:00:00Z", "type": ["x"], "payload": {"a": 1}})
    odd_item = envelope("response_item", {"type": {"x": 1}, "role": "user"})
    session = convert_codex([META, USER, odd_envelope, odd_item, orjson.dumps({"type": ["bare"]})]).sessions[
        0
    ]
    assert [r.line for r in session.records if r.record.WhichOneof("record") == "message"] == [2]
    assert sum(session.kept_as_event.values()) == 3


# -- thread names ---------------------------------------------------------------------------------
# No corpus file names its thread: these fixtures are real corpus files with lines of the shape
# Codex documents for a rename inserted (an ``event_msg`` ``thread_name_updated`` in the rollout
# file; ``{"id", "thread_name", "updated_at"}`` lines in ``$CODEX_HOME/session_index.jsonl``).

EXEC = CORPUS / "codex" / "real-2026-06-exec-redacted.jsonl"
EXEC_THREAD = "019e9625-802f-7e91-840a-cfe88d14117a"


def renamed(name: str | None, at: str) -> bytes:
    """A ``thread_name_updated`` line of the documented shape (``thread_name`` absent when None)."""
    payload: dict[str, str] = {"type": "thread_name_updated", "thread_id": EXEC_THREAD}
    if name is not None:
        payload["thread_name"] = name
    return orjson.dumps({"timestamp": at, "type": "event_msg", "payload": payload})


def titles_of(session) -> list[str]:
    from shared.wire import struct_to_python

    return [
        struct_to_python(r.record.event.body)["title"]
        for r in session.records
        if r.record.WhichOneof("record") == "event" and r.record.event.kind == "title"
    ]


def final_title(session) -> str:
    """The title a listing shows: every record folded through shared.titles.next_title."""
    from shared.titles import next_title
    from shared.wire import struct_to_python

    title = ""
    for r in session.records:
        if r.record.WhichOneof("record") == "event":
            body = struct_to_python(r.record.event.body)
            title = next_title(title, "event", {"kind": r.record.event.kind, "body": body})
    return title


def test_a_thread_name_in_the_file_is_a_title_where_it_stands_and_the_last_wins() -> None:
    """Real exec session + renames of the documented shape: each non-empty name is a title
    record right after its kept event; an absent or blank name sets none."""
    lines = EXEC.read_bytes().splitlines()
    source = [
        *lines[:3],
        renamed("  flaky   upload test ", "2026-06-05T04:58:23.000Z"),
        *lines[3:],
        renamed("Upload retry budget", "2026-06-05T04:59:00.000Z"),
        renamed(None, "2026-06-05T04:59:01.000Z"),
        renamed("   ", "2026-06-05T04:59:02.000Z"),
    ]
    [session] = convert_codex(source, EXEC).sessions
    assert titles_of(session) == ["flaky upload test", "Upload retry budget"]
    assert final_title(session) == "Upload retry budget"
    kinds = [r.record.event.kind for r in session.records if r.record.WhichOneof("record") == "event"]
    assert kinds.count("thread_name_updated") == 4  # every source line kept
    first = kinds.index("thread_name_updated")
    assert kinds[first + 1] == "title"
    assert session.stop_kind == StopKind.COMPLETED  # the ending is still judged by the turn events
    [plain] = convert_codex(lines, EXEC).sessions
    assert titles_of(plain) == []


def codex_home(tmp_path, rollout_lines: list[bytes], index_lines: list[bytes]):
    home = tmp_path / "codex-home"
    day = home / "sessions" / "2026" / "06" / "05"
    day.mkdir(parents=True)
    source = day / "rollout-2026-06-05T04-58-20-019e9625-802f-7e91-840a-cfe88d14117a.jsonl"
    source.write_bytes(b"\n".join(rollout_lines) + b"\n")
    if index_lines:
        (home / "session_index.jsonl").write_bytes(b"\n".join(index_lines) + b"\n")
    return home, source


def index_line(thread_id: str, name: str, at: str) -> bytes:
    return orjson.dumps({"id": thread_id, "thread_name": name, "updated_at": at})


def test_the_session_index_beside_the_sessions_folder_names_a_thread_the_file_does_not(tmp_path) -> None:
    """The newest index line of the thread wins over older ones and other threads' lines; a line
    of another shape is skipped; the session ends with its title record, and says where it came from."""
    from rollout_cli.importers.codex import CodexImporter, session_index_of

    lines = EXEC.read_bytes().splitlines()
    home, source = codex_home(
        tmp_path,
        lines,
        [
            index_line(EXEC_THREAD, "old name", "2026-06-05T05:00:00Z"),
            index_line("019e0000-0000-7000-8000-000000000000", "another thread", "2026-06-05T05:01:00Z"),
            b"not json",
            orjson.dumps({"id": EXEC_THREAD, "thread_name": 7}),
            index_line(EXEC_THREAD, "Release follow-up", "2026-06-05T05:02:00Z"),
        ],
    )
    assert session_index_of(source) == home / "session_index.jsonl"
    importer = CodexImporter()
    assert list(importer.source_files(home)) == [source]  # the index is no rollout
    [session] = importer.convert(source.read_bytes().splitlines(), source).sessions
    assert titles_of(session) == ["Release follow-up"]
    assert session.records[-1].record.event.kind == "title"
    assert any("session index" in note for note in session.notes)
    # The same file elsewhere (no index beside it) gets no title.
    elsewhere = tmp_path / "elsewhere.jsonl"
    elsewhere.write_bytes(source.read_bytes())
    assert session_index_of(elsewhere) is None
    assert titles_of(importer.convert(lines, elsewhere).sessions[0]) == []


def test_the_file_s_own_newer_name_wins_and_an_index_that_clears_it_is_noted(tmp_path) -> None:
    from rollout_cli.importers.codex import CodexImporter

    lines = [*EXEC.read_bytes().splitlines(), renamed("Named in the file", "2026-06-05T05:10:00.000Z")]
    _, source = codex_home(
        tmp_path, lines, [index_line(EXEC_THREAD, "older index name", "2026-06-05T05:00:00Z")]
    )
    [session] = CodexImporter().convert(lines, source).sessions
    assert titles_of(session) == ["Named in the file"]
    cleared = tmp_path / "cleared"
    cleared.mkdir()
    _, source = codex_home(cleared, lines, [index_line(EXEC_THREAD, "", "2026-06-05T05:20:00Z")])
    [session] = CodexImporter().convert(lines, source).sessions
    assert final_title(session) == "Named in the file"
    assert any("clears the thread name" in note for note in session.notes)


def test_an_unreadable_session_index_is_noted_and_the_file_imports(tmp_path, monkeypatch) -> None:
    from rollout_cli.importers import codex

    lines = EXEC.read_bytes().splitlines()
    home, source = codex_home(tmp_path, lines, [])
    (home / "session_index.jsonl").mkdir()  # a folder in its place: no index
    imported = codex.CodexImporter().convert(lines, source)
    assert (titles_of(imported.sessions[0]), imported.notes) == ([], [])
    (home / "session_index.jsonl").rmdir()
    (home / "session_index.jsonl").write_bytes(index_line(EXEC_THREAD, "x", "2026-06-05T05:00:00Z"))

    def unreadable(_lines: object) -> dict[str, codex.ThreadName]:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(codex, "read_thread_names", unreadable)
    imported = codex.CodexImporter().convert(lines, source)
    assert titles_of(imported.sessions[0]) == []
    assert any("could not be read (Input/output error)" in note for note in imported.notes)
    assert imported.sessions[0].records  # the file itself imports
