"""What a record line is, one rule (shared.records.record_of_line): the rebuild, the tails, the
watch, the listing, the writer's reopen and its forks all take the same lines for records; and
where a line's seq is read without parsing it (shared.records.line_seq), writer and reader read it alike."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

import reader_service.listing_index
import reader_service.watch
import shared.records
import shared.session_meta
import shared.tail
import writer_service.fork_points
import writer_service.idempotency
import writer_service.retractions
import writer_service.session_cache
from reader_service.listing_index import Count, count_messages
from reader_service.watch import parse_line, start_offset
from rollout.v1 import records_pb2, writer_pb2
from shared.layout import DataRoot
from shared.naming import build_file_name, new_session_id
from shared.rebuild import rebuild
from shared.records import encode_line, record_of_line
from shared.session_meta import SessionSpec, read_session_meta
from shared.tail import read_tail
from shared.wire import append_payloads
from tests.data_roots import session_file, session_path
from writer_service.fork_points import find_fork_point
from writer_service.session_index import build_index
from writer_service.sessions import SessionLedger, WriterConfig

TS = "2026-11-30T10:00:00.000000Z"
GOOD = encode_line(1, TS, "message", {"role": "user", "content": "hi"})[:-1]

#: Lines (without their newline) and whether each holds a record.
LINES: list[tuple[bytes, bool]] = [
    (GOOD, True),
    (b"\x00\x00\x00" + GOOD, True),  # NUL bytes a crash left before a record
    (encode_line(1, TS, "a_newer_type", {})[:-1], True),  # unknown types are records (kept)
    (GOOD.replace(b'"hi"', b'"ho"'), True),  # its line check fails: a damaged record, still one
    (b'{"v":1,"seq":1,"ts":"x","type":"message","payload":{}}', True),  # no check: an older line
    (b"", False),
    (b"\x00\x00", False),
    (b"not json", False),
    (b"{}", False),
    (b"[1,2]", False),
    (b'{"seq":"1","type":"message","payload":{}}', False),
    (b'{"seq":true,"type":"message","payload":{}}', False),
    (b'{"seq":1.0,"type":"message","payload":{}}', False),
    (b'{"seq":1,"type":7,"payload":{}}', False),
    (b'{"seq":1,"type":"message","payload":[]}', False),
    (b'{"seq":1,"type":"message"}', False),
    (b'\x00{"seq":1,"type":"message"', False),
]


@pytest.mark.parametrize(("raw", "is_record"), LINES)
def test_a_record_is_an_object_with_integer_seq_string_type_and_object_payload(
    raw: bytes, is_record: bool
) -> None:
    """NUL bytes before it are skipped; a failed line check is damage, not "no record"."""
    assert (record_of_line(raw) is not None) is is_record


@pytest.mark.parametrize(("raw", "is_record"), LINES)
def test_the_rebuild_takes_the_same_lines_for_records(raw: bytes, is_record: bool) -> None:
    """The rebuild's inline parse (its hot loop) counts a line as a record exactly when record_of_line does."""
    head = encode_line(0, TS, "session_meta", {"session_id": "s", "tenant": "t"})
    assert rebuild(head + raw + b"\n").records == 1 + is_record


_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.floats(allow_nan=False),
    st.text(max_size=3),
    st.just({}),
    st.just([]),
)


@given(
    fields=st.fixed_dictionaries(
        {},
        optional={
            "v": st.just(1),
            "seq": st.one_of(st.integers(0, 9), _VALUES),
            "ts": st.just(TS),
            "type": st.one_of(st.sampled_from(["message", "stop", "a_newer_type"]), _VALUES),
            "payload": st.one_of(st.just({"role": "user", "content": "x"}), _VALUES),
        },
    ),
    nuls=st.integers(0, 3),
    cut=st.integers(0, 4),
)
def test_the_rebuild_and_record_of_line_agree_on_any_object(
    fields: dict[str, Any], nuls: int, cut: int
) -> None:
    """Any JSON object, with NUL bytes before it or its end cut off: a record for both or for neither."""
    raw = b"\x00" * nuls + orjson.dumps(fields)
    raw = raw[: len(raw) - cut] if cut else raw
    head = encode_line(0, TS, "session_meta", {"session_id": "s", "tenant": "t"})
    assert rebuild(head + raw + b"\n").records == 1 + (record_of_line(raw) is not None)


def write_session(data_dir: Path, lines: list[bytes]) -> Path:
    """A session file with its real on-disk name: a session_meta line, then ``lines`` as given."""
    session_id = new_session_id()
    path = session_path(data_dir, session_id, build_file_name(datetime(2026, 11, 30, tzinfo=UTC), session_id))
    path.write_bytes(
        b"".join([encode_line(0, TS, "session_meta", {"session_id": session_id, "tenant": "t"}), *lines])
    )
    return path


def user_line(seq: int, text: str) -> bytes:
    return encode_line(seq, TS, "message", {"role": "user", "content": text})


def _tail_records(path: Path) -> Any:
    fd = os.open(path, os.O_RDONLY)
    try:
        return read_tail(fd, want=1).records
    finally:
        os.close(fd)


def _watched_seq(path: Path) -> Any:
    return parse_line(path.read_bytes().splitlines()[1]).seq


def _fork_point(path: Path) -> Any:
    try:
        return find_fork_point(path, 1, None).seq
    except Exception as error:
        return type(error).__name__


def _preview(path: Path) -> Any:
    return count_messages(path, Count(0, 0, "", False)).preview


def _meta(path: Path) -> Any:
    return read_session_meta(path)


#: Each place that reads lines, and a reading of a session file that depends on which lines are records.
USERS: list[tuple[Any, Callable[[Path], Any]]] = [
    (shared.tail, _tail_records),  # the writer's index and the reader's stop facts
    (reader_service.watch, _watched_seq),
    (writer_service.fork_points, _fork_point),
    (reader_service.listing_index, _preview),
    (shared.session_meta, _meta),
]


@pytest.mark.parametrize(("module", "read"), USERS, ids=[module.__name__ for module, _ in USERS])
def test_each_reader_of_lines_decides_with_the_shared_rule(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, module: Any, read: Callable[[Path], Any]
) -> None:
    """Each module takes its records through shared.records.record_of_line: a rule that took no line
    for a record changes what it reads."""
    path = write_session(data_dir, [user_line(1, "hello"), user_line(2, "again")])
    assert module.record_of_line is shared.records.record_of_line
    honest = read(path)
    monkeypatch.setattr(module, "record_of_line", lambda raw: None)
    assert read(path) != honest


def test_the_writer_reopens_a_session_with_the_records_the_reader_sees(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lines appended after the writer saved a session's state, one of them with NUL bytes before
    it, are records for the reopening writer as for the rebuild: the tool call on it is open, so
    its output is taken, at the seq after the reader's last."""
    output = writer_pb2.AppendRecord(
        message=records_pb2.ChatMessage(role="tool", text="ok", tool_call_id="c1")
    )
    seen: list[bytes] = []
    monkeypatch.setattr(
        writer_service.session_cache, "record_of_line", lambda raw: seen.append(raw) or record_of_line(raw)
    )

    async def scenario() -> None:
        config = WriterConfig(data_dir=data_dir)
        ledger = SessionLedger(config)
        try:
            session_id, _ = await ledger.create_session(SessionSpec())
            await ledger.append(
                session_id,
                [
                    append_payloads(
                        writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="user", text="a")), 0
                    )
                ],
            )
        finally:
            await ledger.close()  # saves the session's state at the end of its file
        path = session_file(data_dir, session_id)
        payload = {
            "role": "assistant",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "run", "arguments": "{}"}}],
        }
        with path.open("ab") as handle:
            handle.write(b"\x00\x00" + encode_line(2, TS, "message", payload) + user_line(3, "b"))
        found = rebuild(path.read_bytes())
        assert (found.last_seq, found.unanswered_call_ids) == (3, ["c1"])

        ledger = SessionLedger(config, build_index(DataRoot(data_dir)))
        try:
            seqs, next_seq = await ledger.append(session_id, [append_payloads(output, 0)])
        finally:
            await ledger.close()
        assert (seqs, next_seq) == ([4], 5)

    asyncio.run(scenario())
    assert seen, "the writer read the lines after its saved state through record_of_line"


def _lookups(path: Path) -> tuple[Any, ...]:
    """What the writer's request lookup and retraction lookup, and the reader's watch bisection,
    find in a file of 3,000 records, the first marked with request id r1."""
    end = path.stat().st_size
    fd = os.open(path, os.O_RDONLY)
    try:
        offset = start_offset(fd, 2500, end)
    finally:
        os.close(fd)
    request = writer_service.idempotency.find_request(path, "r1", 1, end)
    records = writer_service.retractions._records_at(path, end, {2990}, {})  # no line starts known: read back
    return request, sorted(records), offset > 0


@pytest.mark.parametrize(
    "module",
    [writer_service.idempotency, writer_service.retractions, reader_service.watch],
    ids=lambda module: module.__name__,
)
def test_writer_and_reader_find_a_seq_in_a_file_with_the_shared_rule(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, module: Any
) -> None:
    """The writer's searches back (request ids, retraction references) and the reader's watch
    bisection read a line's seq with shared.records.line_seq: with it changed, each finds nothing."""
    first = encode_line(1, TS, "message", {"role": "user", "content": "a"}, request=("r1", "0" * 32))
    path = write_session(data_dir, [first, *(user_line(seq, "x" * 100) for seq in range(2, 3001))])
    assert module.line_seq is shared.records.line_seq
    honest = _lookups(path)
    assert honest == ((1, "0" * 32), [2990], True)
    monkeypatch.setattr(module, "line_seq", lambda raw: None)
    assert _lookups(path) != honest
