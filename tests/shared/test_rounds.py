"""The round rules (shared.rounds): boundaries, interactive inputs, status, segments, metrics, ids."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

from shared.records import encode_line, format_timestamp
from shared.rounds import (
    Lineage,
    RoundStatus,
    RoundTracker,
    is_settled,
    round_id,
    rounds_of,
)

SESSION = "01900000-0000-7000-8000-0000000000aa"
T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


class Session:
    """Records of one session, written as the writer writes them (seq from 0, ts as given)."""

    def __init__(self, session_id: str = SESSION, forked_from: dict[str, Any] | None = None) -> None:
        self.records: list[tuple[int, str, str, dict[str, Any]]] = []
        meta: dict[str, Any] = {"session_id": session_id, "tenant": "default"}
        if forked_from:
            meta["forked_from"] = forked_from
        self.add("session_meta", meta)

    def add(self, record_type: str, payload: dict[str, Any], at: float = 0.0) -> int:
        seq = len(self.records)
        self.records.append((seq, format_timestamp(T0 + timedelta(seconds=at)), record_type, payload))
        return seq

    def user(self, text: str, at: float = 0.0, kind: str | None = None, **extra: Any) -> int:
        payload: dict[str, Any] = {"role": "user", "content": text, **extra}
        if kind:
            payload["input_kind"] = kind
        return self.add("message", payload, at)

    def say(self, text: str, at: float = 0.0) -> int:
        return self.add("message", {"role": "assistant", "content": text}, at)

    def call(self, call_id: str, at: float = 0.0) -> int:
        call = {"id": call_id, "type": "function", "function": {"name": "sh", "arguments": "{}"}}
        return self.add("message", {"role": "assistant", "content": "", "tool_calls": [call]}, at)

    def output(self, call_id: str, at: float = 0.0, failed: bool = False) -> int:
        payload: dict[str, Any] = {"role": "tool", "tool_call_id": call_id, "content": "out"}
        if failed:
            payload["is_error"] = True
        return self.add("message", payload, at)

    def event(self, kind: str, body: dict[str, Any], at: float = 0.0) -> int:
        return self.add("event", {"kind": kind, "body": body}, at)

    def usage(self, output_tokens: int, input_tokens: int = 0, at: float = 0.0) -> int:
        total = {"input_tokens": input_tokens, "output_tokens": output_tokens}
        return self.event("token_count", {"info": {"total_token_usage": total}}, at)

    def stop(self, at: float = 0.0) -> int:
        return self.add("stop", {"stop_kind": "paused", "reason": "", "checkpoint_seq": 0}, at)

    def rounds(self):
        return rounds_of(self.records)

    def lines(self) -> bytes:
        return b"".join(encode_line(seq, ts, kind, payload) for seq, ts, kind, payload in self.records)


def test_question_answers_supplements_and_timeouts_do_not_split_a_round() -> None:
    session = Session()
    trigger = session.user("build it", kind="trigger")
    session.call("ask")
    session.output("ask")
    answer = session.user("yes", kind="question_answer", question="Proceed?", options=["yes", "no"])
    session.call("c1")
    session.output("c1")
    supplement = session.user("also add tests", kind="supplement")
    session.call("ask2")
    session.output("ask2")
    timeout = session.user("[no answer]", kind="timeout", question="Which name?")
    final = session.say("done")
    (only,) = session.rounds()
    assert only.trigger_seqs == (trigger,)
    assert [(i.seq, i.kind) for i in only.inputs] == [
        (answer, "question_answer"),
        (supplement, "supplement"),
        (timeout, "timeout"),
    ]
    assert only.inputs[0].question == "Proceed?"
    assert only.inputs[0].options == ("yes", "no")
    assert only.inputs[2].question == "Which name?"
    assert only.status is RoundStatus.COMPLETE
    assert only.answer_seq == final
    assert len(only.segments) == 4  # output after the trigger and after each input


def test_without_an_input_kind_a_user_message_before_the_answer_is_a_supplement() -> None:
    """The documented rule: context before any output is part of the trigger; a message while the
    round has output but no final answer is a supplement; after the answer it starts a round."""
    session = Session()
    context = session.user("<environment_context>")
    prompt = session.user("fix the bug\nplease")
    session.call("c1")
    mid = session.user("use the new API")
    session.output("c1")
    session.say("fixed")
    second = session.user("thanks, now docs")
    first, then = session.rounds()
    assert first.trigger_seqs == (context, prompt)
    assert first.question.splitlines()[0] == "fix the bug"
    assert [(i.seq, i.kind) for i in first.inputs] == [(mid, "supplement")]
    assert first.status is RoundStatus.COMPLETE
    assert then.start_seq == second
    assert then.status is RoundStatus.PENDING
    assert then.number == 2


def test_an_explicit_trigger_cuts_off_a_pending_round_as_interrupted() -> None:
    session = Session()
    session.user("first", kind="trigger")
    session.call("c1")
    session.user("second", kind="trigger")
    first, second = session.rounds()
    assert first.status is RoundStatus.INTERRUPTED
    assert "next trigger" in first.status_reason
    assert second.status is RoundStatus.PENDING


def test_a_pause_and_a_resume_keep_one_round_with_two_segments() -> None:
    session = Session()
    session.user("plan the release", kind="trigger", at=0)
    call = {"id": "ask", "type": "function", "function": {"name": "ask_user", "arguments": "{}"}}
    asked = session.add(
        "message", {"role": "assistant", "content": "Checking tags.", "tool_calls": [call]}, 5
    )
    session.stop(at=6)
    (paused,) = session.rounds()
    assert paused.status is RoundStatus.INTERRUPTED  # pending while its session is stopped
    session.event("resumed", {}, at=100)
    (resumed,) = session.rounds()
    assert resumed.status is RoundStatus.PENDING
    assert resumed.round_id == paused.round_id
    session.output("ask", at=101)
    session.user("2.0", kind="question_answer", question="Which version number?", at=110)
    answer = session.say("Release 2.0 planned.", at=120)
    (done,) = session.rounds()
    assert done.status is RoundStatus.COMPLETE
    assert done.round_id == paused.round_id
    assert [(s.first_seq, s.answer_seq) for s in done.segments] == [(asked, asked), (answer, answer)]
    assert done.answer_seq == answer
    assert done.duration_s == 120


def test_the_301_second_round_reports_its_duration_failure_and_usage_delta() -> None:
    """Cumulative usage 100 -> 1,200 -> 1,900 output tokens: the round after the one that reached
    100 used 1,800; it ran 301 s and one of its two tool calls failed."""
    session = Session()
    session.user("warm up", kind="trigger", at=-60)
    session.usage(100, input_tokens=1000, at=-59)
    session.say("ok", at=-58)
    session.user("run the suite", kind="trigger", at=0)
    session.call("c1", at=10)
    session.output("c1", at=20, failed=True)
    session.usage(1200, input_tokens=3000, at=21)
    session.call("c2", at=30)
    session.output("c2", at=40)
    session.say("The suite passes after a retry.", at=300)
    session.usage(1900, input_tokens=5000, at=301)
    first, second = session.rounds()
    assert (first.output_tokens, first.input_tokens) == (100, 1000)
    assert second.duration_s == 301
    assert (second.tool_calls, second.tool_failures) == (2, 1)
    assert (second.output_tokens, second.input_tokens) == (1800, 4000)
    assert not second.tokens_estimated
    assert second.status is RoundStatus.COMPLETE
    # The same answer from a tracker fed the file's lines in two pieces (as the reader extends it).
    lines = session.lines().split(b"\n")[:-1]
    tracker = RoundTracker()
    offset = tracker.add_lines(lines[:7])
    tracker.add_lines(lines[7:], offset)
    assert tracker.rounds() == rounds_of_lines(session.lines())
    assert [r.duration_s for r in tracker.rounds()] == [2, 301]


def rounds_of_lines(data: bytes):
    tracker = RoundTracker()
    tracker.add_lines(data.split(b"\n")[:-1])
    return tracker.rounds()


def test_a_counter_that_goes_down_counts_from_zero_and_no_usage_is_an_estimate() -> None:
    session = Session()
    session.user("a", kind="trigger")
    session.usage(500)
    session.say("b")
    session.user("c", kind="trigger")
    session.usage(200)  # a new process: counters start again
    session.say("d")
    session.user("e", kind="trigger")
    session.say("x" * 400)
    first, second, third = rounds_of_lines(session.lines())
    assert (first.output_tokens, second.output_tokens) == (500, 200)
    assert third.tokens_estimated
    assert third.output_tokens >= 100
    assert third.input_tokens > 0


def test_turn_events_bound_rounds_and_context_before_a_turn_belongs_to_it() -> None:
    session = Session()
    context = session.user("# AGENTS.md")
    started = session.event("task_started", {"turn_id": "t1"})
    session.add("turn_context", {"model": "gpt-x", "effort": "high"})
    session.user("do it")
    session.say("done")
    session.user("more context inside the turn")  # inside a turn: never a new round
    session.event("task_complete", {"turn_id": "t1"})
    second = session.event("task_started", {"turn_id": "t2"})
    session.call("c")
    session.event("turn_aborted", {"turn_id": "t2"})
    third = session.event("task_started", {"turn_id": "t3"})
    session.say("half")
    fourth = session.event("task_started", {"turn_id": "t4"})
    rounds = session.rounds()
    assert [(r.start_seq, r.turn_id, r.status) for r in rounds] == [
        (context, "t1", RoundStatus.COMPLETE),
        (second, "t2", RoundStatus.INTERRUPTED),
        (third, "t3", RoundStatus.INTERRUPTED),
        (fourth, "t4", RoundStatus.PENDING),
    ]
    assert started > context
    assert (rounds[0].model, rounds[0].effort) == ("gpt-x", "high")
    assert [i.kind for i in rounds[0].inputs] == ["supplement"]


def test_the_writer_s_interruption_record_settles_a_pending_round() -> None:
    session = Session()
    session.user("go", kind="trigger")
    session.call("c")
    session.event("resumed", {})
    session.event("round_interrupted", {"round_id": "x"})
    after = session.user("again")
    first, second = session.rounds()
    assert first.status is RoundStatus.INTERRUPTED
    assert second.start_seq == after


def test_round_ids_are_stable_and_a_fork_keeps_its_source_s_ids_before_its_point() -> None:
    source = Session()
    source.user("one", kind="trigger")
    source.say("1")
    point = source.user("two", kind="trigger")
    source.say("2")
    fork = Session("01900000-0000-7000-8000-0000000000bb", {"session_id": SESSION, "seq": point + 1})
    fork.records = [fork.records[0], *source.records[1:]]
    fork.user("three", kind="trigger")
    source_rounds, fork_rounds = source.rounds(), fork.rounds()
    assert [r.round_id for r in fork_rounds[:2]] == [r.round_id for r in source_rounds]
    assert fork_rounds[0].round_id == round_id(SESSION, 1)
    assert fork_rounds[2].round_id == round_id(
        "01900000-0000-7000-8000-0000000000bb", fork_rounds[2].start_seq
    )
    assert source.rounds() == source_rounds  # derived again, the same
    # A fork of a fork: the oldest source that held the seq names the round.
    lineage = Lineage("c", (("a", 2), ("b", 5)))
    assert [lineage.owner(seq) for seq in (1, 2, 3, 5, 6)] == ["a", "a", "b", "b", "c"]
    # c forked from b at 2, below b's own fork point from a (5): c wrote seqs 3 on itself.
    below = Lineage("c", (("a", 5), ("b", 2)))
    assert [below.owner(seq) for seq in (1, 2, 3, 5, 6)] == ["a", "a", "c", "c", "c"]


@pytest.mark.parametrize(
    ("status", "settled"),
    [
        (RoundStatus.PENDING, False),
        (RoundStatus.COMPLETE, True),
        (RoundStatus.INTERRUPTED, True),
        (RoundStatus.ERROR, False),
    ],
)
def test_one_settled_rule(status: RoundStatus, settled: bool) -> None:
    assert is_settled(status) is settled


def test_lines_that_hold_no_record_are_skipped() -> None:
    session = Session()
    session.user("a", kind="trigger")
    data = session.lines() + b"{broken\n" + orjson.dumps([1]) + b"\n"
    assert len(rounds_of_lines(data)) == 1


def _claude_record(
    message_id: str, input_tokens: int, output_tokens: int, cache_read: int = 0
) -> dict[str, Any]:
    usage = {
        "input_tokens": input_tokens,
        "cache_creation_input_tokens": 10,
        "cache_read_input_tokens": cache_read,
        "output_tokens": output_tokens,
    }
    return {"requestId": "req_" + message_id, "message": {"id": message_id, "usage": usage}}


def test_claude_code_usage_counts_each_api_message_once_at_its_last_figures() -> None:
    """Claude Code repeats an API message's usage on each record of it, output growing: the last
    one counts, once per message; input adds both cache counters. No estimate then."""
    session = Session()
    session.user("fix it", kind="trigger")
    session.event("claude.record", _claude_record("msg_a", 4, 3))
    session.say("looking")
    session.event("claude.record", _claude_record("msg_a", 4, 263))
    session.call("c1")
    session.output("c1")
    session.event("claude.record", _claude_record("msg_b", 7, 25, cache_read=100))
    session.say("fixed")
    second = session.user("and the docs", kind="trigger")
    first, then = session.rounds()
    assert (first.input_tokens, first.output_tokens, first.tokens_estimated) == (14 + 117, 263 + 25, False)
    assert then.start_seq == second
    assert then.tokens_estimated


def test_a_claude_code_interruption_mark_interrupts_its_round_and_starts_none() -> None:
    """ "[Request interrupted by user]" (as the importer writes it: a user message, kind trigger)
    stops the round it comes in, which reads interrupted, not complete; the next prompt starts
    a new round."""
    session = Session()
    session.user("refactor", kind="trigger")
    session.call("c1")
    session.output("c1")
    mark = session.user("[Request interrupted by user for tool use]", kind="trigger")
    session.say("ok, stopping")  # a late answer: the round stays interrupted
    prompt = session.user("do something else", kind="trigger")
    first, second = session.rounds()
    assert (first.status, first.status_reason, first.end_seq) == (
        RoundStatus.INTERRUPTED,
        "stopped by the user",
        mark + 1,
    )
    assert first.trigger_seqs == (1,)
    assert second.start_seq == prompt
