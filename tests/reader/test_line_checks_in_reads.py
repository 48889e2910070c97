"""Every read path sees the line checks: the replay cache's extension, the bounded replay, verify."""

from __future__ import annotations

from pathlib import Path

from reader_service.replay import DigestStatus, verify_findings, verify_session
from reader_service.replay_cache import ReplayCache
from shared.digest import digest
from shared.rebuild import rebuild
from tests.reader.test_replay_cache import Session, bounded_reply, cached_reply, line, reference_reply


def pinned_checkpoint(session: Session) -> None:
    """The checkpoint and stop a writer's Stop appends: message digest and lines digest of a rebuild."""
    found = rebuild(session.path.read_bytes())
    session.append(
        "agent_checkpoint",
        {
            "digest": digest(found.messages),
            "message_count": len(found.messages),
            "covers_seq": session.seq - 1,
            "stop_kind": "paused",
            "lines_digest": found.lines_digest,
        },
    )
    session.append("stop", {"stop_kind": "paused", "reason": "test", "checkpoint_seq": session.seq - 1})


def test_the_replay_cache_extension_finds_a_failed_line_check_as_a_fresh_rebuild_does(tmp_path: Path) -> None:
    """A line appended after a cached replay whose check fails is reported by the extended entry, byte for
    byte as a fresh rebuild and the bounded replay report it."""
    session = Session(tmp_path / "s.jsonl")
    session.append("message", {"role": "user", "content": "hello"})
    pinned_checkpoint(session)
    cache = ReplayCache(1 << 24)
    first = cache.rendered(session.path)
    assert first is not None
    assert first.facts.digest_status is DigestStatus.VERIFIED
    session.write(
        line(session.seq, "message", {"role": "user", "content": "later"}).replace(b"later", b"LATER")
    )
    session.seq += 1
    pinned_checkpoint(session)
    reply = cached_reply(cache, session.path)
    assert cache.counts["extended"] == 1, "the entry was extended, not rebuilt"
    assert reply == reference_reply(session.path) == bounded_reply(session.path)
    assert b"line_check_failed" in reply
    facts = cache.rendered(session.path)
    assert facts is not None
    assert facts.facts.digest_status is DigestStatus.MISMATCH, "a checkpoint over damage never verifies"


def test_verify_counts_lines_without_a_check_and_calls_them_no_damage(tmp_path: Path) -> None:
    """An older file (no line checks) verifies OK; the report says how many lines carry no check."""
    session = Session(tmp_path / "s.jsonl")
    older = b"".join(
        raw[: raw.rindex(b',"crc32c":')] + b"}\n"
        for raw in session.path.read_bytes().splitlines(keepends=True)
    )
    older += b'{"v":1,"seq":1,"ts":"2026-11-30T10:00:00.000000Z","type":"message","payload":{"role":"user","content":"a"}}\n'
    session.path.write_bytes(older)
    facts = verify_session(session.path)
    ok, findings = verify_findings(facts)
    assert ok, findings
    assert "2 lines carry no line check (written before line checks existed)" in findings
    assert facts.rebuilt.unchecked_lines == 2
