"""Exactly-once appends through rollout_client (rollout_client/_appends.py): lost answers, writer
restarts between a request landing and its ack, other writers of the same session. The writer
alone answers for a request id (writer_service.idempotency); the reader is never asked.

The client talks to the writer through an in-test gRPC proxy that can lose an answer on
purpose: forward an Append, then SIGKILL and restart the writer before the answer reaches
the client, exactly the window in which the writer forgets its request ids.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import orjson
import pytest

from rollout.v1 import records_pb2, writer_pb2, writer_pb2_grpc
from rollout_client import (
    AppendOutcomeUnknownError,
    AsyncRolloutClient,
    FailedPreconditionError,
    FieldViolation,
    PreconditionViolation,
    RetryPolicy,
    RolloutClient,
    assistant,
    user,
)
from rollout_client._appends import PendingAppend
from rollout_client._errors import InvalidArgumentError
from tests.conftest import start_service
from tests.data_roots import session_file

APPEND = "/rollout.v1.RolloutWriter/Append"


@dataclass(frozen=True)
class _Status(grpc.Status):
    code: grpc.StatusCode
    details: str
    trailing_metadata: Any


class WriterProxy:
    """A gRPC proxy in front of a writer process. ``plans`` says what happens to the next Appends:
    ``forward`` (default), ``land_then_restart`` (forward, SIGKILL + restart the writer, lose the
    answer), ``restart_before`` (restart, never forward), ``lose_answer`` (forward, lose the
    answer, writer kept), ``unavailable`` (never forward, writer kept), ``land_then_cancel``
    (forward, then answer CANCELLED as a writer that stops answers the calls it did not finish). ``between`` runs after a
    restart, before the client is told UNAVAILABLE."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.writer = start_service("writer", data_dir)
        self.channel = grpc.insecure_channel(self.writer.address)
        self.plans: list[str] = []
        self.between: Callable[[grpc.Channel], None] | None = None
        self.appends_seen = 0
        self.server = grpc.server(futures.ThreadPoolExecutor(4))
        self.server.add_generic_rpc_handlers((self,))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        method = details.method
        return grpc.unary_unary_rpc_method_handler(
            lambda request, context: self.handle(method, request, context)
        )

    def restart_writer(self) -> None:
        self.writer.stop(signal.SIGKILL)
        self.channel.close()
        self.writer = start_service("writer", self.data_dir)
        self.channel = grpc.insecure_channel(self.writer.address)
        if self.between is not None:
            self.between(self.channel)

    def forward(self, method: str, request: bytes, context: grpc.ServicerContext) -> bytes:
        try:
            answer: bytes = self.channel.unary_unary(method)(request, timeout=120)
            return answer
        except grpc.RpcError as error:
            context.abort_with_status(_Status(error.code(), error.details(), error.trailing_metadata()))
            raise

    def handle(self, method: str, request: bytes, context: grpc.ServicerContext) -> bytes:
        plan = self.plans.pop(0) if method == APPEND and self.plans else "forward"
        if method == APPEND:
            self.appends_seen += 1
        if plan == "forward":
            return self.forward(method, request, context)
        if plan in ("land_then_restart", "lose_answer", "land_then_cancel"):
            self.forward(method, request, context)
        if plan in ("land_then_restart", "restart_before"):
            self.restart_writer()
        if plan == "land_then_cancel":
            context.abort(grpc.StatusCode.CANCELLED, "proxy: cancelled on purpose")
        context.abort(grpc.StatusCode.UNAVAILABLE, f"proxy: answer lost on purpose ({plan})")
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.server.stop(None)
        self.channel.close()
        self.writer.stop()


@pytest.fixture
def proxy(data_dir: Path) -> Iterator[WriterProxy]:
    running = WriterProxy(data_dir)
    yield running
    running.close()


#: The bounds of a client behind the proxy. A planned restart happens inside the attempt it answers
#: (the writer's start, then ``between``), which a loaded machine can stretch past the default
#: 10 s attempt timeout and 20 s deadline: bounds only, generous, never a timing assertion.
PROXY_RETRY = RetryPolicy(deadline=300.0, initial_backoff=0.02, max_backoff=0.5, attempt_timeout=240.0)


@pytest.fixture
def proxied(proxy: WriterProxy, reader_process) -> Iterator[RolloutClient]:
    with RolloutClient(proxy.address, reader_process.address, retry=PROXY_RETRY) as client:
        yield client


def file_records(data_dir: Path, session_id: str) -> list[dict[str, Any]]:
    path = session_file(data_dir, session_id)
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def assert_each_once(records: list[dict[str, Any]], texts: list[str]) -> None:
    """Seqs are 0..n-1 without gap or repeat, and each text is in exactly one message record."""
    assert [record["seq"] for record in records] == list(range(len(records)))
    contents = [record["payload"].get("content") for record in records if record["type"] == "message"]
    for text in texts:
        assert contents.count(text) == 1, (text, contents)


def _turn(text: str) -> dict[str, Any]:
    """An assistant message with two reasoning blocks: three lines (k = 3) for one record."""
    return assistant(text, reasoning=[{"content": f"{text}: first"}, {"content": f"{text}: second"}])


def test_a_request_that_landed_before_a_writer_restart_is_not_written_again(proxy, proxied, data_dir) -> None:
    """Writer SIGKILLed and restarted between landing and ack: the new writer finds the request id
    in the file and answers the retry with the first answer, writing nothing."""
    session = proxied.create_session()
    session.append(user("before"))
    proxy.plans = ["land_then_restart"]
    result = session.append(user("landed once"), _turn("answer once"))
    assert proxy.appends_seen == 2 + 1  # the lost attempt, then the retry the new writer answered
    assert result.seqs == (2, 5)  # the user message at 2, reasoning at 3 and 4, the answer at 5
    assert result.next_seq == 6
    session.append(user("after"))
    records = file_records(data_dir, session.id)
    assert_each_once(records, ["before", "landed once", "answer once", "after"])
    assert [r["type"] for r in records[2:6]] == ["message", "reasoning", "reasoning", "message"]
    assert session.replay().messages[-1] == user("after")


def test_a_request_lost_before_it_landed_is_written_once_after_the_restart(proxy, proxied, data_dir) -> None:
    """Writer restarted before the request reached it: the retry writes it, once."""
    session = proxied.create_session()
    proxy.plans = ["restart_before"]
    assert session.append(user("only once")).seqs == (1,)
    assert_each_once(file_records(data_dir, session.id), ["only once"])


def test_a_lost_answer_is_settled_by_the_writers_request_id_memory(proxy, proxied, data_dir) -> None:
    """Writer kept running, answer lost: the retry with the same request id gets the first answer."""
    session = proxied.create_session()
    proxy.plans = ["lose_answer", "lose_answer"]
    assert session.append(user("retried twice"), _turn("turn")).seqs == (1, 4)
    assert_each_once(file_records(data_dir, session.id), ["retried twice", "turn"])


def test_a_call_the_writer_cancelled_is_retried_and_answered_for_its_request_id(
    proxy, proxied, data_dir
) -> None:
    """An Append answered CANCELLED (a stopping writer cancels the calls it has not finished) may
    have landed: it is sent again and answered for its request id, written once."""
    session = proxied.create_session()
    proxy.plans = ["land_then_cancel"]
    assert session.append(user("cancelled once")).seqs == (1,)
    assert proxy.appends_seen == 2
    assert_each_once(file_records(data_dir, session.id), ["cancelled once"])


def _other_client(session_id: str, text: str) -> Callable[[grpc.Channel], None]:
    """Appends one user message ``text`` to the session through ``channel`` (another writer)."""

    def append(channel: grpc.Channel) -> None:
        request = writer_pb2.AppendRequest(
            session_id=session_id,
            records=[writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="user", text=text))],
        )
        writer_pb2_grpc.RolloutWriterStub(channel).Append(request)

    return append


def test_a_landed_request_is_found_by_its_id_after_others_appended(proxy, proxied, data_dir) -> None:
    """Landed, writer restarted, another client appended: the retry gets the first answer (seq 1,
    next seq 2), nothing is written again, and the next append lands after the other client's."""
    session = proxied.create_session()
    proxy.between = _other_client(session.id, "other")
    proxy.plans = ["land_then_restart"]
    result = session.append(user("mine"))
    assert (result.seqs, result.next_seq) == ((1,), 2)
    assert_each_once(file_records(data_dir, session.id), ["mine", "other"])
    proxy.between = None
    assert session.append(user("next")).seqs == (3,)


def test_another_clients_lines_during_a_restart_are_never_taken_for_ours(proxy, proxied, data_dir) -> None:
    """Not landed, writer restarted, another client appended exactly as many lines: the writer
    finds no line with our request id, so it writes the request, once, after the other's."""
    session = proxied.create_session()
    proxy.between = _other_client(session.id, "other")
    proxy.plans = ["restart_before"]
    assert session.append(user("mine")).seqs == (2,)
    assert_each_once(file_records(data_dir, session.id), ["other", "mine"])


def test_without_the_reader_a_landed_request_is_answered_by_the_writer_alone(proxy, data_dir) -> None:
    """Landed, writer restarted, another client appended, no reader reachable at all: the writer's
    answer for the request id settles it (no AppendOutcomeUnknownError, nothing written twice)."""
    with RolloutClient(proxy.address, "127.0.0.1:1", retry=PROXY_RETRY) as client:
        session = client.create_session()
        proxy.between = _other_client(session.id, "other")
        proxy.plans = ["land_then_restart"]
        result = session.append(user("mine"))
    assert result.seqs == (1,)
    assert_each_once(file_records(data_dir, session.id), ["mine", "other"])


def test_another_writer_of_the_session_moves_it_on_and_both_appends_are_kept(proxied, data_dir) -> None:
    """A Session whose expected seq is stale (another writer appended) re-sends at the actual seq."""
    first = proxied.create_session()
    second = proxied.session(first.id)
    assert second.append(user("second learns seq 1")).seqs == (1,)
    assert first.next_seq == 1  # stale now
    assert first.append(user("first re-sends at 2")).seqs == (2,)
    assert_each_once(file_records(data_dir, first.id), ["second learns seq 1", "first re-sends at 2"])


def test_a_deadline_after_an_attempt_that_may_have_landed_raises_outcome_unknown(
    proxy, reader_process, data_dir
) -> None:
    """Answers lost until the deadline: AppendOutcomeUnknownError, and the record is in the file once."""
    policy = RetryPolicy(deadline=1.0, initial_backoff=0.05, max_backoff=0.1)
    with RolloutClient(proxy.address, reader_process.address, retry=policy) as client:
        session = client.create_session()
        proxy.plans = ["lose_answer"] * 1000
        with pytest.raises(AppendOutcomeUnknownError):
            session.append(user("maybe"))
        proxy.plans = []
    assert_each_once(file_records(data_dir, session.id), ["maybe"])


def test_an_attached_session_learns_its_next_seq_without_writing(client, data_dir) -> None:
    """client.session(id) learns the next seq before its first append: nothing is written."""
    created = client.create_session()
    created.append(user("one"), user("two"))
    attached = client.session(created.id)
    assert attached.next_seq is None
    assert attached.append(user("three")).seqs == (3,)
    assert_each_once(file_records(data_dir, created.id), ["one", "two", "three"])
    assert [r["type"] for r in file_records(data_dir, created.id)].count("event") == 0


def _pending(lines: list[int], since: int) -> PendingAppend:
    records = [writer_pb2.AppendRecord() for _ in lines]
    return PendingAppend("x", records, lines, since_seq=since)


def test_every_attempt_carries_the_same_id_and_since_seq_and_no_compare_and_swap() -> None:
    """A plain append is sent as the same request each time: its id, S, no expected_next_seq."""
    pending = _pending([1, 3], 10)
    first, again = pending.request(), pending.request()
    assert first == again
    assert (first.request_since_seq, first.HasField("expected_next_seq")) == (10, False)
    assert first.request_id == pending.request_id
    assert len(first.request_id) == 32


def test_a_lookup_refusal_after_a_lost_answer_is_outcome_unknown_and_other_refusals_are_not() -> None:
    """FAILED_PRECONDITION on the request id (S too far back) leaves the outcome unknown once an
    attempt may have landed; a stopped session's FAILED_PRECONDITION never does (the writer looked first)."""
    pending = _pending([1], 1)
    lookup = FailedPreconditionError(
        "too far back",
        precondition_violations=(
            PreconditionViolation("SESSION_STATE", f"request/{pending.request_id}", "x"),
        ),
    )
    stopped = FailedPreconditionError(
        "stopped", precondition_violations=(PreconditionViolation("SESSION_STATE", "session/x", "open"),)
    )
    assert not pending.unsettled(lookup)
    pending.after_transport_failure(grpc.StatusCode.UNAVAILABLE)
    assert pending.unsettled(lookup)
    assert not pending.unsettled(stopped)


def test_a_refused_request_is_never_taken_for_a_landed_one() -> None:
    """RESOURCE_EXHAUSTED and ABORTED prove nothing was written; UNAVAILABLE does not."""
    pending = _pending([1], 1)
    pending.after_transport_failure(grpc.StatusCode.RESOURCE_EXHAUSTED)
    pending.after_transport_failure(grpc.StatusCode.ABORTED)
    assert not pending.maybe_landed
    pending.after_transport_failure(grpc.StatusCode.UNAVAILABLE)
    assert pending.maybe_landed


def test_a_record_the_writer_would_refuse_for_its_shape_is_refused_before_sending(client) -> None:
    """Reasoning on a user message is InvalidArgumentError naming records[0], and nothing is sent."""
    session = client.create_session()
    with pytest.raises(InvalidArgumentError) as caught:
        session.append({"role": "user", "content": "x", "reasoning": {"content": "no"}})
    assert caught.value.field_violations == (
        FieldViolation("records[0].message.reasoning", "only assistant messages carry reasoning"),
    )
    assert session.next_seq == 1


def test_an_attached_session_appends_with_the_writer_alone(writer_process) -> None:
    """A Session attached by id, with no reader reachable, learns its next seq from the writer
    (one probe, refused without writing) and sends it as request_since_seq."""

    async def scenario() -> list[tuple[int | None, int | None]]:
        async with AsyncRolloutClient(writer_process.address, "127.0.0.1:1") as client:
            created = await client.create_session()
            await created.append(user("one"), user("two"))
            sent: list[tuple[int | None, int | None]] = []
            real_append = client.writer_stub.Append

            def recording(request: Any, **kwargs: Any) -> Any:
                sent.append(
                    (
                        request.expected_next_seq if request.HasField("expected_next_seq") else None,
                        request.request_since_seq if request.HasField("request_since_seq") else None,
                    )
                )
                return real_append(request, **kwargs)

            client.writer_stub.Append = recording
            result = await client.session(created.id).append(user("three"))
            assert result.seqs == (3,)
            return sent

    assert asyncio.run(scenario()) == [(0, None), (None, 3)]
