"""The Codex importer: every source line is mapped or kept as a counted event; the stop kind follows the ending."""

from __future__ import annotations

import orjson
import pytest

from rollout_cli.codex_import import convert_codex
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
    assert convert_codex([META, USER, *ending]).stop_kind is kind


def test_unmapped_items_are_kept_as_counted_events_never_dropped() -> None:
    """An unknown item type, an orphan output and a broken line each become a codex.* event and are counted."""
    lines = [
        META,
        USER,
        envelope("response_item", {"type": "web_search_call", "query": "x"}),
        envelope("response_item", {"type": "function_call_output", "call_id": "nobody", "output": "x"}),
        b"{not json",
    ]
    session = convert_codex(lines)
    assert dict(session.kept_as_event) == {
        "codex.web_search_call": 1,
        "codex.orphan_output": 1,
        "codex.unparseable_line": 1,
    }
    kinds = [record.event.kind for record in session.records if record.WhichOneof("record") == "event"]
    assert kinds.count("codex.web_search_call") == 1
    assert session.session_id == "01900000-0000-7000-8000-000000000001"


@pytest.mark.parametrize("path", sorted((CORPUS / "codex").glob("*.jsonl")), ids=lambda p: p.name)
def test_every_corpus_line_is_accounted_for(path) -> None:
    """Each non-empty line of a real session yields at least one record (mapped, or kept as an event)."""
    raw = [line for line in path.read_bytes().splitlines() if line.strip()]
    session = convert_codex(raw)
    assert session.recognized == len(raw)
    assert len(session.records) >= len(raw) - 1  # the session_meta line becomes CreateSession (+ an event)
