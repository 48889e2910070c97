"""Retractions take messages out of the rebuilt view by reference (shared.records, docs/spec.md §3 addition)."""

from __future__ import annotations

from shared.rebuild import DAMAGE_KINDS, DegradedKind, rebuild
from shared.rebuild_index import index_rebuild
from shared.records import message_origin, origin_reference, reference_origin
from tests.shared.test_rebuild import assistant_calling, entries, message, session_lines, tool_output


def retraction(*references, reason="pop"):
    return ("retraction", {"messages": [dict(reference) for reference in references], "reason": reason})


def contents(result):
    return [m.get("content") for m in result.messages]


def test_a_retraction_takes_the_named_message_out_and_says_so() -> None:
    """The message at the named seq leaves the view; the records stay; a 'retracted' note, not damage."""
    lines = session_lines(message("user", "a"), message("assistant", "b"), retraction({"seq": 2}))
    result = rebuild(b"".join(lines))
    assert contents(result) == ["a"]
    (note,) = entries(result, DegradedKind.RETRACTED)
    assert (note.line, "1 message(s) taken out of the view (pop)") == (4, note.detail)
    assert not any(entry.kind in DAMAGE_KINDS for entry in result.degraded)


def test_a_retracted_output_leaves_its_call_unanswered_again() -> None:
    """Taking a tool output out makes its call unanswered; a later output answers it in place."""
    body = [assistant_calling("c1"), tool_output("c1", "first"), retraction({"seq": 2})]
    result = rebuild(b"".join(session_lines(*body)))
    assert [m.get("role") for m in result.messages] == ["assistant"]
    assert result.unanswered_call_ids == ["c1"]
    again = rebuild(b"".join(session_lines(*body, tool_output("c1", "second"))))
    assert contents(again) == [None, "second"]
    assert again.unanswered_call_ids == []
    assert again.superseded_outputs == 0


def test_a_retracted_call_takes_its_pairing_with_it() -> None:
    """After its call message is taken out, an output for that call answers nothing (an orphan)."""
    body = [assistant_calling("c1"), retraction({"seq": 1}), tool_output("c1", "late")]
    result = rebuild(b"".join(session_lines(*body)))
    assert contents(result) == ["late"]
    assert entries(result, DegradedKind.ORPHAN_TOOL_OUTPUT)
    assert "c1" not in result.call_ids


def test_a_message_before_the_taken_one_keeps_its_pairing_position() -> None:
    """Removing a message before an answered call's output shifts that output's position: a later
    output for the call still replaces it in place."""
    body = [
        message("user", "u"),
        assistant_calling("c1"),
        tool_output("c1", "one"),
        retraction({"seq": 1}),
        tool_output("c1", "two"),
    ]
    result = rebuild(b"".join(session_lines(*body)))
    assert contents(result) == [None, "two"]
    assert result.superseded_outputs == 1


def test_an_output_that_replaced_another_in_place_is_named_by_its_own_seq() -> None:
    """A superseding output is retracted by its seq; the superseded one's seq names nothing any more."""
    body = [assistant_calling("c1"), tool_output("c1", "old"), tool_output("c1", "new")]
    result = rebuild(b"".join(session_lines(*body, retraction({"seq": 2}), retraction({"seq": 3}))))
    assert [m.get("role") for m in result.messages] == ["assistant"]
    (missed,) = entries(result, DegradedKind.RETRACTION_MISSED)
    assert "'seq': 2" in missed.detail


def test_replacement_history_entries_and_a_summary_are_named_by_their_compaction() -> None:
    """{seq, index} names entry index of a compaction's history; {seq} names a summary-only compaction."""
    history = [{"role": "user", "content": "h0"}, {"role": "assistant", "content": "h1"}]
    body = [
        ("compacted", {"summary": "s", "replacement_history": history}),
        retraction({"seq": 1, "index": 1}),
    ]
    assert contents(rebuild(b"".join(session_lines(*body)))) == ["h0"]
    summary = [("compacted", {"summary": "all of it"}), retraction({"seq": 1})]
    assert contents(rebuild(b"".join(session_lines(*summary)))) == []


def test_malformed_and_unknown_references_are_notes_never_damage() -> None:
    """A reference that is not {seq[, index]} or names no message of the view is a missed note."""
    body = [message("user", "a"), retraction({"seq": 9}, {"seq": "1"}, {"seq": 1, "index": -1})]
    result = rebuild(b"".join(session_lines(*body)))
    assert contents(result) == ["a"]
    assert len(entries(result, DegradedKind.RETRACTION_MISSED)) == 3
    assert not any(entry.kind in DAMAGE_KINDS for entry in result.degraded)


def test_the_index_rebuild_takes_the_same_messages_out() -> None:
    """The bounded-memory (index) rebuild honours retractions as the payload rebuild does."""
    body = [message("user", "a"), message("user", "b"), message("user", "c"), retraction({"seq": 2})]
    data = b"".join(session_lines(*body))
    assert len(index_rebuild_of(data).messages) == len(rebuild(data).messages) == 2


def index_rebuild_of(data):
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "s.jsonl"
        path.write_bytes(data)
        return index_rebuild(path)


def test_origins_and_references_are_mirrors() -> None:
    """message_origin, origin_reference and reference_origin round-trip for lines and history entries."""
    for seq, index in [(1, None), (17, 0), (17, 5), (2**40, None)]:
        origin = message_origin(seq, index)
        assert reference_origin(origin_reference(origin)) == origin
    assert origin_reference(message_origin(17, 5)) == {"seq": 17, "index": 5}
    assert reference_origin({"seq": 0}) is None
