"""Every line checkable on its own, checkpoints pinning the lines they cover (docs/spec.md §1 additions)."""

from __future__ import annotations

import os
from pathlib import Path

import crc32c
import orjson
import pytest

from shared.digest import LINES_DIGEST_PREFIX, digest
from shared.rebuild import DAMAGE_KINDS, DegradedKind, Rebuilder, rebuild
from shared.rebuild_index import index_rebuild
from shared.records import LINE_CHECK_MARK, encode_line, line_check, parse_record
from shared.tail import read_tail

TS = "2026-11-30T10:15:30.123456Z"
META = {"session_id": "01a22c15-89a6-7d3d-b5b7-165622bd350c", "tenant": "t", "created_at": TS}


def user(text: str) -> tuple[str, dict]:
    return ("message", {"role": "user", "content": text})


def event(kind: str, body: dict) -> tuple[str, dict]:
    return ("event", {"kind": kind, "body": body})


def lines_of(*records: tuple[str, dict], start: int = 0) -> list[bytes]:
    """Encoded lines (line checks included): session_meta, then ``records``."""
    body = [("session_meta", META), *records] if start == 0 else list(records)
    return [encode_line(start + seq, TS, kind, payload) for seq, (kind, payload) in enumerate(body)]


def unchecked(line: bytes) -> bytes:
    """The same record as an older writer wrote it: no ``crc32c`` key."""
    record = orjson.loads(line)
    del record["crc32c"]
    return orjson.dumps(record) + b"\n"


def checkpoint_line(seq: int, data: bytes) -> bytes:
    """The checkpoint a Stop writes after ``data``: message digest and lines digest of a rebuild."""
    found = rebuild(data)
    payload = {
        "digest": digest(found.messages),
        "message_count": len(found.messages),
        "covers_seq": seq - 1,
        "stop_kind": "paused",
        "lines_digest": found.lines_digest,
    }
    return encode_line(seq, TS, "agent_checkpoint", payload)


def damage(result) -> list:
    return [entry for entry in result.degraded if entry.kind in DAMAGE_KINDS]


def test_every_written_line_ends_with_the_crc32c_of_the_bytes_before_it() -> None:
    """A line ends with ``,"crc32c":N}``: N is the CRC32C of every byte before that key; the rest is the record."""
    line = encode_line(7, TS, "message", {"role": "user", "content": "héllo", "crc32c": 5})
    assert line.endswith(b"}\n")
    covered, _, rest = line[:-1].rpartition(LINE_CHECK_MARK)
    assert int(rest[:-1]) == crc32c.crc32c(covered)
    assert covered + b"}" == orjson.dumps(
        {
            "v": 1,
            "seq": 7,
            "ts": TS,
            "type": "message",
            "payload": {"role": "user", "content": "héllo", "crc32c": 5},
        }
    )
    assert line_check(line[:-1], orjson.loads(line)) is True


def test_a_changed_byte_anywhere_in_a_line_fails_its_check() -> None:
    """Changing any one byte of a line (that still parses) makes its check fail; no change passes."""
    line = encode_line(3, TS, "event", {"kind": "tool_result", "body": {"out": "abcdefgh"}})[:-1]
    for position in range(len(line)):
        changed = line[:position] + bytes([line[position] ^ 0x01]) + line[position + 1 :]
        try:
            record = orjson.loads(changed)
        except orjson.JSONDecodeError:
            continue
        if not isinstance(record, dict):
            continue
        assert line_check(changed, record) is not True, f"byte {position} changed unnoticed"


def test_a_line_without_a_check_is_unchecked_and_a_nested_key_of_that_name_is_not_the_check() -> None:
    """Older lines (no ``crc32c``) read as before: counted unchecked, never damage; a payload key named
    crc32c is never taken for the line's check."""
    lines = [unchecked(line) for line in lines_of(user("a"), event("x", {"crc32c": 5}), user("b"))]
    nested = lines[2][:-1]
    assert line_check(nested, orjson.loads(nested)) is None
    found = rebuild(b"".join(lines))
    assert damage(found) == []
    assert found.unchecked_lines == 4
    assert rebuild(b"".join(lines_of(user("a")))).unchecked_lines == 0


def test_a_payload_key_named_crc32c_inside_a_checked_line_is_not_taken_for_its_check(tmp_path: Path) -> None:
    """The check is the line's last ``,"crc32c":`` (docs/spec.md §1 addition): a payload key of that
    name written earlier in the same line never makes a sound line look damaged."""
    lines = lines_of(user("a"), event("x", {"a": 1, "crc32c": 5}), user("b"))
    assert lines[2].count(LINE_CHECK_MARK) == 2
    assert line_check(lines[2][:-1], orjson.loads(lines[2])) is True
    path = tmp_path / "session.jsonl"
    path.write_bytes(b"".join(lines))
    for found in (rebuild(b"".join(lines)), index_rebuild(path)):
        assert damage(found) == []
        assert found.unchecked_lines == 0


@pytest.mark.parametrize("rebuilder", ["rebuild", "index_rebuild"])
def test_a_changed_message_in_an_open_session_is_damage_with_line_and_offset(
    tmp_path: Path, rebuilder
) -> None:
    """A byte changed in a message of a never-stopped file is a line_check_failed entry naming its line and byte."""
    lines = lines_of(user("first"), user("second"), user("third"))
    lines[2] = lines[2].replace(b"second", b"secend")
    data = b"".join(lines)
    path = tmp_path / "s.jsonl"
    path.write_bytes(data)
    found = rebuild(data) if rebuilder == "rebuild" else index_rebuild(path)
    (entry,) = damage(found)
    assert (entry.kind, entry.line, entry.offset) == (
        DegradedKind.LINE_CHECK_FAILED,
        3,
        len(lines[0] + lines[1]),
    )
    assert found.damage == entry
    assert len(found.messages) == 3, "a damaged line is still replayed, and reported"


def test_a_changed_event_body_under_a_checkpoint_makes_that_checkpoint_unsound() -> None:
    """Records outside the message sequence are covered too: a changed event before a checkpoint fails
    its line check and the checkpoint is no longer sound (it can never verify)."""
    lines = lines_of(user("a"), event("tool_result", {"out": "42"}))
    lines.append(checkpoint_line(3, b"".join(lines)))
    sound = rebuild(b"".join(lines))
    assert damage(sound) == []
    assert sound.last_checkpoint is not None
    assert sound.last_checkpoint.sound
    lines[2] = lines[2].replace(b'"42"', b'"43"')
    found = rebuild(b"".join(lines))
    assert [entry.kind for entry in damage(found)] == [DegradedKind.LINE_CHECK_FAILED]
    assert found.last_checkpoint is not None
    assert not found.last_checkpoint.sound


def test_the_lines_digest_finds_a_recomputed_check_an_unchecked_line_and_a_removed_line() -> None:
    """A checkpoint's lines digest pins every line before it: a line edited with its check recomputed, an
    edited line without a check, a removed line and an added line all fail it."""
    lines = lines_of(user("a"), event("x", {"n": 1}), user("b"))
    lines[1] = unchecked(lines[1])  # a line an older writer wrote, continued by this one
    lines.append(checkpoint_line(4, b"".join(lines)))
    assert orjson.loads(lines[-1])["payload"]["lines_digest"].startswith(LINES_DIGEST_PREFIX)
    assert damage(rebuild(b"".join(lines))) == []

    recomputed = list(lines)
    recomputed[2] = encode_line(2, TS, "event", {"kind": "x", "body": {"n": 2}})
    older_edit = list(lines)
    older_edit[1] = older_edit[1].replace(b'"a"', b'"A"')
    removed = lines[:3] + lines[4:]
    added = [*lines[:4], encode_line(4, TS, *user("c")), lines[4]]
    for name, variant in (
        ("recomputed", recomputed),
        ("older_edit", older_edit),
        ("removed", removed),
        ("added", added),
    ):
        found = rebuild(b"".join(variant))
        kinds = [entry.kind for entry in damage(found)]
        assert DegradedKind.LINES_DIGEST_MISMATCH in kinds, name
        (mismatch,) = [entry for entry in damage(found) if entry.kind == DegradedKind.LINES_DIGEST_MISMATCH]
        assert mismatch.line == len(variant), name
        assert found.last_checkpoint is not None, name
        assert not found.last_checkpoint.sound, name


def test_a_line_whose_check_is_recomputed_is_caught_by_a_later_checkpoint_only() -> None:
    """Without a checkpoint after it, a recomputed check passes (a check is no signature); with one, it fails."""
    lines = lines_of(user("a"), user("b"))
    forged = encode_line(1, TS, *user("A"))
    assert damage(rebuild(b"".join([lines[0], forged, lines[2]]))) == []
    lines.append(checkpoint_line(3, b"".join(lines)))
    lines[1] = forged
    assert [entry.kind for entry in damage(rebuild(b"".join(lines)))] == [DegradedKind.LINES_DIGEST_MISMATCH]


def test_parse_record_refuses_what_is_not_a_valid_record() -> None:
    """Valid JSON is not enough: an object without seq/type/payload or with a failed check is no record."""
    good = encode_line(1, TS, *user("a"))[:-1]
    assert parse_record(good) is not None
    assert parse_record(unchecked(good + b"\n")[:-1]) is not None
    for raw in (
        b"{}",
        b"[]",
        b'{"seq":"1","type":"message","payload":{}}',
        good.replace(b'"a"', b'"b"'),
        b"x",
    ):
        assert parse_record(raw) is None, raw


def test_a_tail_read_reports_a_record_whose_check_fails_with_its_offset(tmp_path: Path) -> None:
    """Tail reads (stop facts, the writer's index) report each record read whose check fails, by byte offset."""
    lines = lines_of(user("a"), user("b"), user("c"))
    lines[3] = lines[3].replace(b'"c"', b'"d"')
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"".join(lines))
    fd = os.open(path, os.O_RDONLY)
    try:
        tail = read_tail(fd, want=2, window=64)
    finally:
        os.close(fd)
    assert [record["seq"] for record in tail.records] == [3, 2]
    (entry,) = tail.damage
    assert (entry.kind, entry.offset) == (DegradedKind.LINE_CHECK_FAILED, len(b"".join(lines[:3])))
    assert not tail.clean_end, "a last line whose check fails is not a clean end"


def test_a_pass_fed_in_pieces_finds_what_one_pass_finds() -> None:
    """The replay cache feeds the rebuild as the file grows: any split into runs gives the same lines
    digest, checkpoints and damage as one pass (the first line is left out once, not per piece)."""
    lines = lines_of(user("a"), event("x", {"n": 1}))
    lines.append(checkpoint_line(3, b"".join(lines)))
    lines.append(encode_line(4, TS, *user("b")).replace(b'"b"', b'"B"'))
    lines.append(checkpoint_line(5, b"".join(lines)))
    data = b"".join(lines)
    whole = rebuild(data)
    assert [entry.kind for entry in damage(whole)] == [DegradedKind.LINE_CHECK_FAILED]
    raw = [line[:-1] for line in lines]
    for cut in range(len(raw) + 1):
        pass_ = Rebuilder()
        line_no, offset = pass_.run(raw[:cut])
        line_no, offset = pass_.run(raw[cut:], line_no, offset)
        found = pass_.finish(0)
        assert found.lines_digest == whole.lines_digest, cut
        assert found.degraded == whole.degraded, cut
