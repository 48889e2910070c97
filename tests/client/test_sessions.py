"""Sessions through rollout_client against a live pair: every record kind in and out as plain
dicts, the session life cycle, listings, and typed errors with their google.rpc details."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import orjson
import pytest

from rollout_client import (
    AsyncRolloutClient,
    Compaction,
    ConversationMemory,
    EncodedMessage,
    Event,
    FieldViolation,
    InvalidArgumentError,
    NotFoundError,
    RolloutClient,
    SessionStoppedError,
    TurnContext,
    assistant,
    developer,
    system,
    tool_call,
    tool_result,
    user,
)
from rollout_client._records import record_lines
from rollout_client.agents import LedgerSession
from tests.client.conftest import TEST_RETRY
from tests.conftest import REPO, start_service

CONVERSATION = [
    system("You are terse."),
    developer("Use tools."),
    user([{"type": "input_text", "text": "find x"}, {"type": "input_image", "detail": "low", "n": 3}]),
    assistant(
        "Looking.", tool_calls=[tool_call("call_1", "grep", '{"q": "x"}')], reasoning={"content": "one"}
    ),
    tool_result("call_1", "x found", is_error=True),
    assistant(
        tool_calls=[tool_call("call_2", "apply_patch", "*** Begin Patch", type="custom")],
        reasoning=[{"content": "a", "encrypted": "e1"}, {"content": "b", "signature": "s2"}],
    ),
    tool_result("call_2", [{"type": "text", "text": "patched"}]),
    assistant("Done.", reasoning=[{"content": "only block in a list"}]),
]


def test_messages_round_trip_exactly_through_append_and_replay(client) -> None:
    """What was appended is what replay returns: parts, tool calls, reasoning blocks, is_error."""
    session = client.create_session()
    result = session.append(*CONVERSATION, Event("token_count", {"input": 12}), TurnContext({"model": "m"}))
    assert result.seqs == (1, 2, 3, 5, 6, 9, 10, 12, 13, 14)
    assert result.next_seq == 15
    replay = session.replay()
    expected = [dict(message) for message in CONVERSATION]
    expected[-1]["reasoning"] = {"content": "only block in a list"}  # a list of one is stored as one block
    assert replay.messages == expected
    assert replay.digest_status == "no_checkpoint"
    assert list(session.stream_replay()) == expected


def test_encoded_messages_land_as_their_dicts_do_counting_their_reasoning_lines(client) -> None:
    """An EncodedMessage (the message's JSON, sent as is) lands exactly as the same message dict:
    the same seqs, reasoning blocks included, so a retry knows where its lines would be."""
    assert [record_lines(EncodedMessage(orjson.dumps(message))) for message in CONVERSATION] == [
        record_lines(message) for message in CONVERSATION
    ]
    as_dicts, encoded = client.create_session(), client.create_session()
    expected = as_dicts.append(*CONVERSATION)
    result = encoded.append(*(EncodedMessage(orjson.dumps(message)) for message in CONVERSATION))
    assert (result.seqs, result.next_seq) == (expected.seqs, expected.next_seq)
    assert encoded.replay().messages == as_dicts.replay().messages


def test_stream_replay_gives_the_summary_after_the_last_chunk(client) -> None:
    """A streamed replay's summary arrives with its last chunk (message count, digest status)."""
    session = client.create_session()
    session.append(*CONVERSATION)
    session.stop("completed", "done")
    stream = session.stream_replay()
    assert stream.summary is None
    messages = list(stream)
    assert stream.summary is not None
    assert (stream.summary.message_count, stream.summary.digest_status) == (len(messages), "verified")


def test_compactions_reset_the_replayed_sequence(client) -> None:
    """A compaction with a replacement history resets replay to it; without one, to the summary."""
    session = client.create_session()
    session.append(user("a"), assistant("b"), Compaction("short", [user("a, b")]))
    assert session.replay().messages == [user("a, b")]
    session.append(Compaction("the gist"))
    replay = session.replay()
    assert replay.messages == [{"role": "user", "content": "the gist"}]
    assert [entry.kind for entry in replay.degraded].count("compacted_rebuild") == 2


def test_over_budget_replay_carries_too_large_and_the_messages(client) -> None:
    """replay(token_budget) over budget returns too_large with the estimate, and every message."""
    session = client.create_session()
    session.append(user("x" * 400))
    replay = session.replay(token_budget=10)
    assert replay.too_large is not None
    assert replay.too_large.token_budget == 10
    assert replay.too_large.estimated_tokens > 10
    assert replay.messages == [user("x" * 400)]


def test_stop_resume_fork_stop_facts_and_verify(client) -> None:
    """The life cycle: stop (checkpoint verifies), stop facts, resume closing a call, fork at a seq."""
    session = client.create_session()
    session.append(user("go"), assistant(tool_calls=[tool_call("call_9", "sleep")]))
    stopped = session.stop("paused", "lunch")
    facts = session.stop_facts()
    assert (facts.found, facts.stop_kind, facts.reason, facts.replayable) == (True, "paused", "lunch", True)
    assert facts.checkpoint is not None
    assert facts.checkpoint.digest == stopped.digest
    assert session.verify().ok
    with pytest.raises(SessionStoppedError):
        session.append(user("refused"))
    resumed = session.resume()
    assert resumed.closed_call_ids == ("call_9",)
    assert resumed.previous_stop_kind == "paused"
    assert session.append(user("continues")).seqs == (resumed.next_seq,)
    fork = session.fork(at_seq=1)
    assert fork.id != session.id
    assert fork.replay().messages == [user("go")]
    assert fork.append(user("what if")).seqs == (fork.next_seq - 1,)


def test_a_retried_stop_whose_answer_was_lost_takes_the_stop_as_its_own(client) -> None:
    """Stop retried after a lost answer finds its own stop in the stop facts and returns it."""
    session = client.create_session()
    session.append(user("x"))
    first = session.stop("completed", "all done")

    async def writer_stub():
        return session.core.client.writer_stub  # the stub of the client's own loop

    stub = client.run(writer_stub())
    real_stop = stub.Stop
    calls = []

    async def lost_then_real(request, **options):
        calls.append(request)
        if len(calls) == 1:
            from tests.client.test_errors import unavailable

            raise unavailable()
        return await real_stop(request, **options)

    stub.Stop = lost_then_real
    assert session.stop("completed", "all done") == first
    with pytest.raises(SessionStoppedError):
        session.stop("completed", "another reason")


def test_listing_pages_through_every_session_newest_first(client) -> None:
    """list_sessions yields pages until the last; every session appears once, newest first."""
    ids = [client.create_session(tenant="t-list").id for _ in range(5)]
    pages = list(client.list_sessions(page_size=2, tenant="t-list"))
    assert [len(page.sessions) for page in pages] == [2, 2, 1]
    assert [s.session_id for page in pages for s in page.sessions] == ids[::-1]
    assert pages[-1].next_page_token == ""


def test_invalid_records_raise_typed_errors_with_field_violations(client) -> None:
    """A tool output answering no call is InvalidArgumentError naming records[1].message.tool_call_id."""
    session = client.create_session()
    with pytest.raises(InvalidArgumentError) as caught:
        session.append(user("fine"), tool_result("call_nowhere", "orphan"))
    (violation,) = caught.value.field_violations
    assert violation.field == "records[1].message.tool_call_id"
    assert session.replay().messages == []  # nothing of the request was written


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"role": "user", "content": "x", "metadata": {}}, "keys the ledger does not store: ['metadata']"),
        ({"role": "user", "content": 3}, "content must be text or a list of parts"),
        ({"content": "x"}, "role must be a string"),
        (assistant(tool_calls=[{"id": "c", "function": {"name": "f"}, "extra": 1}]), "['extra']"),
        (assistant("x", reasoning={"content": "r", "summary": []}), "['summary']"),
        (Event(""), "an event needs a kind"),
        ("just text", "must be a dict"),
    ],
)
def test_records_the_conversion_would_change_are_refused_before_sending(client, record, message) -> None:
    """Unknown keys and wrong types raise TypeError/ValueError naming the record; nothing is sent."""
    session = client.create_session()
    with pytest.raises((TypeError, ValueError), match="records\\[0\\]") as caught:
        session.append(record)
    assert message in str(caught.value)
    assert session.next_seq == 1


def test_unknown_sessions_are_not_found(client) -> None:
    """Calls on an id the ledger does not hold raise NotFoundError."""
    ghost = client.session("01900000-0000-7000-8000-000000000000")
    with pytest.raises(NotFoundError):
        ghost.replay()
    with pytest.raises(NotFoundError):
        ghost.append(user("x"))
    with pytest.raises(NotFoundError):
        ghost.stop_facts()


def test_the_async_client_has_the_same_calls(writer_process, reader_process) -> None:
    """AsyncRolloutClient: create, append, replay, stream, stop, facts and listing as coroutines."""

    async def run() -> None:
        async with AsyncRolloutClient(
            writer_process.address, reader_process.address, retry=TEST_RETRY
        ) as client:
            session = await client.create_session(tenant="async")
            await session.append(*CONVERSATION[:5])
            assert (await session.replay()).messages == CONVERSATION[:5]
            assert [m async for m in session.stream_replay()] == CONVERSATION[:5]
            await session.stop("cancelled")
            assert (await session.stop_facts()).stop_kind == "cancelled"
            pages = [page async for page in client.list_sessions(tenant="async")]
            assert [s.session_id for s in pages[0].sessions] == [session.id]
            with pytest.raises(InvalidArgumentError) as caught:
                await client.find_children("not-a-uuid")
            assert caught.value.field_violations
            assert isinstance(caught.value.field_violations[0], FieldViolation)

    asyncio.run(run())


def test_stop_kinds_outside_the_vocabulary_are_refused_before_sending(client) -> None:
    """stop('finished') raises ValueError: the declared stop kinds are the only ones."""
    session = client.create_session()
    with pytest.raises(ValueError, match="finished"):
        session.stop("finished")
    assert not session.stop_facts().found


def test_streams_kept_open_past_the_client_end_quietly(writer_process, reader_process) -> None:
    """A watch, a replay stream and a listing left half-read when the client closes: the process
    ends without 'Event loop is closed' or pending-task noise."""
    code = f"""
from rollout_client import RolloutClient
with RolloutClient({writer_process.address!r}, {reader_process.address!r}) as client:
    session = client.create_session()
    session.append({{"role": "user", "content": "hi"}})
    watch = session.watch(from_seq=0)
    next(iter(watch))
    replay = iter(session.stream_replay())
    listing = client.list_sessions(page_size=2)
    next(iter(listing))
print("done")
"""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "done"
    assert result.stderr == ""


def test_close_from_another_thread_ends_calls_in_flight_with_client_closed(
    writer_process, reader_process
) -> None:
    """close() while other threads iterate a watch and append: each of them gets ClientClosedError
    (none hangs), close() twice and from two threads at once is fine, and nothing is printed."""
    code = f"""
import threading
from rollout_client import ClientClosedError, RolloutClient
client = RolloutClient({writer_process.address!r}, {reader_process.address!r})
session = client.create_session()
session.append({{"role": "user", "content": "hi"}})
outcomes = []
def watching():
    try:
        for _ in session.watch(from_seq=0):
            pass
    except ClientClosedError:
        outcomes.append("watch closed")
def appending():
    try:
        while True:
            session.append({{"role": "user", "content": "more"}})
    except ClientClosedError:
        outcomes.append("append closed")
threads = [threading.Thread(target=watching), threading.Thread(target=appending)]
for thread in threads:
    thread.start()
threading.Event().wait(0.5)
closers = [threading.Thread(target=client.close) for _ in range(2)]
for closer in closers:
    closer.start()
for thread in closers + threads:
    thread.join(10)
    assert not thread.is_alive(), "a thread hung"
client.close()
try:
    client.create_session()
except ClientClosedError:
    outcomes.append("after close")
print(sorted(outcomes))
"""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['after close', 'append closed', 'watch closed']"
    assert result.stderr == ""


def test_a_replay_over_the_unary_reply_limit_is_streamed_with_the_same_result(
    client, writer_process, data_dir
) -> None:
    """Session.replay() of a session whose answer is over the reader's unary limit (ErrorInfo
    REPLY_TOO_LARGE) reads it with StreamReplay: the same Replay as a reader that answers in one
    reply, capped or not; so do ConversationMemory.from_replay and the Agents SDK session."""
    session = client.create_session()
    session.append(system("rules"), *(user(f"{n} " + "y" * 900) for n in range(8)))
    session.stop("paused", "test")
    small = start_service("reader", data_dir, "--max-reply-bytes", "4096")
    try:
        with RolloutClient(writer_process.address, small.address, retry=TEST_RETRY) as limited:
            over = limited.session(session.id)
            for cap, budget in ((None, None), (6, None), (None, 10)):
                streamed = over.replay(budget, max_messages=cap)
                assert streamed == client.session(session.id).replay(budget, max_messages=cap)
                assert (streamed.too_large is not None) == (budget is not None)
            assert over.replay().digest_status == "verified"
            memory = ConversationMemory.from_replay(over)
            assert memory.snapshot() == client.session(session.id).replay().messages
            items = asyncio.run(LedgerSession(session.id, client=limited).get_items())
            assert len(items) == 9
    finally:
        small.stop()
