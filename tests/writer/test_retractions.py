"""The writer's half of a retraction (writer_service.retractions): references checked against the
file, the retracted calls' ids written into the record and taken out of the writer's view."""

from __future__ import annotations

import asyncio

import orjson
import pytest

import writer_service.sessions as sessions
from reader_service.replay import DigestStatus, replay_file
from rollout.v1 import records_pb2, writer_pb2
from shared.errors import RecordValidationError
from shared.session_meta import SessionSpec
from shared.stop_kinds import StopKind
from shared.wire import append_payloads
from writer_service.retractions import RECENT_RECORDS
from writer_service.sessions import SessionLedger, WriterConfig


def record(**fields) -> list:
    return append_payloads(writer_pb2.AppendRecord(**fields), 0)


def user(text: str) -> list:
    return record(message=records_pb2.ChatMessage(role="user", text=text))


def call(call_id: str) -> list:
    message = records_pb2.ChatMessage(role="assistant")
    message.tool_calls.add(id=call_id, type="function", function=records_pb2.FunctionCall(name="f"))
    return record(message=message)


def output(call_id: str) -> list:
    return record(message=records_pb2.ChatMessage(role="tool", tool_call_id=call_id, text="done"))


def retract(*references: dict) -> list:
    refs = [records_pb2.MessageRef(**reference) for reference in references]
    return record(retraction=records_pb2.Retraction(messages=refs, reason="test"))


def compaction(*history: str) -> list:
    messages = [records_pb2.ChatMessage(role="user", text=text) for text in history]
    compacted = records_pb2.Compacted(summary="s")
    if history:
        compacted.replacement_history.messages.extend(messages)
    return record(compacted=compacted)


async def append(ledger, session_id, *records):
    seqs, _, durable = await ledger.enqueue(session_id, list(records))
    await durable
    return seqs


def lines_of(ledger, session_id):
    entry = ledger.index.get(session_id)
    return [
        orjson.loads(line)
        for line in ledger.root.session_path(session_id, entry.name).read_bytes().splitlines()
    ]


def test_a_retracted_call_cannot_be_answered_and_its_id_is_in_the_record(data_dir) -> None:
    """The writer writes the retracted messages' call ids into the record; an output for them is then
    refused, while a call that was not retracted is still answered."""

    async def scenario():
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        try:
            sid, _ = await ledger.create_session(SessionSpec())
            await append(ledger, sid, call("gone"), call("kept"))
            await append(ledger, sid, retract({"seq": 1}))
            with pytest.raises(RecordValidationError, match="answers no tool call"):
                await append(ledger, sid, output("gone"))
            await append(ledger, sid, output("kept"))
            return lines_of(ledger, sid)
        finally:
            await ledger.close()

    lines = asyncio.run(scenario())
    assert lines[3]["type"] == "retraction"
    assert lines[3]["payload"] == {"messages": [{"seq": 1}], "reason": "test", "call_ids": ["gone"]}


def test_the_view_after_a_restart_still_excludes_the_retracted_call(data_dir) -> None:
    """Reopened by a new writer (its saved state and the lines after it), the retraction still holds."""

    async def first():
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        try:
            sid, _ = await ledger.create_session(SessionSpec())
            await append(ledger, sid, call("gone"))
            await append(ledger, sid, retract({"seq": 1}))
            return sid
        finally:
            await ledger.close()

    sid = asyncio.run(first())

    async def second():
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        try:
            with pytest.raises(RecordValidationError, match="answers no tool call"):
                await append(ledger, sid, output("gone"))
        finally:
            await ledger.close()

    asyncio.run(second())


@pytest.mark.parametrize(
    ("reference", "field"),
    [
        ({"seq": 9}, "not in the session"),
        ({"seq": 2}, "no message of the session"),  # the event at seq 2
        ({"seq": 3, "history_index": 5}, "no message of the session"),  # past the history's end
        ({"seq": 4}, "no message of the session"),  # a compaction with a history names entries only
        ({"seq": 0}, "must name a seq >= 1"),
    ],
)
@pytest.mark.parametrize("resolved_from", ["memory", "file"])
def test_a_reference_to_no_message_is_refused_and_nothing_is_written(
    data_dir, reference, field, resolved_from
) -> None:
    """INVALID_ARGUMENT naming records[i].retraction.messages[j]; the file is unchanged; alike when
    the writer resolves the references from the records it queued last and from the file (a
    writer that reopened the session)."""

    async def scenario():
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        try:
            sid, _ = await ledger.create_session(SessionSpec())
            await append(ledger, sid, user("a"))
            await append(ledger, sid, record(event=records_pb2.Event(kind="ui")))
            await append(ledger, sid, compaction("h0", "h1"))
            await append(ledger, sid, compaction("h2"))
            if resolved_from == "file":
                await ledger.close()
                ledger = SessionLedger(WriterConfig(data_dir=data_dir))
            before = len(lines_of(ledger, sid))
            with pytest.raises(RecordValidationError, match=field) as caught:
                await append(ledger, sid, user("b"), retract({"seq": 1}, reference))
            assert caught.value.index == 1
            assert caught.value.field.startswith("retraction.messages")
            return before, len(lines_of(ledger, sid))
        finally:
            await ledger.close()

    before, after = asyncio.run(scenario())
    assert before == after


def test_history_entries_and_summaries_are_retractable_and_stop_checkpoints_verify(data_dir) -> None:
    """Entries of a replacement history and a summary-only compaction can be named; the checkpoint
    Stop writes over a retracted view verifies on replay."""

    async def scenario():
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        try:
            sid, _ = await ledger.create_session(SessionSpec())
            await append(ledger, sid, compaction("h0", "h1"))
            await append(ledger, sid, retract({"seq": 1, "history_index": 0}))
            await append(ledger, sid, user("after"))
            await append(ledger, sid, retract({"seq": 3}))
            result = await ledger.stop(sid, StopKind.PAUSED, "")
            summary_only, _ = await ledger.create_session(SessionSpec())
            await append(ledger, summary_only, compaction())
            await append(ledger, summary_only, retract({"seq": 1}))
            await ledger.stop(summary_only, StopKind.PAUSED, "")
            paths = [ledger.root.session_path(s, ledger.index.get(s).name) for s in (sid, summary_only)]
            return result, paths
        finally:
            await ledger.close()

    result, (path, summary_path) = asyncio.run(scenario())
    replay = replay_file(path)
    assert [m["content"] for m in replay.rebuilt.messages] == ["h1"]
    assert result.message_count == 1
    assert replay.digest_status is DigestStatus.VERIFIED
    emptied = replay_file(summary_path)
    assert (emptied.rebuilt.messages, emptied.digest_status) == ([], DigestStatus.VERIFIED)


def test_a_retraction_of_records_the_writer_queued_last_reads_no_file(data_dir, monkeypatch) -> None:
    """A retraction naming records this writer queued last (a pop) is resolved from memory, with
    the same call ids as from the file; one naming a record it no longer remembers (after
    RECENT_RECORDS later records, or after a reopen) is resolved from the file."""
    from_file: list[int] = []
    resolve = sessions.resolve_retractions

    def counted(*args):
        from_file.append(len(args[3]))
        return resolve(*args)

    monkeypatch.setattr(sessions, "resolve_retractions", counted)

    async def scenario():
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        try:
            sid, _ = await ledger.create_session(SessionSpec())
            await append(ledger, sid, call("c1"), compaction("h0"), call("c2"))
            await append(
                ledger, sid, retract({"seq": 1}), retract({"seq": 3}, {"seq": 2, "history_index": 0})
            )
            assert from_file == []
            for _ in range(RECENT_RECORDS):  # events take no place among the remembered records
                await append(ledger, sid, record(event=records_pb2.Event(kind="ui")))
            await append(ledger, sid, retract({"seq": 1}))
            assert from_file == []
            await ledger.close()
            ledger = SessionLedger(WriterConfig(data_dir=data_dir))  # lines queued before a reopen
            for number in range(RECENT_RECORDS):
                await append(ledger, sid, user(f"u{number}"))
            await append(ledger, sid, call("c3"))
            await append(ledger, sid, retract({"seq": 1}))  # named again: still a message, read back
            assert from_file == [1]
            await ledger.close()
            ledger = SessionLedger(WriterConfig(data_dir=data_dir))
            await append(ledger, sid, retract({"seq": 3}))
            assert from_file == [1, 1]
            return lines_of(ledger, sid)
        finally:
            await ledger.close()

    lines = asyncio.run(scenario())
    retractions = [line["payload"] for line in lines if line["type"] == "retraction"]
    assert [payload["call_ids"] for payload in retractions] == [["c1"], ["c2"], ["c1"], ["c1"], ["c2"]]


def test_a_run_of_pops_reads_each_named_line_where_it_starts(data_dir, monkeypatch) -> None:
    """Retractions naming ever older records (a run of pops past what the writer remembers) read
    the named line where it starts, never the file back to it, with the same call ids as a read
    back gives; after a reopen, a line queued before it is found by reading back."""
    import writer_service.retractions as retractions

    read_back: list[int] = []
    lines_before = retractions.lines_before

    def counted(fd, end):
        read_back.append(end)
        return lines_before(fd, end)

    monkeypatch.setattr(retractions, "lines_before", counted)
    pops = RECENT_RECORDS + 40

    async def scenario():
        ledger = SessionLedger(WriterConfig(data_dir=data_dir))
        try:
            sid, _ = await ledger.create_session(SessionSpec())
            seqs = await append(ledger, sid, *(call(f"c{number}") for number in range(pops + 1)))
            for seq in reversed(seqs[1:]):  # newest first, as pops go
                await append(ledger, sid, retract({"seq": seq}))
            assert read_back == []
            await ledger.close()
            ledger = SessionLedger(WriterConfig(data_dir=data_dir))
            await append(ledger, sid, retract({"seq": seqs[0]}))
            assert len(read_back) == 1
            return lines_of(ledger, sid)
        finally:
            await ledger.close()

    lines = asyncio.run(scenario())
    retracted = [line["payload"]["call_ids"] for line in lines if line["type"] == "retraction"]
    assert retracted == [[f"c{number}"] for number in range(pops, -1, -1)]


def test_line_starts_forget_the_oldest_and_restart_on_a_gap() -> None:
    """LineStarts: spans of contiguous noted lines; a gap in seqs or bytes starts over; past twice
    LINE_STARTS the oldest are forgotten."""
    from writer_service.retractions import LINE_STARTS, LineStarts

    starts = LineStarts()
    starts.note(5, 100, [b"a\n", b"bb\n"])
    starts.note(7, 105, [b"ccc\n"])
    assert starts.spans([4, 5, 6, 7, 8]) == {5: (100, 102), 6: (102, 105), 7: (105, 109)}
    starts.note(9, 109, [b"d\n"])  # seq 8 never noted: start over
    assert starts.spans([5, 7, 9]) == {9: (109, 111)}
    starts.note(10, 200, [b"e\n"])  # bytes not contiguous: start over
    assert starts.spans([9, 10]) == {10: (200, 202)}
    many = [b"x\n"] * (2 * LINE_STARTS + 1)
    starts.note(11, 202, many)
    known = starts.spans(range(10, 12 + 2 * LINE_STARTS))
    assert min(known) == 12 + LINE_STARTS  # 2 * LINE_STARTS + 2 held, the oldest LINE_STARTS + 2 dropped
    assert max(known) == 11 + 2 * LINE_STARTS


def test_remembered_records_skip_records_naming_no_message_and_count_every_line(monkeypatch) -> None:
    """RecentRecords keeps only records a retraction may name, and forgets one once more than
    RECENT_BYTES of lines (remembered or not) follow it: memory never resolves a reference the
    file's read back would not reach."""
    import writer_service.retractions as retractions
    from shared.records import RecordType
    from writer_service.retractions import RecentRecords

    monkeypatch.setattr(retractions, "RECENT_BYTES", 100)
    recent = RecentRecords()
    message = (RecordType.MESSAGE, {"role": "user", "content": "x"})
    event = (RecordType.EVENT, {"kind": "ui"})
    recent.remember(1, [message, event], [b"m" * 10, b"e" * 50])
    assert recent.targets_at([1]) == {1: {None: ()}}
    assert recent.targets_at([2]) is None  # an event names no message: not kept
    recent.remember(3, [event], [b"e" * 41])  # 101 bytes follow seq 1's start now
    assert recent.targets_at([1]) is None
