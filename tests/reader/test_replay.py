"""Exact replay, budgets, streaming, the memory view and verification (docs/spec.md §3-§5)."""

from __future__ import annotations

import gc
from pathlib import Path

import orjson

import reader_service.memory_view
import reader_service.replay
import reader_service.replay_cache
from reader_service import wire
from reader_service.memory_view import memory_view
from reader_service.replay import DigestStatus, replay_file, stream_replay, verify_findings, verify_session
from reader_service.replay_cache import ReplayCache
from rollout.v1 import reader_pb2, records_pb2, writer_pb2
from shared.digest import canonical_message, digest
from shared.rebuild import DegradedKind, rebuild
from shared.rebuild_index import MessageSource, index_rebuild
from shared.records import encode_line
from tests.conftest import run_rollout
from tests.data_roots import session_file
from writer_service.rebuilt_facts import file_facts

TS = "2026-11-30T10:00:00.000000Z"
META = {"session_id": "01a22c15-89a6-7d3d-b5b7-165622bd350c", "tenant": "t", "created_at": TS}


def lines(*records: tuple[str, dict]) -> bytes:
    data = encode_line(0, TS, "session_meta", META)
    for seq, (record_type, payload) in enumerate(records, start=1):
        data += encode_line(seq, TS, record_type, payload)
    return data


def msg(role: str, text: str, **extra) -> tuple[str, dict]:
    return ("message", {"role": role, "content": text, **extra})


def assistant_call(call_id: str) -> tuple[str, dict]:
    call = {"id": call_id, "type": "function", "function": {"name": "shell", "arguments": "{}"}}
    return ("message", {"role": "assistant", "tool_calls": [call]})


def write(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "session.jsonl"
    path.write_bytes(data)
    return path


def test_replay_round_trips_messages_with_reasoning_byte_for_byte(writer, reader) -> None:
    """What was appended (system, reasoning, tool calls and outputs) is what replay returns, canonically."""
    sid = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    sent = [
        records_pb2.ChatMessage(role="system", text="You are terse."),
        records_pb2.ChatMessage(role="user", text="héllo ✓ 🚀"),
        records_pb2.ChatMessage(
            role="assistant",
            text="",
            reasoning=records_pb2.Reasoning(content="think…", signature="sig", encrypted="enc=="),
            tool_calls=[
                records_pb2.ToolCall(
                    id="c1",
                    type="function",
                    function=records_pb2.FunctionCall(name="ls", arguments='{"a":1}'),
                )
            ],
        ),
        records_pb2.ChatMessage(role="tool", tool_call_id="c1", text="x" * 100_000),
        records_pb2.ChatMessage(role="assistant", text="done", name="helper"),
    ]
    writer.Append(
        writer_pb2.AppendRequest(session_id=sid, records=[writer_pb2.AppendRecord(message=m) for m in sent])
    )
    replay = reader.GetReplay(reader_pb2.ReplayRequest(session_id=sid))
    assert list(replay.messages) == sent
    assert len(replay.messages[3].text) == 100_000, "tool outputs are never truncated by replay"


def test_over_budget_returns_the_error_and_the_replay_together(writer, reader) -> None:
    """Over the token budget the answer carries REPLAY_TOO_LARGE (estimate vs budget) and the messages."""
    sid = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    records = [writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="user", text="word " * 400))] * 3
    writer.Append(writer_pb2.AppendRequest(session_id=sid, records=records))
    replay = reader.GetReplay(reader_pb2.ReplayRequest(session_id=sid, token_budget=100))
    assert replay.HasField("too_large")
    assert replay.too_large.token_budget == 100
    assert replay.too_large.estimated_tokens == replay.estimated_tokens > 100
    assert len(replay.messages) == 3
    within = reader.GetReplay(reader_pb2.ReplayRequest(session_id=sid, token_budget=10_000))
    assert not within.HasField("too_large")


def test_duplicate_output_keeps_the_last_in_place(tmp_path) -> None:
    """A second output for one call replaces the first at its position and is counted."""
    data = lines(
        assistant_call("c1"),
        msg("tool", "Error: cancelled", tool_call_id="c1"),
        msg("user", "retry"),
        msg("tool", "real result", tool_call_id="c1"),
    )
    result = replay_file(write(tmp_path, data))
    assert [m["content"] for m in result.rebuilt.messages[1:]] == ["real result", "retry"]
    assert result.rebuilt.superseded_outputs == 1


def test_reused_call_id_in_a_later_turn_does_not_overwrite_the_earlier_pair(tmp_path) -> None:
    """An id reused by a later call opens a new pairing; the earlier turn's output stays."""
    data = lines(
        assistant_call("c1"),
        msg("tool", "turn one", tool_call_id="c1"),
        assistant_call("c1"),
        msg("tool", "turn two", tool_call_id="c1"),
    )
    result = replay_file(write(tmp_path, data))
    assert [m.get("content") for m in result.rebuilt.messages] == [None, "turn one", None, "turn two"]
    assert result.rebuilt.superseded_outputs == 0


def test_malformed_line_and_nul_run_in_the_middle_hide_nothing_after_them(tmp_path) -> None:
    """A truncated object and a NUL run mid-file are reported with line and offset; later lines replay."""
    head = lines(msg("user", "before"))
    broken = b'{"v":1,"seq":2,"ts":"' + TS.encode() + b'","type":"message","payl\n'
    nul = b"\x00" * 64 + b"\n"
    tail = encode_line(2, TS, "message", {"role": "assistant", "content": "after"})
    tail += encode_line(3, TS, "message", {"role": "user", "content": "still here"})
    path = write(tmp_path, head + broken + nul + tail)
    result = replay_file(path)
    assert [m["content"] for m in result.rebuilt.messages] == ["before", "after", "still here"]
    kinds = {(e.kind, e.line, e.offset) for e in result.rebuilt.degraded}
    assert (DegradedKind.UNPARSEABLE_LINE, 3, len(head)) in kinds
    assert (DegradedKind.NUL_RUN, 4, len(head) + len(broken)) in kinds


def test_unknown_record_type_is_kept_and_reported(tmp_path) -> None:
    """A record type from a newer writer is preserved and reported, never dropped and never a crash."""
    path = write(tmp_path, lines(msg("user", "a"), ("hologram", {"x": 1}), msg("assistant", "b")))
    result = replay_file(path)
    assert [m["content"] for m in result.rebuilt.messages] == ["a", "b"]
    (unknown,) = result.rebuilt.unknown_records
    assert (unknown.record_type, unknown.payload) == ("hologram", {"x": 1})
    assert any(
        e.kind == DegradedKind.UNKNOWN_RECORD_TYPE and "hologram" in e.detail for e in result.rebuilt.degraded
    )


def test_replay_never_calls_the_memory_view(tmp_path, monkeypatch) -> None:
    """Replay and streamed replay work with the memory view disabled, and return untruncated content."""

    def forbidden(*_args, **_kwargs):
        raise AssertionError("replay must not use the memory view")

    monkeypatch.setattr(reader_service.memory_view, "memory_view", forbidden)
    data = lines(msg("system", "sys"), assistant_call("c1"), msg("tool", "y" * 50_000, tool_call_id="c1"))
    path = write(tmp_path, data)
    result = replay_file(path)
    assert result.rebuilt.messages[0]["role"] == "system"
    assert len(result.rebuilt.messages[2]["content"]) == 50_000
    assert sum(len(p) for _, p, _ in stream_replay(path)) == 3
    assert "memory_view" not in vars(reader_service.replay)


def test_a_compacted_session_stopped_replays_verified(writer, reader) -> None:
    """After a compaction the checkpoint (over the file's rebuilt view) verifies on replay."""
    sid = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    old = [
        writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="user", text=f"old {i}"))
        for i in range(5)
    ]
    compacted = records_pb2.Compacted(summary="the gist")
    compacted.replacement_history.messages.add(role="user", text="the gist, as the model sees it")
    writer.Append(
        writer_pb2.AppendRequest(session_id=sid, records=[*old, writer_pb2.AppendRecord(compacted=compacted)])
    )
    writer.Append(
        writer_pb2.AppendRequest(
            session_id=sid,
            records=[writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="assistant", text="new"))],
        )
    )
    stopped = writer.Stop(writer_pb2.StopRequest(session_id=sid, stop_kind=records_pb2.STOP_KIND_PAUSED))
    assert stopped.message_count == 2
    replay = reader.GetReplay(reader_pb2.ReplayRequest(session_id=sid))
    assert [m.text for m in replay.messages] == ["the gist, as the model sees it", "new"]
    assert replay.digest_status == reader_pb2.DIGEST_STATUS_VERIFIED
    assert any(d.kind == "compacted_rebuild" for d in replay.degraded)


def test_stream_replay_matches_get_replay_in_many_chunks(writer, reader) -> None:
    """StreamReplay returns the same messages as GetReplay, in several chunks with a final summary."""
    sid = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    big = [
        writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="user", text=f"{i} " + "z" * 200_000))
        for i in range(12)
    ]
    writer.Append(writer_pb2.AppendRequest(session_id=sid, records=big))
    writer.Stop(writer_pb2.StopRequest(session_id=sid, stop_kind=records_pb2.STOP_KIND_COMPLETED))
    whole = reader.GetReplay(reader_pb2.ReplayRequest(session_id=sid))
    chunks = list(reader.StreamReplay(reader_pb2.ReplayRequest(session_id=sid)))
    assert len(chunks) > 2
    streamed = [m for chunk in chunks for m in chunk.messages]
    assert streamed == list(whole.messages)
    assert [c.first_index for c in chunks[:-1]] == sorted(c.first_index for c in chunks[:-1])
    summary = chunks[-1].summary
    assert summary.digest_status == reader_pb2.DIGEST_STATUS_VERIFIED
    assert summary.computed_digest == whole.computed_digest
    assert summary.estimated_tokens == whole.estimated_tokens


def test_index_rebuild_agrees_with_rebuild_on_damaged_files(tmp_path) -> None:
    """The bounded-memory index and the one-read rebuild give the same messages and degraded ledger."""
    data = lines(
        msg("user", "a"),
        ("reasoning", {"content": "r"}),
        assistant_call("c1"),
        ("compacted", {"summary": "s", "replacement_history": [{"role": "user", "content": "kept"}]}),
        msg("tool", "late", tool_call_id="c1"),
        ("reasoning", {"content": "dangling"}),
    )
    data += (
        b"\x00\x00\x00garbage\n" + encode_line(9, TS, "message", {"role": "user", "content": "z"}) + b'{"torn'
    )
    path = write(tmp_path, data)
    whole = rebuild(data)
    indexed = index_rebuild(path)
    with MessageSource(path) as source:
        materialized = [source.message(handle) for handle in indexed.messages]
    assert [canonical_message(m) for m in materialized] == [canonical_message(m) for m in whole.messages]
    assert indexed.degraded == whole.degraded
    assert indexed.committed_bytes == whole.committed_bytes


def test_memory_view_drops_system_shortens_reasoning_and_truncates_outputs_at_code_points() -> None:
    """The memory view is lossy on purpose and says what it cut, never splitting a character."""
    reasoning = {"content": "ü" * 500}
    messages = [
        {"role": "system", "content": "rules"},
        {"role": "assistant", "content": "", "reasoning": reasoning},
        {"role": "tool", "tool_call_id": "c", "content": "€" * 30 + "🚀" * 10},
        {"role": "tool", "tool_call_id": "d", "content": [{"type": "text", "text": "ab" * 20}]},
    ]
    view = memory_view(messages, max_tool_output_chars=35, max_reasoning_chars=10)
    assert view.dropped_system_messages == 1
    assert view.shortened_reasoning == 1
    assert view.truncated_tool_outputs == 2
    assert view.messages[0]["reasoning"]["content"] == "ü" * 10 + "…"
    text = view.messages[1]["content"]
    assert text.startswith("€" * 30 + "🚀" * 5 + "\n")
    assert view.messages[1]["truncation_marker"] == "[truncated: kept 35 of 40 characters]"
    text.encode("utf-8")  # every character whole
    assert view.messages[2]["content"][-1]["text"] == "[truncated: kept 35 of 40 characters]"
    assert messages[2]["content"] == "€" * 30 + "🚀" * 10, "the input is not modified"


def test_memory_view_shortens_each_of_several_reasoning_blocks() -> None:
    """With several reasoning blocks, each long one is shortened and counted; short ones stay whole."""
    blocks = [{"content": "a" * 50, "encrypted": "e"}, {"content": "short"}, {"content": "b" * 50}]
    view = memory_view([{"role": "assistant", "content": "x", "reasoning": blocks}], max_reasoning_chars=10)
    assert view.messages[0]["reasoning"] == [
        {"content": "a" * 10 + "…"},
        {"content": "short"},
        {"content": "b" * 10 + "…"},
    ]
    assert view.shortened_reasoning == 2


def test_replay_returns_every_reasoning_block_and_a_stop_verifies(writer, reader) -> None:
    """Several reasoning records before one answer all come back, in order, unary and streamed; Stop verifies."""
    sid = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    blocks = [records_pb2.Reasoning(content=f"step {n}", encrypted=f"enc-{n}") for n in range(3)]
    records = [
        writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="user", text="q")),
        writer_pb2.AppendRecord(reasoning=blocks[0]),  # sent one by one, as Codex writes them
        writer_pb2.AppendRecord(reasoning=blocks[1]),
        writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="assistant", text="a")),
        writer_pb2.AppendRecord(
            message=records_pb2.ChatMessage(role="assistant", text="b", reasoning_blocks=blocks[1:])
        ),
    ]
    writer.Append(writer_pb2.AppendRequest(session_id=sid, records=records))
    writer.Stop(writer_pb2.StopRequest(session_id=sid, stop_kind=records_pb2.STOP_KIND_PAUSED))
    replay = reader.GetReplay(reader_pb2.ReplayRequest(session_id=sid))
    assert [list(m.reasoning_blocks) for m in replay.messages] == [[], blocks[:2], blocks[1:]]
    assert replay.digest_status == reader_pb2.DIGEST_STATUS_VERIFIED
    assert not [entry for entry in replay.degraded if entry.kind == "dangling_reasoning"]
    streamed = [
        m for chunk in reader.StreamReplay(reader_pb2.ReplayRequest(session_id=sid)) for m in chunk.messages
    ]
    assert streamed == list(replay.messages)


#: A paused session the release before several-reasoning support wrote: two reasoning blocks before one
#: answer, and the checkpoint it computed over its reading (only the last block attached).
_SINGLE_REASONING_ERA = [
    msg("user", "q"),
    ("reasoning", {"content": "r1", "encrypted": "e1"}),
    ("reasoning", {"content": "r2", "encrypted": "e2"}),
    msg("assistant", "a"),
]
_SINGLE_REASONING_DIGEST = "sha256:v1:21c7c09823eef09ae7278e9e841365ef70a606fee9e3b30fbb16ca9e19ea2683"


def _checkpointed(records: list[tuple[str, dict]], checkpoint_digest: str) -> bytes:
    checkpoint = {"digest": checkpoint_digest, "message_count": 2, "covers_seq": 4, "stop_kind": "paused"}
    return lines(*records, ("agent_checkpoint", checkpoint))


def test_a_checkpoint_of_the_single_reasoning_era_still_verifies_with_a_note(tmp_path) -> None:
    """An older checkpoint over the last-block-only reading verifies (noted); replay returns both blocks."""
    path = write(tmp_path, _checkpointed(_SINGLE_REASONING_ERA, _SINGLE_REASONING_DIGEST))
    for summary in (replay_file(path), verify_session(path)):
        assert summary.digest_status == DigestStatus.VERIFIED
        [note] = [e for e in summary.rebuilt.degraded if e.kind == DegradedKind.SINGLE_REASONING_CHECKPOINT]
        assert (note.line, note.offset) == (6, len(lines(*_SINGLE_REASONING_ERA)))
    assert replay_file(path).rebuilt.messages[1]["reasoning"] == [
        {"content": "r1", "encrypted": "e1"},
        {"content": "r2", "encrypted": "e2"},
    ]
    assert verify_findings(verify_session(path))[0]


def test_a_changed_block_under_an_older_checkpoint_still_mismatches(tmp_path) -> None:
    """The older reading forgives nothing else: a changed last block makes the same checkpoint mismatch."""
    changed = [*_SINGLE_REASONING_ERA]
    changed[2] = ("reasoning", {"content": "r2 edited", "encrypted": "e2"})
    path = write(tmp_path, _checkpointed(changed, _SINGLE_REASONING_DIGEST))
    assert replay_file(path).digest_status == DigestStatus.MISMATCH
    assert verify_session(path).digest_status == DigestStatus.MISMATCH


def test_the_writer_and_the_reader_read_an_older_checkpoint_by_one_rule(tmp_path) -> None:
    """An older checkpoint (no lines digest) is sound for the writer's reopen exactly when a replay
    verifies it: the single-reasoning reading is accepted by both, a message count that is not the
    rebuilt one or a changed block by neither (shared.rebuild.read_checkpoint)."""
    plain = [msg("user", "q"), msg("assistant", "a")]
    plain_digest = digest(rebuild(lines(*plain)).messages)
    changed = [*_SINGLE_REASONING_ERA]
    changed[2] = ("reasoning", {"content": "r2 edited", "encrypted": "e2"})
    cases = {
        "exact": (plain, plain_digest, 2, True),
        "single reasoning": (_SINGLE_REASONING_ERA, _SINGLE_REASONING_DIGEST, 2, True),
        "count not the rebuilt one": (plain, plain_digest, 3, False),
        "single reasoning, count not the rebuilt one": (
            _SINGLE_REASONING_ERA,
            _SINGLE_REASONING_DIGEST,
            3,
            False,
        ),
        "changed block": (changed, _SINGLE_REASONING_DIGEST, 2, False),
    }
    for name, (records, checkpoint_digest, count, sound) in cases.items():
        checkpoint = {
            "digest": checkpoint_digest,
            "message_count": count,
            "covers_seq": len(records),
            "stop_kind": "paused",
        }
        path = tmp_path / f"{name}.jsonl"
        path.write_bytes(lines(*records, ("agent_checkpoint", checkpoint)))
        expected = DigestStatus.VERIFIED if sound else DigestStatus.MISMATCH
        assert replay_file(path).digest_status == expected, name
        damage = file_facts(path, with_digest=False).damage
        if sound:
            assert damage is None, name
        else:
            assert damage is not None, name
            assert damage.kind == DegradedKind.CHECKPOINT_MISMATCH, name


def test_memory_view_rpc(writer, reader) -> None:
    """GetMemoryView answers the lossy view with its counters."""
    sid = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    writer.Append(
        writer_pb2.AppendRequest(
            session_id=sid,
            records=[
                writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="system", text="s")),
                writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="user", text="u")),
            ],
        )
    )
    view = reader.GetMemoryView(reader_pb2.MemoryViewRequest(session_id=sid))
    assert [m.role for m in view.messages] == ["user"]
    assert view.dropped_system_messages == 1


def test_verify_reports_a_clean_session_ok_and_a_damaged_one_with_its_place(tmp_path) -> None:
    """VerifySession finds seq gaps and bad lines by line and byte, and checks the checkpoint."""
    good = lines(msg("user", "a"))
    good += encode_line(
        2,
        TS,
        "agent_checkpoint",
        {"digest": "sha256:v1:" + "0" * 64, "message_count": 1, "covers_seq": 1, "stop_kind": "paused"},
    )
    path = write(tmp_path, good)
    summary = verify_session(path)
    ok, findings = verify_findings(summary)
    assert summary.digest_status == DigestStatus.MISMATCH
    assert not ok
    assert any("does NOT verify" in f for f in findings)

    clean_path = tmp_path / "clean.jsonl"
    clean_path.write_bytes(lines(msg("user", "a"), msg("assistant", "b")))
    ok, findings = verify_findings(verify_session(clean_path))
    assert ok, findings

    gap_path = tmp_path / "gap.jsonl"
    gap = lines(msg("user", "a")) + encode_line(5, TS, "message", {"role": "user", "content": "b"})
    gap_path.write_bytes(gap)
    ok, findings = verify_findings(verify_session(gap_path))
    assert not ok
    assert any("seq_gap at line 3" in f and f"byte {len(lines(msg('user', 'a')))}" in f for f in findings)


def test_rollout_verify_command_exits_non_zero_on_problems(writer, reader_process, data_dir) -> None:
    """`rollout verify` prints its findings and exits 1 when the session is damaged."""
    sid = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    path = session_file(data_dir, sid)
    with path.open("ab") as handle:
        handle.write(b"not json\n")
        handle.write(
            orjson.dumps(
                {"v": 1, "seq": 1, "ts": TS, "type": "message", "payload": {"role": "user", "content": "x"}}
            )
            + b"\n"
        )
    result = run_rollout("verify", sid, "--reader", reader_process.address)
    assert result.returncode == 1, result.stderr
    assert "PROBLEMS FOUND" in result.stdout
    assert "unparseable_line at line 2" in result.stdout


def test_the_last_checkpoint_is_verified_against_the_sequence_as_it_stood_then(writer, reader) -> None:
    """Paused, resumed, then extended (and an output superseded after the checkpoint), or capped by
    max_messages: the returned sequence differs from the one the checkpoint covers, and the checkpoint
    still verifies, in GetReplay and in StreamReplay (docs/spec.md §5: the digest of the last checkpoint)."""
    sid = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id

    def append(*messages: records_pb2.ChatMessage) -> None:
        records = [writer_pb2.AppendRecord(message=message) for message in messages]
        writer.Append(writer_pb2.AppendRequest(session_id=sid, records=records))

    call = records_pb2.ToolCall(id="c1", type="function", function=records_pb2.FunctionCall(name="ls"))
    append(
        records_pb2.ChatMessage(role="user", text="list"),
        records_pb2.ChatMessage(role="assistant", tool_calls=[call]),
        records_pb2.ChatMessage(role="tool", tool_call_id="c1", text="first output"),
    )
    stopped = writer.Stop(writer_pb2.StopRequest(session_id=sid, stop_kind=records_pb2.STOP_KIND_PAUSED))
    writer.Resume(writer_pb2.ResumeRequest(session_id=sid))
    append(
        records_pb2.ChatMessage(role="tool", tool_call_id="c1", text="late output"),
        records_pb2.ChatMessage(role="assistant", text="done"),
    )
    for max_messages in (0, 2):
        request = reader_pb2.ReplayRequest(session_id=sid, max_messages=max_messages)
        replay = reader.GetReplay(request)
        expected = ["list", "", "late output", "done"][: max_messages or None]
        assert [m.text for m in replay.messages] == expected
        assert replay.digest_status == reader_pb2.DIGEST_STATUS_VERIFIED
        assert replay.computed_digest == stopped.digest
        summary = list(reader.StreamReplay(request))[-1].summary
        assert summary.digest_status == reader_pb2.DIGEST_STATUS_VERIFIED
        assert summary.computed_digest == stopped.digest


def test_a_replay_renders_its_messages_under_the_collector_pause(tmp_path, monkeypatch) -> None:
    """The replay cache parses and renders a file's messages with the collector paused (it would
    otherwise walk every payload once more), and resumes it afterwards."""
    path = write(tmp_path, lines(msg("system", "be brief"), msg("user", "hi")))
    seen: list[bool] = []
    real = reader_service.replay_cache.message_entry

    def spying_message_entry(payload: dict) -> bytes:
        seen.append(gc.isenabled())
        return real(payload)

    monkeypatch.setattr(reader_service.replay_cache, "message_entry", spying_message_entry)
    rendered = ReplayCache(1 << 20).rendered(path)
    assert rendered is not None
    reply = reader_pb2.ReplayResponse.FromString(wire.replay_reply("s", rendered.entries, rendered.facts, 0))
    assert [m.text for m in reply.messages] == ["be brief", "hi"]
    assert seen == [False, False]
    assert gc.isenabled()
