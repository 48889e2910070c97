"""Rebuilding the message sequence from the bytes of a session file (docs/spec.md §3)."""

from __future__ import annotations

import importlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.rebuild import DegradedKind, rebuild
from shared.records import encode_line

TS = "2026-11-30T10:15:30.123456Z"
META = {
    "session_id": "01a22c15-89a6-7d3d-b5b7-165622bd350c",
    "tenant": "default",
    "created_at": TS,
}


def session_lines(*records):
    """The encoded lines of a session file: session_meta, then ``(type, payload)`` records."""
    body = [("session_meta", META), *records]
    return [encode_line(seq, TS, record_type, payload) for seq, (record_type, payload) in enumerate(body)]


def offset_of(lines, index):
    """The byte offset of ``lines[index]`` in the file made of ``lines``."""
    return sum(len(line) for line in lines[:index])


def message(role, content=None, **fields):
    """A ``message`` record."""
    payload = {"role": role, **fields}
    if content is not None:
        payload["content"] = content
    return ("message", payload)


def assistant_calling(*call_ids, content=None):
    """An assistant ``message`` record requesting the tool calls ``call_ids``."""
    calls = [
        {"id": call_id, "type": "function", "function": {"name": "run", "arguments": "{}"}}
        for call_id in call_ids
    ]
    return message("assistant", content, tool_calls=calls)


def tool_output(call_id, content):
    """A tool ``message`` record answering ``call_id``."""
    return message("tool", content, tool_call_id=call_id)


def entries(result, kind):
    """The degraded entries of ``kind`` in a rebuild result."""
    return [entry for entry in result.degraded if entry.kind == kind]


def test_clean_file_rebuilds_messages_in_order_without_degraded_entries():
    """Message records become the sequence in file order; a clean file has no degraded entry."""
    records = [
        message("system", "be brief"),
        message("user", "hi"),
        ("turn_context", {"model": "m"}),
        ("event", {"kind": "token_count", "body": {"tokens": 3}}),
        message("assistant", "hello"),
    ]
    result = rebuild(b"".join(session_lines(*records)))
    assert result.messages == [payload for record_type, payload in records if record_type == "message"]
    assert result.degraded == []
    assert result.session_meta == META
    assert result.superseded_outputs == 0


def test_reasoning_attaches_to_the_next_assistant_message():
    """A reasoning record is attached under "reasoning" to the next assistant message."""
    reasoning = {"content": "think", "signature": "sig", "encrypted": "enc"}
    result = rebuild(
        b"".join(
            session_lines(("reasoning", reasoning), message("user", "wait"), message("assistant", "answer"))
        )
    )
    assert result.messages == [
        {"role": "user", "content": "wait"},
        {"role": "assistant", "content": "answer", "reasoning": reasoning},
    ]
    assert result.degraded == []


def test_several_reasoning_records_all_attach_to_the_next_assistant_message_in_order():
    """Consecutive reasoning records (a Responses-API turn) all attach, as a list, in file order."""
    blocks = [
        {"content": "first", "encrypted": "e1"},
        {"content": "second", "encrypted": "e2"},
        {"content": "3"},
    ]
    lines = session_lines(
        message("user", "q"),
        *(("reasoning", block) for block in blocks[:2]),
        ("event", {"kind": "token_count", "body": {}}),
        ("reasoning", blocks[2]),
        message("assistant", "a"),
        ("reasoning", {"content": "next turn"}),
        message("assistant", "b"),
    )
    result = rebuild(b"".join(lines))
    assert result.messages == [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a", "reasoning": blocks},
        {"role": "assistant", "content": "b", "reasoning": {"content": "next turn"}},
    ]
    assert result.degraded == []


def test_every_dangling_reasoning_record_is_its_own_degraded_entry():
    """Several reasoning records left without an answer are one dangling_reasoning entry each."""
    lines = session_lines(
        message("user", "q"), ("reasoning", {"content": "a"}), ("reasoning", {"content": "b"})
    )
    result = rebuild(b"".join(lines))
    found = [(entry.line, entry.offset) for entry in entries(result, DegradedKind.DANGLING_REASONING)]
    assert found == [(3, offset_of(lines, 2)), (4, offset_of(lines, 3))]
    assert result.messages == [{"role": "user", "content": "q"}]


@pytest.mark.parametrize(
    ("records", "dangling_index"),
    [
        pytest.param([message("user", "q"), ("reasoning", {"content": "r"})], 2, id="at-the-end"),
        pytest.param(
            [("reasoning", {"content": "r"}), ("compacted", {"summary": "s"}), message("assistant", "a")],
            1,
            id="followed-by-compaction",
        ),
    ],
)
def test_dangling_reasoning_is_degraded(records, dangling_index):
    """A reasoning record with no assistant message to attach to is a dangling_reasoning entry."""
    lines = session_lines(*records)
    result = rebuild(b"".join(lines))
    [entry] = entries(result, DegradedKind.DANGLING_REASONING)
    assert (entry.line, entry.offset) == (dangling_index + 1, offset_of(lines, dangling_index))
    dangling = records[dangling_index - 1][1]
    assert all(payload.get("reasoning") != dangling for payload in result.messages)


def test_compaction_resets_to_replacement_history():
    """A compacted record with replacement_history replaces the whole sequence with it."""
    history = [{"role": "user", "content": "short version"}, {"role": "assistant", "content": "ok"}]
    lines = session_lines(
        message("user", "long"),
        message("assistant", "longer"),
        ("compacted", {"summary": "s", "replacement_history": history}),
        message("user", "next"),
    )
    result = rebuild(b"".join(lines))
    assert result.messages == [*history, {"role": "user", "content": "next"}]
    [entry] = entries(result, DegradedKind.COMPACTED_REBUILD)
    assert (entry.line, entry.offset) == (4, offset_of(lines, 3))


def test_compaction_without_history_resets_to_the_summary():
    """A compacted record without replacement_history leaves one user message holding the summary."""
    result = rebuild(b"".join(session_lines(message("user", "long"), ("compacted", {"summary": "we did X"}))))
    assert result.messages == [{"role": "user", "content": "we did X"}]
    assert [entry.kind for entry in result.degraded] == [DegradedKind.COMPACTED_REBUILD]


def test_later_output_for_same_call_replaces_the_first_in_place():
    """A second output for one call replaces the first at the first one's position and is counted."""
    result = rebuild(
        b"".join(
            session_lines(
                assistant_calling("c1"),
                tool_output("c1", "Error: interrupted before the tool returned"),
                message("user", "still there?"),
                tool_output("c1", "real result"),
            )
        )
    )
    assert result.messages == [
        assistant_calling("c1")[1],
        {"role": "tool", "tool_call_id": "c1", "content": "real result"},
        {"role": "user", "content": "still there?"},
    ]
    assert result.superseded_outputs == 1
    assert result.degraded == []


def test_reused_call_id_in_a_later_turn_opens_a_new_pairing():
    """An output after a later call reusing an id answers that call and keeps the earlier output."""
    result = rebuild(
        b"".join(
            session_lines(
                assistant_calling("c1"),
                tool_output("c1", "first turn"),
                message("user", "again"),
                assistant_calling("c1"),
                tool_output("c1", "second turn"),
            )
        )
    )
    assert [payload.get("content") for payload in result.messages] == [
        None,
        "first turn",
        "again",
        None,
        "second turn",
    ]
    assert result.superseded_outputs == 0
    assert result.degraded == []


def test_unanswered_call_is_degraded_at_the_call():
    """A tool call with no output is an unanswered_tool_call entry at the call's line; nothing is invented."""
    lines = session_lines(message("user", "go"), assistant_calling("c1", "c2"), tool_output("c2", "ok"))
    result = rebuild(b"".join(lines))
    [entry] = entries(result, DegradedKind.UNANSWERED_TOOL_CALL)
    assert (entry.line, entry.offset) == (3, offset_of(lines, 2))
    assert "c1" in entry.detail
    assert result.unanswered_call_ids == ["c1"]
    assert len(result.messages) == 3


def test_orphan_output_is_degraded_and_kept():
    """A tool output that answers no call is an orphan_tool_output entry and stays in the sequence."""
    lines = session_lines(message("user", "go"), tool_output("ghost", "out"), message("assistant", "done"))
    result = rebuild(b"".join(lines))
    [entry] = entries(result, DegradedKind.ORPHAN_TOOL_OUTPUT)
    assert (entry.line, entry.offset) == (3, offset_of(lines, 2))
    assert result.messages[1] == {"role": "tool", "tool_call_id": "ghost", "content": "out"}
    assert len(result.messages) == 3


@pytest.mark.parametrize(
    ("bad_line", "kind"),
    [
        pytest.param(
            b'{"v":1,"seq":2,"ts":"2026-11-30T10:1', DegradedKind.UNPARSEABLE_LINE, id="torn-object"
        ),
        pytest.param(b"\x00" * 4096, DegradedKind.NUL_RUN, id="nul-run"),
    ],
)
def test_bad_line_in_the_middle_hides_nothing_after_it(bad_line, kind):
    """An unparseable line or NUL run is one entry at its line and byte offset; later lines still count."""
    good = session_lines(message("user", "before"), message("user", "after"), message("assistant", "end"))
    lines = [*good[:2], bad_line + b"\n", *good[2:]]
    result = rebuild(b"".join(lines))
    [entry] = result.degraded
    assert entry.kind == kind
    assert (entry.line, entry.offset) == (3, offset_of(lines, 2))
    assert [payload["content"] for payload in result.messages] == ["before", "after", "end"]


def test_nul_run_before_a_record_keeps_the_record():
    """NUL bytes in front of a record on the same line are reported and the record is still read."""
    good = session_lines(message("user", "before"), message("user", "after"))
    lines = [good[0], good[1], b"\x00" * 100 + good[2]]
    result = rebuild(b"".join(lines))
    [entry] = result.degraded
    assert (entry.kind, entry.line, entry.offset) == (DegradedKind.NUL_RUN, 3, offset_of(lines, 2))
    assert [payload["content"] for payload in result.messages] == ["before", "after"]


@pytest.mark.parametrize(
    ("seqs", "kind"),
    [
        pytest.param([0, 1, 3, 4], DegradedKind.SEQ_GAP, id="gap"),
        pytest.param([0, 1, 1, 2], DegradedKind.SEQ_REPEAT, id="repeat"),
    ],
)
def test_seq_gap_or_repeat_is_reported(seqs, kind):
    """A seq that skips ahead or goes back is one entry at its line; the record is still read."""
    records = [("session_meta", META)] + [message("user", f"m{index}") for index in range(1, len(seqs))]
    lines = [
        encode_line(seq, TS, record_type, payload)
        for seq, (record_type, payload) in zip(seqs, records, strict=True)
    ]
    result = rebuild(b"".join(lines))
    [entry] = result.degraded
    assert (entry.kind, entry.line, entry.offset) == (kind, 3, offset_of(lines, 2))
    assert len(result.messages) == len(seqs) - 1


def test_unknown_record_type_is_kept_and_reported():
    """A record of an unknown type is kept in unknown_records and reported; rebuilding goes on."""
    future = {"anything": [1, {"nested": True}]}
    lines = session_lines(message("user", "a"), ("hologram", future), message("user", "b"))
    result = rebuild(b"".join(lines))
    [unknown] = result.unknown_records
    assert (unknown.seq, unknown.line, unknown.record_type, unknown.payload) == (2, 3, "hologram", future)
    [entry] = result.degraded
    assert (entry.kind, entry.line, entry.offset) == (
        DegradedKind.UNKNOWN_RECORD_TYPE,
        3,
        offset_of(lines, 2),
    )
    assert [payload["content"] for payload in result.messages] == ["a", "b"]


def test_message_cap_truncates_and_reports():
    """More messages than max_messages returns the first max_messages and a message_cap entry."""
    records = [message("user", f"m{index}") for index in range(5)]
    result = rebuild(b"".join(session_lines(*records)), max_messages=3)
    assert [payload["content"] for payload in result.messages] == ["m0", "m1", "m2"]
    assert [entry.kind for entry in result.degraded] == [DegradedKind.MESSAGE_CAP]
    assert rebuild(b"".join(session_lines(*records)), max_messages=5).degraded == []


def test_last_line_without_newline_is_uncommitted():
    """A last line without a newline is ignored, even when it is valid JSON, and reported."""
    lines = session_lines(message("user", "committed"), message("user", "pending"))
    data = b"".join(lines)[:-1]
    result = rebuild(data)
    assert result.messages == [{"role": "user", "content": "committed"}]
    [entry] = result.degraded
    assert (entry.kind, entry.line, entry.offset) == (DegradedKind.UNCOMMITTED_TAIL, 3, offset_of(lines, 2))
    assert result.committed_bytes == offset_of(lines, 2)
    assert result.last_seq == 1


def test_checkpoint_messages_are_the_sequence_at_the_last_checkpoint():
    """checkpoint_messages is the sequence as it stood at the last agent_checkpoint."""

    def checkpoint(count, covers):
        return (
            "agent_checkpoint",
            {"digest": f"d{count}", "message_count": count, "covers_seq": covers, "stop_kind": "paused"},
        )

    result = rebuild(
        b"".join(
            session_lines(
                message("user", "one"),
                checkpoint(1, 1),
                ("stop", {"stop_kind": "paused", "reason": "r", "checkpoint_seq": 2}),
                message("user", "two"),
                checkpoint(2, 4),
                ("stop", {"stop_kind": "paused", "reason": "r", "checkpoint_seq": 5}),
                message("user", "three"),
            )
        )
    )
    assert result.checkpoint_messages == [
        {"role": "user", "content": "one"},
        {"role": "user", "content": "two"},
    ]
    assert result.last_checkpoint is not None
    assert (result.last_checkpoint.digest, result.last_checkpoint.seq) == ("d2", 5)
    assert len(result.messages) == 3


def test_rebuild_survives_arbitrary_bytes():
    """Rebuild of bytes that are no record at all reports them instead of raising."""
    result = rebuild(b'\xff\xfe garbage\n[1,2]\n"text"\nnull\n{}\n')
    assert [entry.kind for entry in result.degraded] == [
        DegradedKind.UNPARSEABLE_LINE,
        *[DegradedKind.MALFORMED_RECORD] * 4,
    ]
    assert result.messages == []


_json_scalars = st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=6)
_json = st.recursive(
    _json_scalars,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=10,
)
_roles = st.sampled_from(["assistant", "tool", "user"])
_payloads = st.fixed_dictionaries(
    {"role": _roles | _roles | _json},
    optional={
        key: _json
        for key in (
            "content",
            "tool_call_id",
            "summary",
            "replacement_history",
            "digest",
            "message_count",
            "covers_seq",
            "stop_kind",
        )
    },
)


@settings(deadline=None, max_examples=300)
@given(
    records=st.lists(
        st.tuples(
            st.sampled_from(
                ["message", "message", "message", "reasoning", "compacted", "agent_checkpoint", "stop", "zzz"]
            ),
            _payloads,
            st.lists(st.dictionaries(st.sampled_from(["id", "type", "function"]), _json), max_size=2)
            | _json_scalars
            | _json,
        ),
        max_size=8,
    )
)
def test_rebuild_never_raises_on_odd_payloads(records):
    """Records with payload fields of unexpected types never make rebuild raise."""
    lines = session_lines(
        *[(record_type, {**payload, "tool_calls": calls}) for record_type, payload, calls in records]
    )
    rebuild(b"".join(lines))


@pytest.mark.parametrize("calls", [5, True, 1.5, "c1", {"id": "c1"}])
def test_rebuild_never_raises_on_non_list_tool_calls(calls):
    """An assistant message whose tool_calls is not a list is kept in the sequence, never a crash."""
    result = rebuild(b"".join(session_lines(message("assistant", "a", tool_calls=calls))))
    assert len(result.messages) == 1


# shared/__init__ binds the name ``rebuild`` to the function, hiding the module.
rebuild_module = importlib.import_module("shared.rebuild")


def records_of(kinds):
    """One record per kind (None for "damage", a line the caller fills with bad bytes)."""
    records = []
    for number, kind in enumerate(kinds):
        if kind == "user":
            records.append(message("user", f"u{number}"))
        elif kind == "call":
            records.append(assistant_calling(f"c{number % 3}"))
        elif kind == "output":
            records.append(message("tool", f"o{number}", tool_call_id=f"c{number % 3}"))
        elif kind == "reasoning":
            records.append(("reasoning", {"content": f"r{number}"}))
        elif kind == "assistant":
            records.append(message("assistant", f"a{number}"))
        elif kind == "compact":
            history = [{"role": "user", "content": "kept"}] if number % 2 else None
            payload = (
                {"summary": "s"} if history is None else {"summary": "s", "replacement_history": history}
            )
            records.append(("compacted", payload))
        elif kind == "checkpoint":
            digest = "sha256:v1:" + "0" * 64
            records.append(("agent_checkpoint", {"digest": digest, "message_count": 1, "covers_seq": number}))
        else:
            records.append(None)
    return records


_damage = st.sampled_from([b"", b"{trunc", b"\x00\x00\x00", b"[1]", b"\xff", b"\x00" * 3 + b"{}"])


@settings(deadline=None, max_examples=200)
@given(
    kinds=st.lists(
        st.sampled_from(["user", "call", "output", "damage", "reasoning", "assistant"]), max_size=14
    ),
    damage=st.lists(_damage, min_size=14, max_size=14),
    tail=st.sampled_from([b"", b'{"v":1,"seq"']),
    split=st.integers(1, 200),
)
def test_rebuild_is_the_same_whatever_size_its_slices_of_the_file(kinds, damage, tail, split):
    """rebuild() splits a file into lines a slice at a time (SPLIT_BYTES, cut after a newline): any
    slice size gives the same result (line numbers, offsets, pairing, degraded entries) as one slice."""
    records = records_of(kinds)
    lines = session_lines(*[record for record in records if record is not None])
    body = [lines[0]]
    good = iter(lines[1:])
    for number, record in enumerate(records):
        body.append(damage[number] + b"\n" if record is None else next(good))
    data = b"".join(body) + tail
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(rebuild_module, "SPLIT_BYTES", 1 << 40)
        whole = rebuild(data)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(rebuild_module, "SPLIT_BYTES", split)
        sliced = rebuild(data)
    assert sliced == whole
    assert sliced.committed_bytes == data.rfind(b"\n") + 1


@settings(deadline=None, max_examples=150)
@given(
    kinds=st.lists(
        st.sampled_from(
            ["user", "call", "output", "damage", "reasoning", "assistant", "compact", "checkpoint"]
        ),
        max_size=16,
    ),
    cuts=st.lists(st.integers(0, 16), max_size=4),
    cap=st.sampled_from([0, 1, 3]),
)
def test_a_pass_answers_between_runs_as_a_rebuild_of_the_bytes_so_far(kinds, cuts, cap):
    """A pass fed in pieces answers, after each piece, what rebuild() gives for the bytes so far (plus
    an uncommitted tail), and asking never changes what it answers later (finished_copy leaves it open)."""
    records = records_of(kinds)
    lines = session_lines(*[record for record in records if record is not None])
    good = iter(lines[1:])
    body = [lines[0]] + [b"\x00{trunc\n" if record is None else next(good) for record in records]
    tail = b'{"v":1,"se'
    state = rebuild_module.Rebuilder()
    line_no = offset = 0
    for cut in [*sorted(set(cuts)), len(body)]:
        piece = body[line_no:cut] if cut > line_no else []
        line_no, offset = state.run([line[:-1] for line in piece], line_no, offset)
        for pending in (b"", tail):
            assert state.finished_copy(pending, line_no, offset, cap) == rebuild(
                b"".join(body[:line_no]) + pending, max_messages=cap
            )
