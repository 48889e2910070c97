"""A writer killed mid-round (issue 24): after a restart ListPendingRounds finds the round, Resume
records it interrupted, ListRounds never shows it complete, and the next trigger starts a new
round. Real processes (tests/processes.py); the writer dies by SIGKILL."""

from __future__ import annotations

import signal
import threading

from rollout_client import PendingRound, RetryPolicy, RolloutClient, assistant, tool_call, tool_result, user
from tests.conftest import start_service
from tests.processes import start_service as start_at

PATIENT = RetryPolicy(deadline=120.0, initial_backoff=0.02, max_backoff=0.25, attempt_timeout=30.0)
#: The idle time asked for: the round's session counts as left by a crash one second after its
#: last append (the test waits for that, on the condition, not a clock it does not own).
IDLE_SECONDS = 1


def _pending_of(client: RolloutClient, session_id: str) -> PendingRound:
    """The pending round ListPendingRounds lists for ``session_id``, once it does (the session
    must first go IDLE_SECONDS without an append)."""
    woken = threading.Event()
    for _ in range(2400):  # at most about 2 minutes
        found = [p for p in client.pending_rounds(idle_seconds=IDLE_SECONDS) if p.session_id == session_id]
        if found:
            return found[0]
        woken.wait(0.05)
    raise AssertionError(f"ListPendingRounds never listed a round of {session_id}")


def test_a_round_cut_off_by_a_writer_crash_is_found_closed_interrupted_and_followed_by_a_new_round(
    data_dir,
) -> None:
    writer = start_service("writer", data_dir)
    reader = start_service("reader", data_dir)
    try:
        with RolloutClient(writer.address, reader.address, retry=PATIENT) as client:
            crashed = client.create_session()
            crashed.append(user("first question"), assistant("first answer"))
            crashed.append(user("list the files"), assistant("", tool_calls=[tool_call("c1", "shell")]))
            answered = client.create_session()
            answered.append(user("hi"), assistant("hello"))
            paused = client.create_session()
            paused.append(user("a long task"), assistant("", tool_calls=[tool_call("c2", "shell")]))
            paused.stop("paused", reason="lunch")

            writer.stop(signal.SIGKILL)
            writer = start_at("writer", data_dir, writer.log_path, address=writer.address)

            cut_off = _pending_of(client, crashed.id)
            (first, pending) = crashed.rounds()
            assert cut_off.round.round_id == pending.round_id
            assert (first.status, pending.status) == ("complete", "pending")
            assert cut_off.round.question == "list the files"
            listed = {p.session_id for p in client.pending_rounds(idle_seconds=IDLE_SECONDS)}
            assert answered.id not in listed
            assert paused.id not in listed

            resumed = crashed.resume()
            assert resumed.interrupted_round_id == pending.round_id
            assert crashed.id not in {p.session_id for p in client.pending_rounds(idle_seconds=IDLE_SECONDS)}
            # The call's own output arriving late, then its answer: the round stays interrupted.
            crashed.append(tool_result("c1", "a.txt"), assistant("a.txt is there"))
            crashed.append(user("next question"))
            statuses = [(r.round_id, r.status) for r in crashed.rounds()]
            assert statuses[:2] == [(first.round_id, "complete"), (pending.round_id, "interrupted")]
            assert len(statuses) == 3
            assert statuses[2][1] == "pending"
            assert statuses[2][0] != pending.round_id
    finally:
        writer.stop()
        reader.stop()
