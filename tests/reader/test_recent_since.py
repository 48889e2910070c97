"""GetRecentMessages for a caller that holds the view as of a next seq (since_next_seq): only what
followed it when nothing before it changed (continues_view), the view in full otherwise
(docs/spec.md §5.1; the rule is shared.rebuild.view_continues)."""

from __future__ import annotations

from pathlib import Path

import pytest

from reader_service import replies
from reader_service.replay_cache import ReplayCache
from reader_service.wire import ViewHeld
from rollout.v1 import reader_pb2
from rollout_client import (
    Compaction,
    InvalidArgumentError,
    MessageRef,
    Retraction,
    assistant,
    tool_call,
    tool_result,
    user,
)
from rollout_client.in_process import InProcessLedger
from tests.data_roots import session_file

LIMIT = 64 * 1024 * 1024


def _recent(
    cache: ReplayCache, path: Path, limit: int = 0, view: ViewHeld | None = None
) -> reader_pb2.RecentMessagesResponse:
    return reader_pb2.RecentMessagesResponse.FromString(
        replies.recent_reply(cache, "s", path, limit, True, LIMIT, view)
    )


def _held(reply: reader_pb2.RecentMessagesResponse) -> ViewHeld:
    return ViewHeld(reply.next_seq, reply.message_count)


def test_a_view_held_gets_only_what_was_appended_since(tmp_path) -> None:
    """After appends only, the reply continues the view with the new messages alone; they are the
    last messages of the full answer, with the same count and next seq."""
    with InProcessLedger(tmp_path / "ledger") as ledger, ledger.client() as client:
        session = client.create_session()
        session.append(user("one"), assistant("two"), user("three"))
        path = session_file(ledger.data_dir, session.id)
        cache = ReplayCache(LIMIT)
        first = _recent(cache, path)
        session.append(assistant("four"), user("five"))
        since = _recent(cache, path, view=_held(first))
        full = _recent(ReplayCache(LIMIT), path)
    assert since.continues_view
    assert list(since.canonical_messages) == list(full.canonical_messages[3:])
    assert list(since.origin_seqs) == list(full.origin_seqs[3:])
    assert (since.message_count, since.next_seq) == (full.message_count, full.next_seq) == (5, 6)
    unchanged = _recent(cache, path, view=_held(full))
    assert unchanged.continues_view
    assert not unchanged.canonical_messages
    assert unchanged.message_count == 5


@pytest.mark.parametrize("change", ["retraction", "compaction", "replaced output"])
def test_a_change_before_the_views_end_is_answered_in_full(tmp_path, change) -> None:
    """A retraction or a compaction, or an output replacing an earlier one in place, changes messages
    the caller holds: the reply is the whole view, not a continuation."""
    with InProcessLedger(tmp_path / "ledger") as ledger, ledger.client() as client:
        session = client.create_session()
        session.append(
            user("one"), assistant("", tool_calls=[tool_call("c1", "f", "{}")]), tool_result("c1", "first")
        )
        session.append(user("two"))
        path = session_file(ledger.data_dir, session.id)
        cache = ReplayCache(LIMIT)
        first = _recent(cache, path)
        if change == "retraction":
            session.append(Retraction([MessageRef(first.origin_seqs[0])], "test"), user("three"))
        elif change == "compaction":
            session.append(Compaction("summary", [user("kept")]))
        else:
            session.append(tool_result("c1", "second"))
        again = _recent(cache, path, view=_held(first))
        full = _recent(ReplayCache(LIMIT), path)
    assert not again.continues_view
    assert again == full


def test_an_unchanged_file_continues_from_its_tail_and_a_grown_one_is_answered_in_full(tmp_path) -> None:
    """A limited read of a file the cache does not hold: the view held at the file's next seq gets no
    messages (from the last tail read's answer, the file not read again); a view held at an earlier
    seq gets the limited answer itself."""
    with InProcessLedger(tmp_path / "ledger") as ledger, ledger.client() as client:
        session = client.create_session()
        session.append(*(user(f"m{n} " + "x" * 500) for n in range(200)))
        path = session_file(ledger.data_dir, session.id)
    cache = ReplayCache(LIMIT)
    cold = _recent(cache, path, 10)
    assert cold.message_count_at_least
    assert len(cold.canonical_messages) == 10
    same = _recent(cache, path, 10, ViewHeld(cold.next_seq, None))
    assert same.continues_view
    assert not same.canonical_messages
    assert (same.next_seq, same.message_count) == (cold.next_seq, cold.message_count)
    older = _recent(cache, path, 10, ViewHeld(cold.next_seq - 1, 199))
    assert not older.continues_view
    assert older == cold
    assert (cache.counts["tail"], cache.counts["tail_repeated"], cache.counts["rebuilt"]) == (1, 2, 0)


def test_a_view_ahead_of_the_file_is_answered_in_full(tmp_path) -> None:
    """A caller whose view is at a later seq than the file this reader reads (its own acknowledged
    appends not seen here) gets the view as the reader has it, never a continuation."""
    with InProcessLedger(tmp_path / "ledger") as ledger, ledger.client() as client:
        session = client.create_session()
        session.append(user("one"), user("two"))
        path = session_file(ledger.data_dir, session.id)
    cache = ReplayCache(LIMIT)
    full = _recent(cache, path)
    ahead = _recent(cache, path, view=ViewHeld(full.next_seq + 1, 1))
    assert not ahead.continues_view
    assert ahead == full


def test_the_served_call_continues_a_view_and_refuses_negative_since_fields(tmp_path) -> None:
    """Through the RPC: since_next_seq and since_message_count reach the cache (a continuation
    of the new messages only); a negative one is INVALID_ARGUMENT naming the field."""
    with InProcessLedger(tmp_path / "ledger") as ledger, ledger.client() as client:
        session = client.create_session()
        session.append(user("one"))
        core = client.core

        async def call(request: reader_pb2.RecentMessagesRequest) -> reader_pb2.RecentMessagesResponse:
            reply: reader_pb2.RecentMessagesResponse = await core.call(
                core.reader_stub.GetRecentMessages, request
            )
            return reply

        def recent(**fields: int) -> reader_pb2.RecentMessagesResponse:
            return client.run(
                call(reader_pb2.RecentMessagesRequest(session_id=session.id, canonical=True, **fields))
            )

        first = recent()
        session.append(user("two"))
        since = recent(since_next_seq=first.next_seq, since_message_count=first.message_count)
        assert since.continues_view
        assert [m.count(b"two") for m in since.canonical_messages] == [1]
        for field in ("since_next_seq", "since_message_count"):
            fields = {"since_next_seq": first.next_seq, field: -1}
            with pytest.raises(InvalidArgumentError) as refused:
                recent(**fields)
            assert [v.field for v in refused.value.field_violations] == [field]
