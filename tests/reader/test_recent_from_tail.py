"""A limited GetRecentMessages of a session the reader has not cached is answered from the file's
tail (shared.rebuild_tail), never from a whole-file rebuild; the answer is the whole file's."""

from __future__ import annotations

import os

from prometheus_client import REGISTRY

from reader_service import replies
from reader_service.replay_cache import ReplayCache
from rollout.v1 import reader_pb2
from rollout_client import assistant, user
from rollout_client.in_process import InProcessLedger
from shared import committed_lines
from tests.data_roots import session_file


def _tail_reads(how: str) -> float:
    return REGISTRY.get_sample_value("rollout_recent_tail_reads_total", {"how": how}) or 0.0


def _rebuilt() -> float:
    return REGISTRY.get_sample_value("rollout_replay_cache_answers_total", {"how": "rebuilt"}) or 0.0


def test_a_cold_limited_read_is_a_tail_read_and_equals_the_whole_files(tmp_path) -> None:
    """Through the served RPC: the metric counts a tail answer and no rebuild; the reply equals the
    one the cache gives once it holds the file (limit 0 builds it), count aside."""
    with InProcessLedger(tmp_path / "ledger") as ledger, ledger.client() as client:
        session = client.create_session()
        for batch in range(20):
            session.append(
                *(
                    user(f"{batch}.{n} " + "x" * 300) if n % 2 else assistant(f"{batch}.{n}")
                    for n in range(50)
                )
            )
        settled, rebuilt = _tail_reads("settled"), _rebuilt()
        cold = session.recent_messages(10, canonical=True)
        assert (_tail_reads("settled") - settled, _rebuilt() - rebuilt) == (1, 0)
        assert len(cold.messages) == 10
        assert 10 < cold.message_count < 1000
        session.recent_messages(0)  # the cache now holds the file
        warm = session.recent_messages(10, canonical=True)
        assert _tail_reads("settled") - settled == 1
        assert (warm.messages, warm.origins, warm.next_seq) == (cold.messages, cold.origins, cold.next_seq)
        assert warm.message_count == 1000


def test_a_cold_limited_reply_reads_a_small_part_of_the_file(tmp_path, monkeypatch) -> None:
    """Bytes read (every whole-file pass reads through shared.committed_lines.pread) stay far
    below the file's size, and the reply flags its count as a lower bound."""
    with InProcessLedger(tmp_path / "ledger") as ledger, ledger.client() as client:
        session = client.create_session()
        for batch in range(10):
            session.append(*(user(f"{batch}.{n} " + "y" * 1000) for n in range(100)))
        path = session_file(ledger.data_dir, session.id)
    size = path.stat().st_size
    read: list[int] = []

    def counting_pread(fd: int, length: int, offset: int) -> bytes:
        read.append(length)
        return os.pread(fd, length, offset)

    monkeypatch.setattr(committed_lines, "pread", counting_pread)
    cache = ReplayCache(64 * 1024 * 1024)
    reply = reader_pb2.RecentMessagesResponse.FromString(
        replies.recent_reply(cache, session.id, path, 10, False, 64 * 1024 * 1024)
    )
    assert len(reply.messages) == 10
    assert reply.message_count_at_least
    assert sum(read) * 10 < size
    assert cache.counts["rebuilt"] == 0
    read.clear()
    again = replies.recent_reply(cache, session.id, path, 10, False, 64 * 1024 * 1024)
    assert again == reply.SerializeToString()
    assert not read, "a repeat of an unchanged file reads nothing"
    counts = (cache.counts["tail"], cache.counts["tail_repeated"], cache.counts["rebuilt"])
    assert counts == (1, 1, 0)  # nothing cached by a tail read but its answer
