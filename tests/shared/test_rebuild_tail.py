"""The tail rebuild (shared.rebuild_tail) gives exactly the whole-file rebuild's last messages, or
says it cannot: random sessions of every record kind that changes the view, damage included."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from shared import committed_lines
from shared.rebuild import rebuild
from shared.rebuild_index import index_recent
from shared.rebuild_tail import TailRecent, recent_from_tail
from shared.records import encode_line, seal_line

TS = "2026-12-01T00:00:00.000000Z"
CALL_IDS = ["c1", "c2", "c3"]
TEXT = st.sampled_from(["a", "b", "ü", "long " * 30, ""])


def meta() -> tuple[str, dict[str, Any]]:
    return ("session_meta", {"session_id": "s", "tenant": "t", "created_at": TS})


@st.composite
def records(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    """One record of any kind that changes the view (or sits beside it)."""
    kind = draw(
        st.sampled_from(
            ["user"] * 4
            + ["assistant"] * 3
            + ["tool"] * 2
            + ["reasoning", "compacted", "retraction"] * 2
            + ["checkpoint", "stop", "resumed", "event", "turn_context", "unknown"]
        )
    )
    text = draw(TEXT)
    if kind == "user":
        return ("message", {"role": "user", "content": text})
    if kind == "assistant":
        calls = draw(st.lists(st.sampled_from(CALL_IDS), max_size=2, unique=True))
        payload: dict[str, Any] = {"role": "assistant", "content": text}
        if calls:
            payload["tool_calls"] = [
                {"id": c, "type": "function", "function": {"name": "f", "arguments": "{}"}} for c in calls
            ]
        return ("message", payload)
    if kind == "tool":
        return ("message", {"role": "tool", "tool_call_id": draw(st.sampled_from(CALL_IDS)), "content": text})
    if kind == "reasoning":
        return ("reasoning", {"content": text})
    if kind == "compacted":
        history = draw(
            st.none()
            | st.lists(
                st.sampled_from(
                    [
                        {"role": "user", "content": "kept"},
                        {
                            "role": "assistant",
                            "content": "",
                            "tool_calls": [{"id": "c1", "type": "function"}],
                        },
                        {"role": "tool", "tool_call_id": "c1", "content": "out"},
                    ]
                ),
                max_size=3,
            )
        )
        body: dict[str, Any] = {"summary": text}
        if history is not None:
            body["replacement_history"] = history
        return ("compacted", body)
    if kind == "retraction":
        references = draw(
            st.lists(
                st.fixed_dictionaries({"seq": st.integers(1, 60)}, optional={"index": st.integers(0, 2)}),
                min_size=1,
                max_size=2,
            )
        )
        return ("retraction", {"messages": references, "call_ids": []})
    if kind == "checkpoint":
        return (
            "agent_checkpoint",
            {"digest": "x", "message_count": 1, "covers_seq": 1, "stop_kind": "paused", "lines_digest": "y"},
        )
    if kind == "stop":
        return ("stop", {"stop_kind": "paused", "reason": "", "checkpoint_seq": 1})
    if kind == "resumed":
        forced = draw(st.booleans())
        body = {"forced": forced, "damage": [{"kind": "seq_gap", "line": 2, "offset": 9}] if forced else []}
        return ("event", {"kind": "resumed", "body": body})
    if kind == "event":
        return ("event", {"kind": "note", "body": {}})
    if kind == "turn_context":
        return ("turn_context", {"cwd": "/"})
    return ("newer_kind", {"x": 1})


#: Ways a line goes wrong: a changed byte under its check, not JSON, no check (older: not damage),
#: NUL bytes before it, a skipped seq.
DAMAGE = st.sampled_from(["none"] * 60 + ["check", "unparseable", "unchecked", "nul", "gap"])


@st.composite
def session_files(draw: st.DrawFn) -> bytes:
    """The bytes of a session file: a session_meta (usually), records, some damaged, maybe an
    uncommitted end."""
    body = [meta()] if draw(st.integers(0, 9)) else []
    body += draw(st.lists(records(), max_size=60))
    out, seq = [], 0
    for record_type, payload in body:
        damage = draw(DAMAGE)
        if damage == "gap":
            seq += 1
        line = encode_line(seq, TS, record_type, payload)
        if damage == "check":
            line = line.replace(b'"ts":"2026', b'"ts":"2027', 1)
        elif damage == "unparseable":
            line = line[: len(line) // 2] + b"\n"
        elif damage == "unchecked":
            line = (
                orjson.dumps({"v": 1, "seq": seq, "ts": TS, "type": record_type, "payload": payload}) + b"\n"
            )
        elif damage == "nul":
            line = b"\x00\x00" + line
        out.append(line)
        seq += 1
    if draw(st.integers(0, 5)) == 0:
        out.append(seal_line(b'{"v":1,"seq":999}')[:-9])  # bytes after the last newline
    return b"".join(out)


def whole_file_view(path: Path) -> tuple[list[dict[str, Any]], list[int], int, int]:
    """The whole-file rebuild's messages, their origins, the count and the next seq (the reader's
    own fallback paths: shared.rebuild.rebuild and shared.rebuild_index.index_recent)."""
    messages = rebuild(path.read_bytes()).messages
    _, origins, count, next_seq = index_recent(path, 0)
    assert count == len(messages)
    return messages, origins, count, next_seq


def tail_of(path: Path, limit: int, block_bytes: int) -> TailRecent | None:
    fd = os.open(path, os.O_RDONLY)
    try:
        return recent_from_tail(fd, limit, block_bytes=block_bytes)
    finally:
        os.close(fd)


def check_equal(path: Path, block_bytes: int) -> int:
    """For every limit: the tail's answer is None or the whole file's last ``limit``; how many settled
    from a window that did not reach the file's start."""
    messages, origins, count, next_seq = whole_file_view(path)
    from_tail = 0
    for limit in range(1, count + 3):
        answer = tail_of(path, limit, block_bytes)
        if answer is None:
            continue
        assert answer.messages == messages[-limit:], limit
        assert answer.origins == origins[-limit:], limit
        assert answer.next_seq == next_seq
        if answer.count_exact:
            assert answer.message_count == count
        else:
            assert limit < answer.message_count <= count
            from_tail += 1
    return from_tail


@settings(max_examples=300)
@given(data=session_files(), block_bytes=st.sampled_from([5, 64, 300, 64 * 1024]))
def test_the_tail_gives_the_whole_rebuilds_last_messages_or_nothing(
    tmp_path_factory, data, block_bytes
) -> None:
    """Every limit, every block size (so the window starts at every kind of line): equal or None."""
    path = tmp_path_factory.mktemp("tail") / "s.jsonl"
    path.write_bytes(data)
    settled = check_equal(path, block_bytes)
    event(f"settled from a partial window: {bool(settled)}")


def plain_session(messages: int, text: str = "x" * 200) -> bytes:
    lines = [encode_line(0, TS, *meta())]
    for seq in range(1, messages + 1):
        role = "user" if seq % 2 else "assistant"
        lines.append(encode_line(seq, TS, "message", {"role": role, "content": f"{seq} {text}"}))
    return b"".join(lines)


def test_a_long_session_settles_from_one_block(tmp_path, monkeypatch) -> None:
    """10 of 5,000 messages (~1.2 MB): one 64 KiB read, a count that is a lower bound above 10."""
    path = tmp_path / "s.jsonl"
    path.write_bytes(plain_session(5000))
    read: list[int] = []

    def counting_pread(fd: int, size: int, offset: int) -> bytes:
        read.append(size)
        return os.pread(fd, size, offset)

    monkeypatch.setattr(committed_lines, "pread", counting_pread)
    answer = tail_of(path, 10, 64 * 1024)
    assert answer is not None
    assert sum(read) == 64 * 1024
    assert [m["content"].split()[0] for m in answer.messages] == [str(n) for n in range(4991, 5001)]
    assert not answer.count_exact
    assert 10 < answer.message_count < 5000
    assert answer.next_seq == 5001


def test_a_compaction_in_the_tail_gives_the_exact_count(tmp_path) -> None:
    path = tmp_path / "s.jsonl"
    data = plain_session(3000)
    seq = 3001
    data += encode_line(
        seq, TS, "compacted", {"summary": "s", "replacement_history": [{"role": "user", "content": "k"}]}
    )
    data += encode_line(seq + 1, TS, "message", {"role": "user", "content": "after"})
    path.write_bytes(data)
    answer = tail_of(path, 1, 64 * 1024)
    assert answer is not None
    assert answer.count_exact
    assert (answer.message_count, answer.messages, answer.next_seq) == (
        2,
        [{"role": "user", "content": "after"}],
        3003,
    )


@pytest.mark.parametrize(
    "tail_record",
    [
        ("message", {"role": "tool", "tool_call_id": "far", "content": "answers a call the tail lacks"}),
        ("message", {"role": "assistant", "content": "reasoning before the tail may be its"}),
    ],
)
def test_what_the_prefix_decides_makes_the_window_grow(tmp_path, tail_record) -> None:
    """An output answering a call before the window, or the window's first assistant message,
    are read with the lines before them: the answer is still the whole file's."""
    lines = [encode_line(0, TS, *meta())]
    lines.append(
        encode_line(
            1,
            TS,
            "message",
            {"role": "assistant", "content": "", "tool_calls": [{"id": "far", "type": "function"}]},
        )
    )
    lines.append(encode_line(2, TS, "message", {"role": "tool", "tool_call_id": "far", "content": "first"}))
    lines.append(encode_line(3, TS, "reasoning", {"content": "thought"}))
    seq = 4
    for n in range(200):
        lines.append(encode_line(seq, TS, "message", {"role": "user", "content": f"u{n} " + "y" * 100}))
        seq += 1
    lines.append(encode_line(seq, TS, *tail_record))
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"".join(lines))
    messages, origins, _, next_seq = whole_file_view(path)
    answer = tail_of(path, 1, 1024)
    assert answer is not None
    assert (answer.messages, answer.origins, answer.next_seq) == (messages[-1:], origins[-1:], next_seq)
    assert answer.window_bytes == path.stat().st_size  # it had to reach the first lines
    check_equal(path, 1024)


def test_damage_in_the_tail_leaves_the_answer_to_the_whole_file(tmp_path) -> None:
    data = plain_session(500)
    cut = data.rindex(b'"ts":"2026')
    path = tmp_path / "s.jsonl"
    path.write_bytes(data[:cut] + b'"ts":"2027' + data[cut + 10 :])
    assert tail_of(path, 5, 64 * 1024) is None  # a line whose check fails
    after = {"role": "user", "content": "after"}
    path.write_bytes(data + encode_line(502, TS, "message", after))
    assert tail_of(path, 5, 64 * 1024) is None  # a seq gap
    path.write_bytes(data + encode_line(501, TS, "message", after))
    assert tail_of(path, 5, 64 * 1024) is not None


def test_a_limit_below_one_is_refused(tmp_path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(plain_session(1))
    with pytest.raises(ValueError, match="limit"):
        tail_of(path, 0, 1024)
