"""The replay cache (docs/spec.md §5 derived state): the same bytes as a fresh rebuild, never a replaced file."""

from __future__ import annotations

import gc
import os
import tracemalloc
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reader_service import wire
from reader_service.replay import DigestStatus, replay_file, stream_replay
from reader_service.replay_cache import ReplayCache
from rollout.v1 import reader_pb2, records_pb2
from shared.digest import digest
from shared.rebuild import rebuild
from shared.records import encode_line
from shared.wire import message_from_payload

TS = "2026-11-30T10:00:00.000000Z"
SID = "01a22c15-89a6-7d3d-b5b7-165622bd350c"
META = {"session_id": SID, "tenant": "t", "created_at": TS}
STATUS = {
    DigestStatus.VERIFIED: reader_pb2.DIGEST_STATUS_VERIFIED,
    DigestStatus.MISMATCH: reader_pb2.DIGEST_STATUS_MISMATCH,
    DigestStatus.NO_CHECKPOINT: reader_pb2.DIGEST_STATUS_NO_CHECKPOINT,
}


def reference_reply(path: Path, token_budget: int = 0, max_messages: int = 0) -> bytes:
    """The ReplayResponse a one-read, in-memory replay gives, built field by field."""
    facts = replay_file(path, max_messages)
    rebuilt = facts.rebuilt
    reply = reader_pb2.ReplayResponse(
        session_id=SID,
        messages=[message_from_payload(payload) for payload in rebuilt.messages],
        degraded=[
            records_pb2.DegradedEntry(kind=str(e.kind), line=e.line, offset=e.offset, detail=e.detail)
            for e in rebuilt.degraded
        ],
        superseded_outputs=rebuilt.superseded_outputs,
        digest_status=STATUS[facts.digest_status],
        computed_digest=facts.computed_digest,
        estimated_tokens=facts.estimated_tokens,
    )
    checkpoint = rebuilt.last_checkpoint
    if checkpoint is not None:
        reply.last_checkpoint.CopyFrom(
            records_pb2.AgentCheckpoint(
                digest=checkpoint.digest,
                message_count=checkpoint.message_count,
                covers_seq=checkpoint.covers_seq,
                stop_kind=checkpoint.stop_kind,
                seq=checkpoint.seq,
                lines_digest=checkpoint.lines_digest,
            )
        )
    if token_budget and facts.estimated_tokens > token_budget:
        reply.too_large.estimated_tokens = facts.estimated_tokens
        reply.too_large.token_budget = token_budget
    return reply.SerializeToString(deterministic=True)


def cached_reply(cache: ReplayCache, path: Path, token_budget: int = 0, max_messages: int = 0) -> bytes:
    rendered = cache.rendered(path, max_messages)
    assert rendered is not None
    return wire.replay_reply(SID, rendered.entries, rendered.facts, token_budget)


def bounded_reply(path: Path, token_budget: int = 0, max_messages: int = 0) -> bytes:
    return wire.replay_reply_from_stream(SID, stream_replay(path, max_messages), token_budget, 1 << 30)


def line(seq: int, record_type: str, payload: dict) -> bytes:
    return encode_line(seq, TS, record_type, payload)


class Session:
    """A session file grown record by record, as the writer appends (and damage, as disks do)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seq = 1
        path.write_bytes(line(0, "session_meta", META))

    def write(self, data: bytes) -> None:
        with self.path.open("ab") as handle:
            handle.write(data)

    def append(self, record_type: str, payload: dict) -> None:
        self.write(line(self.seq, record_type, payload))
        self.seq += 1

    def checkpoint(self, honest: bool) -> None:
        """A Stop's pair: a checkpoint over the rebuilt sequence (or a wrong digest), then a stop record."""
        messages = rebuild(self.path.read_bytes()).messages
        value = digest(messages) if honest else "sha256:v1:" + "0" * 64
        covers = self.seq - 1
        self.append(
            "agent_checkpoint",
            {"digest": value, "message_count": len(messages), "covers_seq": covers, "stop_kind": "paused"},
        )
        self.append("stop", {"stop_kind": "paused", "reason": "test", "checkpoint_seq": self.seq - 1})


CALLS = ["call_a", "call_b"]
OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("user"), st.text(max_size=8)),
        st.tuples(st.just("parts"), st.text(max_size=8)),
        st.tuples(st.just("call"), st.sampled_from(CALLS)),
        st.tuples(st.just("output"), st.sampled_from(CALLS), st.text(max_size=8)),
        st.tuples(st.just("reasoning"), st.text(max_size=8)),
        st.tuples(st.just("assistant"), st.text(max_size=8)),
        st.tuples(st.just("compact"), st.booleans()),
        st.tuples(st.just("checkpoint"), st.booleans()),
        st.tuples(st.just("damage"), st.sampled_from([b"{trunc\n", b"\x00\x00\x00\n", b"[1]\n"])),
        st.tuples(st.just("gap")),
        st.tuples(st.just("unknown")),
        st.tuples(st.just("half"), st.integers(1, 30)),
        st.tuples(st.just("retract"), st.integers(1, 12), st.sampled_from([None, 0, 1])),
    ),
    min_size=1,
    max_size=14,
)


def apply(session: Session, operation: tuple) -> None:
    kind = operation[0]
    if kind == "user":
        session.append("message", {"role": "user", "content": operation[1]})
    elif kind == "parts":
        session.append("message", {"role": "user", "content": [{"type": "input_text", "text": operation[1]}]})
    elif kind == "call":
        call = {"id": operation[1], "type": "function", "function": {"name": "run", "arguments": "{}"}}
        session.append("message", {"role": "assistant", "tool_calls": [call]})
    elif kind == "output":
        session.append("message", {"role": "tool", "tool_call_id": operation[1], "content": operation[2]})
    elif kind == "reasoning":
        session.append("reasoning", {"content": operation[1], "encrypted": "e"})
    elif kind == "assistant":
        session.append("message", {"role": "assistant", "content": operation[1]})
    elif kind == "compact":
        history = [{"role": "user", "content": "kept"}] if operation[1] else None
        payload = (
            {"summary": "gist"} if history is None else {"summary": "gist", "replacement_history": history}
        )
        session.append("compacted", payload)
    elif kind == "checkpoint":
        session.checkpoint(operation[1])
    elif kind == "damage":
        session.write(operation[1])
    elif kind == "gap":
        session.seq += 2
    elif kind == "unknown":
        session.append("hologram", {"x": 1})
    elif kind == "retract":  # a seq back from the end; an index names a history entry (or nothing)
        reference = {"seq": max(1, session.seq - operation[1])}
        if operation[2] is not None:
            reference["index"] = operation[2]
        session.append("retraction", {"messages": [reference], "reason": "pop", "call_ids": []})
    else:  # a record being written: its first bytes now, the rest with the next operation
        whole = line(session.seq, "message", {"role": "user", "content": "in flight"})
        cut = min(operation[1], len(whole) - 1)
        session.write(whole[:cut])
        session.pending = whole[cut:]  # type: ignore[attr-defined]
        session.seq += 1


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations=OPERATIONS, cap=st.sampled_from([0, 2]), budget=st.sampled_from([0, 5]))
def test_cached_replies_equal_a_fresh_rebuild_after_every_change(tmp_path_factory, operations, cap, budget):
    """After each append, compaction, retraction, checkpoint, damage or half-written record, the cached reply
    (extended from the new bytes only) is byte for byte the reply of a fresh one-read rebuild, and of
    the bounded-memory path."""
    session = Session(tmp_path_factory.mktemp("cache") / "session.jsonl")
    cache = ReplayCache(1 << 20)
    for operation in operations:
        pending = getattr(session, "pending", b"")
        if pending:
            session.write(pending)
            session.pending = b""  # type: ignore[attr-defined]
        apply(session, operation)
        expected = reference_reply(session.path, budget, cap)
        assert cached_reply(cache, session.path, budget, cap) == expected
        assert cached_reply(cache, session.path, budget, cap) == expected  # unchanged: the same answer
    assert bounded_reply(session.path, budget, cap) == expected
    assert cache.counts["rebuilt"] == 1, "the file was only ever extended"


def test_an_unchanged_or_grown_file_is_not_read_again(tmp_path) -> None:
    """An unchanged file is answered from the entry; a grown one by reading its new bytes only."""
    session = Session(tmp_path / "s.jsonl")
    session.append("message", {"role": "user", "content": "hello"})
    cache = ReplayCache(1 << 20)
    cached_reply(cache, session.path)
    cached_reply(cache, session.path)
    session.append("message", {"role": "assistant", "content": "hi"})
    reply = reader_pb2.ReplayResponse.FromString(cached_reply(cache, session.path))
    assert [m.text for m in reply.messages] == ["hello", "hi"]
    assert cache.counts == {
        "unchanged": 1,
        "extended": 1,
        "rebuilt": 1,
        "evicted": 0,
        "tail": 0,
        "tail_unsettled": 0,
        "tail_repeated": 0,
    }


def _texts(cache: ReplayCache, path: Path) -> list[str]:
    return [m.text for m in reader_pb2.ReplayResponse.FromString(cached_reply(cache, path)).messages]


def _written(path: Path, *texts: str) -> bytes:
    data = line(0, "session_meta", META)
    for seq, text in enumerate(texts, start=1):
        data += line(seq, "message", {"role": "user", "content": text})
    return data


def test_a_replaced_file_is_rebuilt_never_served_from_the_cache(tmp_path) -> None:
    """A file replaced by another (a new inode: renamed over it), even longer and sharing its first
    records, is rebuilt from its first byte."""
    path = tmp_path / "s.jsonl"
    path.write_bytes(_written(path, "one", "two"))
    cache = ReplayCache(1 << 20)
    assert _texts(cache, path) == ["one", "two"]
    other = tmp_path / "other.jsonl"
    other.write_bytes(_written(path, "ONE", "two", "three"))
    os.replace(other, path)
    assert _texts(cache, path) == ["ONE", "two", "three"]
    assert cache.counts["rebuilt"] == 2


def test_a_truncated_file_is_rebuilt(tmp_path) -> None:
    """A file cut below what the entry applied is rebuilt, never answered with the lost records."""
    path = tmp_path / "s.jsonl"
    path.write_bytes(_written(path, "one", "two", "three"))
    cache = ReplayCache(1 << 20)
    assert _texts(cache, path) == ["one", "two", "three"]
    with path.open("r+b") as handle:
        handle.truncate(len(_written(path, "one")))
    assert _texts(cache, path) == ["one"]


def test_a_file_cut_and_grown_again_in_place_is_rebuilt(tmp_path) -> None:
    """Cut back and rewritten in place (same inode) past its old length, with another last record:
    the entry's last committed line no longer matches, so the file is rebuilt."""
    path = tmp_path / "s.jsonl"
    path.write_bytes(_written(path, "one", "two"))
    cache = ReplayCache(1 << 20)
    assert _texts(cache, path) == ["one", "two"]
    with path.open("r+b") as handle:
        handle.truncate(len(_written(path, "one")))
        handle.seek(0, os.SEEK_END)
        handle.write(_written(path, "one", "TWO", "three")[len(_written(path, "one")) :])
    assert _texts(cache, path) == ["one", "TWO", "three"]


def test_a_file_rewritten_in_place_at_the_same_size_is_rebuilt(tmp_path) -> None:
    """A record changed in place (same inode, same size, a later modification time) is seen."""
    path = tmp_path / "s.jsonl"
    path.write_bytes(_written(path, "abc", "def"))
    cache = ReplayCache(1 << 20)
    assert _texts(cache, path) == ["abc", "def"]
    stat = path.stat()
    with path.open("r+b") as handle:
        handle.write(_written(path, "xyz", "def"))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert _texts(cache, path) == ["xyz", "def"]


def test_entries_beyond_the_budget_are_evicted_least_recently_used_first(tmp_path) -> None:
    """The cache holds what its budget allows, dropping the least recently used entry; a file over
    its size limit is not cached at all (the caller replays it in bounded memory)."""
    paths = []
    for number in range(3):
        path = tmp_path / f"s{number}.jsonl"
        path.write_bytes(_written(path, "x" * 2000))
        paths.append(path)
    cache = ReplayCache(budget_bytes=10_000, max_file_bytes=8_000)
    for path in paths:
        cached_reply(cache, path)
    assert cache.counts["evicted"] == 1
    assert cache.charged_bytes <= 10_000
    cached_reply(cache, paths[2])  # still held
    cached_reply(cache, paths[0])  # evicted: built again
    assert cache.counts["rebuilt"] == 4
    big = tmp_path / "big.jsonl"
    big.write_bytes(_written(big, "y" * 9000))
    assert cache.rendered(big) is None


def test_an_entry_holds_about_what_it_is_charged(tmp_path) -> None:
    """The memory an entry keeps is close to what the budget charges it: the bytes it keeps are
    exact-size copies, never a serializer's output buffer (orjson's holds 16 KiB per message)."""
    session = Session(tmp_path / "s.jsonl")
    for number in range(200):
        text = f"message {number}: " + "é—" * 300
        session.append("message", {"role": "user" if number % 2 else "assistant", "content": text})
    cache = ReplayCache(budget_bytes=1 << 30)
    cached_reply(cache, session.path)  # the modules' own first-use allocations are not counted
    cache = ReplayCache(budget_bytes=1 << 30)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        assert cache.rendered(session.path) is not None
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert cache.charged_bytes > 200 * 1000
    assert held < 1.5 * cache.charged_bytes
