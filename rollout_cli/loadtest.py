"""``rollout loadtest``: simulated agent sessions against a live writer, with ack latencies.

Each simulated agent is one thread holding one parent session (``CreateSession``,
tenant ``loadtest``). It runs turns until the duration is over: a user message, a
turn context, an assistant message with reasoning and a tool call, the call's
output, a token-count event and a final assistant answer. Every
``delegate_every``-th tool call is a delegation: the agent creates a child session
(``parent_session_id`` and ``delegation_id`` set to the call), runs one turn in it,
stops it ``completed``, then writes the call's output in the parent. Records are
sent in Appends of 1 to ``records_per_append`` records (in order: an output never
precedes its call), each Append timed from send to acknowledgement; an optional
think time separates Appends. At the end every parent is stopped ``completed``.

It only ever writes to the sessions it creates. Figures: records/s and Appends/s
over the run, ack latency percentiles (p50/p95/p99/max, ms) and errors by gRPC
status code.
"""

from __future__ import annotations

import random
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from rollout.v1 import records_pb2, writer_pb2, writer_pb2_grpc
from rollout_client import blocking_channel

#: The tenant of the sessions a run creates on a writer without authentication (with a token,
#: the token's tenant: the writer takes the tenant from the credentials, never from a request).
TENANT = "loadtest"
_TEXT = (
    "The agent read the failing test, traced the error to the retry path and proposed a two-line fix; "
    "it ran the suite again and summarized what changed and why. "
)


@dataclass(frozen=True, slots=True)
class LoadtestConfig:
    """What to simulate: ``sessions`` parent agents for ``seconds``; sizes in records, times in ms."""

    writer: str
    sessions: int = 16
    seconds: float = 10.0
    records_per_append: int = 1
    think_ms: float = 0.0
    delegate_every: int = 4
    seed: int = 1
    #: Bearer token and TLS CA file (rollout_client.blocking_channel); None: plaintext, no token.
    token: str | None = None
    tls_ca: Path | None = None


@dataclass
class LoadtestReport:
    """What a run measured (latencies in seconds)."""

    seconds: float = 0.0
    records: int = 0
    appends: int = 0
    sessions_created: int = 0
    latencies: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, Any]:
        """The report as plain JSON-ready values (rates per second, latencies in ms)."""
        ordered = sorted(self.latencies)

        def percentile(share: float) -> float:
            if not ordered:
                return 0.0
            return ordered[min(len(ordered) - 1, int(share * len(ordered)))] * 1000

        return {
            "seconds": round(self.seconds, 3),
            "sessions_created": self.sessions_created,
            "appends": self.appends,
            "records": self.records,
            "appends_per_second": round(self.appends / self.seconds, 1) if self.seconds else 0.0,
            "records_per_second": round(self.records / self.seconds, 1) if self.seconds else 0.0,
            "ack_ms": {
                "p50": round(statistics.median(ordered) * 1000, 3) if ordered else 0.0,
                "p95": round(percentile(0.95), 3),
                "p99": round(percentile(0.99), 3),
                "max": round(ordered[-1] * 1000, 3) if ordered else 0.0,
            },
            "errors": dict(self.errors),
        }


def _message(role: str, text: str = "", **fields: Any) -> writer_pb2.AppendRecord:
    return writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role=role, text=text, **fields))


def turn_records(rng: random.Random, turn: int, call_id: str) -> tuple[list[writer_pb2.AppendRecord], int]:
    """One turn's records, and the position at which the tool call's output belongs (a realistic mix)."""
    text = _TEXT * rng.randint(1, 6)
    context = writer_pb2.AppendRecord()
    context.turn_context.update({"model": "gpt-5", "cwd": "/srv/agent", "turn": turn})
    call = records_pb2.ChatMessage(
        role="assistant", text="Running the tests.", reasoning=records_pb2.Reasoning(content=text[:400])
    )
    call.tool_calls.add(
        id=call_id,
        type="function",
        function=records_pb2.FunctionCall(name="shell", arguments='{"cmd":"pytest -q"}'),
    )
    event = writer_pb2.AppendRecord(event=records_pb2.Event(kind="token_count"))
    event.event.body.update({"input_tokens": 1200 + turn, "output_tokens": 300})
    records = [context, _message("user", text), writer_pb2.AppendRecord(message=call)]
    output_at = len(records)
    records += [event, _message("assistant", text[: rng.randint(80, len(text))])]
    return records, output_at


class _Agent:
    """One simulated parent agent (runs in its own thread)."""

    def __init__(
        self,
        number: int,
        stub: writer_pb2_grpc.RolloutWriterStub,
        config: LoadtestConfig,
        report: LoadtestReport,
        lock: threading.Lock,
    ) -> None:
        self.number = number
        self.stub = stub
        self.config = config
        self.report = report
        self.tenant = "" if config.token else TENANT
        self.lock = lock
        self.rng = random.Random(config.seed * 1_000_003 + number)
        self.calls = 0

    def _count(
        self, records: int = 0, latency: float | None = None, error: str = "", created: int = 0
    ) -> None:
        with self.lock:
            self.report.records += records
            self.report.sessions_created += created
            if latency is not None:
                self.report.appends += 1
                self.report.latencies.append(latency)
            if error:
                self.report.errors[error] += 1

    def _create(self, **fields: Any) -> str:
        session_id: str = self.stub.CreateSession(
            writer_pb2.CreateSessionRequest(tenant=self.tenant, **fields)
        ).session_id
        self._count(created=1)
        return session_id

    def _send(self, session_id: str, records: list[writer_pb2.AppendRecord], stop: threading.Event) -> bool:
        """Append ``records`` in requests of 1..records_per_append; False once a request failed."""
        position = 0
        while position < len(records):
            size = self.rng.randint(1, max(1, self.config.records_per_append))
            chunk = records[position : position + size]
            started = time.perf_counter()
            try:
                self.stub.Append(writer_pb2.AppendRequest(session_id=session_id, records=chunk))
            except grpc.RpcError as exc:
                self._count(error=exc.code().name)
                return False
            self._count(len(chunk), time.perf_counter() - started)
            position += size
            if self.config.think_ms > 0 and stop.wait(self.config.think_ms / 1000):
                return position >= len(records)
        return True

    def _turn(self, session_id: str, turn: int, stop: threading.Event, delegate: bool) -> bool:
        self.calls += 1
        call_id = f"call_{self.number}_{self.calls}"
        records, output_at = turn_records(self.rng, turn, call_id)
        if not self._send(session_id, records[:output_at], stop):
            return False
        result = "All 214 tests passed."
        if delegate:
            child = self._create(
                agent_name="loadtest-child", parent_session_id=session_id, delegation_id=call_id
            )
            child_records, child_output_at = turn_records(self.rng, 0, f"{call_id}_child")
            child_records.insert(child_output_at, _message("tool", "ok", tool_call_id=f"{call_id}_child"))
            finished = self._send(child, child_records, stop)
            self._stop(child, finished)  # every session a run creates is stopped, cut short or not
            result = "The child agent finished the task."
        output = _message("tool", result, tool_call_id=call_id)
        return self._send(session_id, [output, *records[output_at:]], stop)

    def _stop(self, session_id: str, finished: bool = True) -> None:
        """Stop a session the run created: completed, or interrupted when its turn was cut short."""
        kind = records_pb2.STOP_KIND_COMPLETED if finished else records_pb2.STOP_KIND_INTERRUPTED
        try:
            self.stub.Stop(
                writer_pb2.StopRequest(session_id=session_id, stop_kind=kind, reason="loadtest run ended")
            )
        except grpc.RpcError as exc:
            self._count(error=exc.code().name)

    def run(self, stop: threading.Event) -> None:
        try:
            session_id = self._create(agent_name="loadtest-parent", role=writer_pb2.SESSION_ROLE_ROOT)
        except grpc.RpcError as exc:
            self._count(error=exc.code().name)
            return
        turn = 0
        while not stop.is_set():
            turn += 1
            delegate = self.config.delegate_every > 0 and turn % self.config.delegate_every == 0
            if not self._turn(session_id, turn, stop, delegate):
                break
        self._stop(session_id)


def run_loadtest(
    config: LoadtestConfig, on_tick: Callable[[float, LoadtestReport], None] | None = None
) -> LoadtestReport:
    """Run the simulation against ``config.writer``; ``on_tick(elapsed_s, report)`` is called ~10x/s.

    Returns the report (``seconds`` is the measured wall time). Errors are counted
    by status code, never raised; an agent whose request failed stops its session
    and ends early.
    """
    report = LoadtestReport()
    lock = threading.Lock()
    stop = threading.Event()
    with blocking_channel(config.writer, token=config.token, tls_ca=config.tls_ca) as channel:
        stub = writer_pb2_grpc.RolloutWriterStub(channel)
        agents = [_Agent(number, stub, config, report, lock) for number in range(config.sessions)]
        threads = [threading.Thread(target=agent.run, args=(stop,), daemon=True) for agent in agents]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        while (elapsed := time.perf_counter() - started) < config.seconds:
            if on_tick is not None:
                with lock:
                    on_tick(elapsed, report)
            time.sleep(min(0.1, config.seconds - elapsed))
        stop.set()
        for thread in threads:
            thread.join()
        report.seconds = time.perf_counter() - started
    return report
