"""shared.rebuild.view_continues: a view held as of a next seq is called the start of a later view
only when it is (docs/spec.md §3, §5.1), whatever came after it: appends, retractions, compactions,
outputs replacing outputs, reasoning."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from shared.rebuild import Rebuilder, view_continues
from shared.records import encode_line, origin_reference

TS = "2026-12-03T10:00:00.000000Z"
META = {"session_id": "01a22c15-89a6-7d3d-b5b7-165622bd350c", "tenant": "t", "created_at": TS}

#: One step of a history: (kind, a number that picks what it names or holds).
steps = st.lists(
    st.tuples(
        st.sampled_from(["user", "user", "call", "output", "retract", "compact", "reasoning"]),
        st.integers(0, 1000),
    ),
    max_size=25,
)


def _records(history: list[tuple[str, int]]) -> list[bytes]:
    """The lines of a history, each record chosen from the view its predecessors rebuild."""
    lines = [encode_line(0, TS, "session_meta", META)]
    calls: list[str] = []
    for seq, (kind, pick) in enumerate(history, start=1):
        record: tuple[str, dict[str, Any]]
        if kind == "user":
            record = ("message", {"role": "user", "content": f"u{seq}"})
        elif kind == "call":
            calls.append(f"c{seq}")
            call = {"id": f"c{seq}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            record = ("message", {"role": "assistant", "content": f"a{seq}", "tool_calls": [call]})
        elif kind == "output" and calls:  # answers a call, maybe one answered already (in place)
            record = (
                "message",
                {"role": "tool", "tool_call_id": calls[pick % len(calls)], "content": f"o{seq}"},
            )
        elif kind == "retract":
            state = _state(lines)
            origins = state.origins
            named = origin_reference(origins[pick % len(origins)]) if origins else {"seq": 1}
            record = ("retraction", {"messages": [named], "reason": "test"})
        elif kind == "compact":
            history_kept = [{"role": "user", "content": f"kept{seq}.{n}"} for n in range(pick % 3)]
            record = ("compacted", {"summary": f"s{seq}", "replacement_history": history_kept})
        else:
            record = ("reasoning", {"content": f"r{seq}"})
        lines.append(encode_line(seq, TS, *record))
    return lines


def _state(lines: list[bytes]) -> Rebuilder:
    state = Rebuilder()
    state.run([line.rstrip(b"\n") for line in lines])
    return state


@settings(max_examples=300, deadline=None)
@given(steps)
def test_a_view_continues_only_into_a_view_that_starts_with_it(history) -> None:
    """For every next seq a caller may hold a view at: when view_continues says so, the current view's
    first messages are the held view's; and it says so whenever only messages were appended since."""
    lines = _records(history)
    now = _state(lines)
    next_seq = now.result.last_seq + 1
    for held_next_seq in range(1, next_seq + 1):
        held = _state(lines[:held_next_seq])
        count = len(held.messages)
        continues = view_continues(held_next_seq, count, next_seq, now.origins, now.rewritten_seq)
        if continues:
            assert now.messages[:count] == held.messages
            assert now.origins[:count] == held.origins
        kinds_since = [kind for kind, _ in history[held_next_seq - 1 :]]
        if all(kind in ("user", "call", "reasoning") for kind in kinds_since):
            assert continues, "only messages were appended since"
        assert view_continues(held_next_seq, None, next_seq, now.origins, now.rewritten_seq) == (
            held_next_seq == next_seq
        ), "a count not known exactly continues only an unchanged view"


def test_a_view_the_reader_has_not_read_up_to_or_none_never_continues() -> None:
    """A held next seq beyond the reader's (its file is behind the caller's acknowledged appends),
    or none held (0), is answered in full; without the whole view (a tail read) only an unchanged
    one continues."""
    lines = _records([("user", 0), ("user", 0), ("retract", 1)])
    now = _state(lines)
    next_seq = now.result.last_seq + 1
    assert not view_continues(next_seq + 1, 2, next_seq, now.origins, now.rewritten_seq)
    assert not view_continues(0, 0, next_seq, now.origins, now.rewritten_seq)
    assert view_continues(next_seq, 1, next_seq)
    assert not view_continues(next_seq - 1, 2, next_seq)
