"""GetRecentMessages (reader.proto) through the client: the last messages with their origins and the
next seq, and retractions applied by compare-and-swap on that seq."""

from __future__ import annotations

import pytest

from reader_service import replies
from reader_service.replay_cache import ReplayCache
from rollout_client import (
    Compaction,
    FailedPreconditionError,
    InvalidArgumentError,
    MessageRef,
    Retraction,
    assistant,
    tool_call,
    tool_result,
    user,
)
from tests.data_roots import session_files


def test_the_last_messages_come_with_their_origins_and_the_next_seq(client) -> None:
    """limit N gives the last N messages, oldest first, each with its record's seq; 0 gives all."""
    session = client.create_session()
    session.append(user("one"), assistant("two"), user("three"))
    recent = session.recent_messages(2)
    assert [m["content"] for m in recent.messages] == ["two", "three"]
    assert recent.origins == [MessageRef(2), MessageRef(3)]
    assert (recent.message_count, recent.next_seq) == (3, 4)
    assert [m["content"] for m in session.recent_messages().messages] == ["one", "two", "three"]


def test_canonical_messages_are_the_digest_form_of_the_same_messages(client) -> None:
    """canonical=True gives each message's canonical JSON: the same dict minus the flags it leaves out."""
    session = client.create_session()
    call = tool_call("c1", "grep", '{"q": 1}')
    session.append(
        user([{"type": "input_text", "text": "hi", "n": 1.5}]),
        assistant("looking", tool_calls=[call], reasoning=[{"content": "a"}, {"content": "b"}]),
        tool_result("c1", "found", is_error=True),
    )
    full, canonical = session.recent_messages(), session.recent_messages(canonical=True)
    assert canonical.origins == full.origins
    assert canonical.messages[:2] == full.messages[:2]
    assert canonical.messages[2] == {"role": "tool", "tool_call_id": "c1", "content": "found"}
    assert full.messages[2]["is_error"] is True


def test_a_retraction_at_the_seq_read_takes_the_last_message_out(client) -> None:
    """The origin and next seq read are what a compare-and-swap retraction needs; a stale seq is refused."""
    session = client.create_session()
    session.append(user("keep"), user("pop me"))
    recent = session.recent_messages(1)
    session.append(Retraction([recent.origins[-1]], "pop"), expected_next_seq=recent.next_seq)
    assert [m["content"] for m in session.recent_messages().messages] == ["keep"]
    with pytest.raises(FailedPreconditionError) as stale:
        session.append(Retraction([MessageRef(1)], "late"), expected_next_seq=recent.next_seq)
    assert stale.value.next_seq == recent.next_seq + 1
    assert [m["content"] for m in session.recent_messages().messages] == ["keep"]


def test_messages_of_a_compaction_are_named_by_its_seq_and_history_index(client) -> None:
    """A replacement history entry's origin carries history_index; retracting it removes just it."""
    session = client.create_session()
    session.append(Compaction("gist", [user("h0"), assistant("h1")]))
    recent = session.recent_messages()
    assert recent.origins == [MessageRef(1, 0), MessageRef(1, 1)]
    session.append(Retraction([MessageRef(1, 0)]))
    assert [m["content"] for m in session.recent_messages().messages] == ["h1"]


def test_a_negative_limit_is_refused(client) -> None:
    """INVALID_ARGUMENT naming limit."""
    session = client.create_session()
    with pytest.raises(InvalidArgumentError, match="limit"):
        session.recent_messages(-1)


@pytest.mark.parametrize("canonical", [False, True])
def test_an_uncached_session_gets_the_same_answer_as_a_cached_one(client, data_dir, canonical) -> None:
    """The bounded-memory path (a file the cache does not keep) answers byte for byte as the cache."""
    session = client.create_session()
    session.append(user("a"), assistant("b", reasoning={"content": "r"}), Compaction("g", [user("c")]))
    session.append(user("d"), Retraction([MessageRef(4, 0)]))
    (path,) = session_files(data_dir)
    for limit in (0, 1, 5):
        cached = replies.recent_reply(ReplayCache(1 << 20), session.id, path, limit, canonical, 1 << 20)
        bounded = replies.recent_reply(ReplayCache(0, 0), session.id, path, limit, canonical, 1 << 20)
        assert cached == bounded


def test_a_count_from_the_tail_is_flagged_a_lower_bound(client) -> None:
    """A limited read the reader answers from the file's tail counts only what the tail held:
    message_count_at_least says so (a count above the messages returned, below the view's); a
    read of all messages is exact."""
    session = client.create_session()
    session.append(*(user(f"m{n} " + "x" * 500) for n in range(200)))
    limited = session.recent_messages(5)
    assert [m["content"][:4] for m in limited.messages] == ["m195", "m196", "m197", "m198", "m199"]
    assert limited.message_count_at_least
    assert 5 < limited.message_count < 200
    every = session.recent_messages()
    assert not every.message_count_at_least
    assert every.message_count == 200
