"""Property: whatever sequence an agent appends, replay returns exactly the model-visible sequence.

Sessions are generated (messages with none, one or several reasoning blocks, reasoning
sent as records of its own, parallel tool calls, outputs, superseding outputs, reused
call ids, compactions), appended through the
writer, stopped, and replayed; the expectation comes from a small reference
model written here, independently of shared.rebuild.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from reader_service.replay import DigestStatus, replay_file, stream_replay
from rollout.v1 import records_pb2, writer_pb2
from shared.digest import canonical_message
from shared.session_meta import SessionSpec
from shared.stop_kinds import StopKind
from shared.wire import append_payloads
from writer_service.committer import CommitConfig, Durability
from writer_service.sessions import SessionLedger, WriterConfig

TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
# A small pool of ids, so that reused ids and superseding outputs are common.
CALL_IDS = st.sampled_from(["call_a", "call_b", "call_c"])


@st.composite
def sessions(draw: st.DrawFn) -> list[tuple[Any, ...]]:
    """A list of operations an agent performs, each valid for the writer at its point."""
    ops: list[tuple[Any, ...]] = []
    issued: list[str] = []
    for _ in range(draw(st.integers(1, 25))):
        kind = draw(
            st.sampled_from(["user", "assistant", "assistant", "output", "output", "compact", "reasoning"])
        )
        if kind == "user":
            ops.append(("user", draw(TEXT)))
        elif kind == "reasoning":
            ops.append(("reasoning", draw(TEXT)))
        elif kind == "assistant":
            calls = draw(st.lists(CALL_IDS, max_size=3, unique=True))
            reasoning = draw(st.lists(TEXT, max_size=3))
            as_blocks = draw(st.booleans())  # one block may also travel as reasoning_blocks
            ops.append(("assistant", draw(TEXT), reasoning, calls, as_blocks))
            issued.extend(calls)
        elif kind == "output" and issued:
            ops.append(("output", draw(st.sampled_from(issued)), draw(TEXT)))
        elif kind == "compact":
            replacement = draw(
                st.none() | st.lists(st.tuples(st.sampled_from(["user", "assistant"]), TEXT), max_size=3)
            )
            ops.append(("compact", draw(TEXT), replacement))
            issued = []  # the writer refuses outputs for calls the compaction dropped
    return ops


def reference(ops: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
    """The model-visible sequence by the rules of docs/spec.md §3, written out plainly."""
    messages: list[dict[str, Any]] = []
    output_at: dict[str, int | None] = {}
    pending: list[dict[str, Any]] = []  # reasoning records waiting for the next assistant message
    for op in ops:
        if op[0] == "user":
            messages.append({"role": "user", "content": op[1]})
        elif op[0] == "reasoning":
            pending.append({"content": op[1]})
        elif op[0] == "assistant":
            _, text, reasoning, calls, _ = op
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if calls:
                message["tool_calls"] = [
                    {"id": c, "type": "function", "function": {"name": "tool", "arguments": "{}"}}
                    for c in calls
                ]
            blocks = pending + [{"content": block} for block in reasoning]
            pending = []
            if len(blocks) == 1:
                message["reasoning"] = blocks[0]
            elif blocks:
                message["reasoning"] = blocks
            messages.append(message)
            for call in calls:
                output_at[call] = None
        elif op[0] == "output":
            _, call, text = op
            output = {"role": "tool", "content": text, "tool_call_id": call}
            if output_at.get(call) is None:
                if call in output_at:
                    output_at[call] = len(messages)
                messages.append(output)
            else:
                messages[output_at[call]] = output
        else:
            _, summary, replacement = op
            output_at = {}
            pending = []  # a compaction leaves earlier reasoning dangling
            if replacement is None:
                messages = [{"role": "user", "content": summary}]
            else:
                messages = [{"role": role, "content": text} for role, text in replacement]
    return messages


def to_record(op: tuple[Any, ...]) -> writer_pb2.AppendRecord:
    if op[0] == "user":
        return writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="user", text=op[1]))
    if op[0] == "reasoning":
        return writer_pb2.AppendRecord(reasoning=records_pb2.Reasoning(content=op[1]))
    if op[0] == "assistant":
        _, text, reasoning, calls, as_blocks = op
        message = records_pb2.ChatMessage(role="assistant", text=text)
        for call in calls:
            message.tool_calls.add(
                id=call, type="function", function=records_pb2.FunctionCall(name="tool", arguments="{}")
            )
        if len(reasoning) == 1 and not as_blocks:
            message.reasoning.content = reasoning[0]
        else:
            message.reasoning_blocks.extend(records_pb2.Reasoning(content=block) for block in reasoning)
        return writer_pb2.AppendRecord(message=message)
    if op[0] == "output":
        return writer_pb2.AppendRecord(
            message=records_pb2.ChatMessage(role="tool", text=op[2], tool_call_id=op[1])
        )
    _, summary, replacement = op
    compacted = records_pb2.Compacted(summary=summary)
    if replacement is not None:
        compacted.replacement_history.SetInParent()
        for role, text in replacement:
            compacted.replacement_history.messages.add(role=role, text=text)
    return writer_pb2.AppendRecord(compacted=compacted)


async def write_session(root: Path, ops: list[tuple[Any, ...]]) -> Path:
    config = WriterConfig(data_dir=root, commit=CommitConfig(durability=Durability.UNSAFE_NO_FSYNC))
    ledger = SessionLedger(config)
    try:
        sid, _ = await ledger.create_session(SessionSpec())
        for op in ops:  # one request per op: outputs may answer calls of earlier requests
            await ledger.append(sid, [append_payloads(to_record(op), 0)])
        await ledger.stop(sid, StopKind.PAUSED, "property")
        return ledger.root.locate(sid)[1]
    finally:
        await ledger.close()


REUSED_ID = [
    ("assistant", "t1", [], ["call_a"], False),
    ("output", "call_a", "first turn"),
    ("assistant", "t2", ["why"], ["call_a"], False),
    ("output", "call_a", "second turn"),
    ("output", "call_a", "second turn, retried"),
]
# Codex's shape: reasoning items sent one by one before the answer, then a message carrying two blocks.
SEVERAL_REASONING = [
    ("user", "q"),
    ("reasoning", "first"),
    ("reasoning", "second"),
    ("assistant", "a", [], ["call_a"], False),
    ("output", "call_a", "out"),
    ("assistant", "b", ["third", "fourth"], [], True),
]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(ops=REUSED_ID)
@example(ops=SEVERAL_REASONING)
@given(ops=sessions())
def test_replay_equals_the_reference_model_and_the_checkpoint_verifies(ops) -> None:
    """Replay (one read and streamed) equals the reference sequence, canonically; the checkpoint verifies."""
    with tempfile.TemporaryDirectory() as folder:
        path = asyncio.run(write_session(Path(folder), ops))
        expected = [canonical_message(m) for m in reference(ops)]
        result = replay_file(path)
        assert [canonical_message(m) for m in result.rebuilt.messages] == expected
        assert result.digest_status == DigestStatus.VERIFIED
        streamed: list[bytes] = []
        summary = None
        for _, payloads, last in stream_replay(path, chunk_bytes=64):
            streamed.extend(canonical_message(m) for m in payloads)
            summary = last
        assert streamed == expected
        assert summary is not None
        assert summary.digest_status == DigestStatus.VERIFIED
        assert summary.rebuilt.superseded_outputs == result.rebuilt.superseded_outputs
