"""Where one LedgerSaver step's time goes, each part measured in the same run.

    .venv/bin/python bench/langgraph_step.py [--history 10] [--steps 300] [--rounds 3]
                                             [--message-bytes 1000]

A step is what bench/langgraph.py times: ``put_writes`` (one new message) then ``put`` (the next
checkpoint, the messages list one longer). Starts a writer and a reader (subprocesses, a
temporary data root) and, each round, measures (medians, ms):

* **saver only**: the steps of a thread whose session is a stand-in that encodes each request
  as the client would (``AppendRecord`` protos, the request's bytes) and sends nothing: the
  saver's Python, serialization and the blocking client's hop to its event loop;
* **live**: the same steps against the writer (``put_writes``, ``put``, the step);
* **two Appends / one Append**: the records of one live step (the writes record; the
  checkpoint record and its ledger message) appended to another session as the saver sends
  them, two requests, and as one request: what a step would cost in one round trip; unary
  Appends, and the same two requests over a kept AppendStream as the saver sends them
  (**two stream Appends**);
* **client / plain stub**: a one-record Append through ``RolloutClient`` and the same request
  through a blocking gRPC stub (no event loop, no retries): the client library's share of a
  round trip;
* **next_seq**: the probe each read (``get_tuple``, ``list``) sends (nothing written).

The live steps and the other calls are interleaved (one of each in turn), so that the machine's
load falls on all of them alike. Prints the medians over the rounds and the ratios. Exit status 0 whatever the figures.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# As in bench/langgraph.py: this folder must not hide the langgraph package.
BENCH = Path(__file__).resolve().parent
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != BENCH]

import grpc  # noqa: E402
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage  # noqa: E402
from langgraph.checkpoint.base import Checkpoint  # noqa: E402
from langgraph.checkpoint.base.id import uuid6  # noqa: E402

from rollout.v1 import writer_pb2, writer_pb2_grpc  # noqa: E402
from rollout_client import RetryPolicy, RolloutClient  # noqa: E402
from rollout_client._records import Event, Record, append_record  # noqa: E402
from rollout_client._results import AppendResult  # noqa: E402
from rollout_client.langgraph import LedgerSaver, _Thread  # noqa: E402

sys.path.append(str(BENCH))
from _support import start_service  # noqa: E402


def history(count: int, size: int, tag: str) -> list[BaseMessage]:
    text = ("the agent read the module, ran the failing test and proposed a patch; " * 40)[:size]
    return [
        (HumanMessage if index % 2 == 0 else AIMessage)(f"{tag} {index}: {text}", id=f"{tag}-{index}")
        for index in range(count)
    ]


def checkpoint(messages: list[BaseMessage], version: Any) -> Checkpoint:
    return Checkpoint(
        v=1,
        id=str(uuid6(clock_seq=-1)),
        ts=datetime.now(UTC).isoformat(),
        channel_values={"messages": messages},
        channel_versions={"messages": version},
        versions_seen={"agent": {"messages": version}},
        updated_channels=["messages"],
    )


class StandInSession:
    """Takes appends as the client would encode them, sends nothing; keeps the last two requests."""

    id = "stand-in"

    def __init__(self) -> None:
        self.next_seq = 1
        self.sent: list[tuple[Record, ...]] = []

    async def append(self, *records: Record) -> AppendResult:
        protos = [append_record(record, index) for index, record in enumerate(records)]
        writer_pb2.AppendRequest(session_id=self.id, records=protos).SerializeToString()
        self.sent = [*self.sent[-1:], records]
        seqs = tuple(range(self.next_seq, self.next_seq + len(records)))
        self.next_seq += len(records)
        return AppendResult(seqs, self.next_seq)


class Steps:
    """A thread of ``saver`` seeded with ``length`` messages, stepped as the loop sends a step."""

    def __init__(self, saver: LedgerSaver, length: int, size: int, tag: str) -> None:
        self.saver, self.size, self.tag = saver, size, tag
        self.messages = history(length, size, tag)
        self.version = saver.get_next_version(None, None)
        self.config = saver.put(
            {"configurable": {"thread_id": tag, "checkpoint_ns": ""}},
            checkpoint(self.messages, self.version),
            {"source": "input", "step": -1},
            {"messages": self.version},
        )
        self.step_no = 0

    def step(self) -> tuple[float, float]:
        """One step; the seconds in put_writes and in put."""
        new = (AIMessage if len(self.messages) % 2 else HumanMessage)(
            "x" * self.size, id=f"{self.tag}-step-{self.step_no}"
        )
        grown = [*self.messages, new]
        version = self.saver.get_next_version(self.version, None)
        started = time.perf_counter()
        self.saver.put_writes(self.config, [("messages", [new])], str(uuid.uuid4()))
        middle = time.perf_counter()
        self.config = self.saver.put(
            self.config,
            checkpoint(grown, version),
            {"source": "loop", "step": self.step_no},
            {"messages": version},
        )
        ended = time.perf_counter()
        self.messages, self.version, self.step_no = grown, version, self.step_no + 1
        return middle - started, ended - middle


def medians(times: list[tuple[float, ...]]) -> list[float]:
    return [statistics.median(column) * 1000 for column in zip(*times, strict=True)]


def one_round(client: RolloutClient, writer_address: str, args: Any, run: str) -> dict[str, float]:
    figures: dict[str, float] = {}

    saver = LedgerSaver(client)
    stand_in = StandInSession()
    saver._threads[f"{run}-alone"] = _Thread(stand_in, next_seq=1)  # type: ignore[arg-type]
    alone = Steps(saver, args.history, args.message_bytes, f"{run}-alone")
    figures["saver only: put_writes"], figures["saver only: put"] = medians(
        [alone.step() for _ in range(args.steps)]
    )
    figures["saver only: step"] = figures["saver only: put_writes"] + figures["saver only: put"]
    writes_records, checkpoint_records = stand_in.sent  # one step's requests, as sent

    live = Steps(LedgerSaver(client), args.history, args.message_bytes, f"{run}-live")
    session = client.create_session("bench-langgraph-step", root=True)
    streamed = client.create_session("bench-langgraph-step", root=True)
    streamed.core.keep_stream()  # as the saver's thread sessions
    small = Event("bench.probe", {"n": 1})
    record = append_record(small, 0)
    with grpc.insecure_channel(writer_address) as channel:
        stub = writer_pb2_grpc.RolloutWriterStub(channel)

        def two() -> None:
            session.append(*writes_records)
            session.append(*checkpoint_records)

        def plain() -> None:
            request = writer_pb2.AppendRequest(
                session_id=session.id, records=[record], request_id=uuid.uuid4().hex
            )
            stub.Append(request, timeout=60)

        def two_streamed() -> None:
            streamed.append(*writes_records)
            streamed.append(*checkpoint_records)

        parts: dict[str, Callable[[], object]] = {
            "two Appends": two,
            "two stream Appends": two_streamed,
            "one Append": lambda: session.append(*writes_records, *checkpoint_records),
            "client Append": lambda: session.append(small),
            "plain stub Append": plain,
            "next_seq": lambda: client.run(client.core.next_seq(session.id)),
        }
        live_times, spent = [], {name: [] for name in parts}  # interleaved: the load falls on all alike
        for _ in range(args.steps):
            live_times.append(live.step())
            for name, call in parts.items():
                started = time.perf_counter()
                call()
                spent[name].append(time.perf_counter() - started)
    figures["live: put_writes"], figures["live: put"] = medians(live_times)
    figures["live: step"] = statistics.median(sum(pair) for pair in live_times) * 1000
    for name, times in spent.items():
        figures[name] = statistics.median(times) * 1000
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--history", type=int, default=10)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--message-bytes", type=int, default=1000)
    args = parser.parse_args()
    print("command:", " ".join([".venv/bin/python", *sys.argv]))
    rounds: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        data = scratch / "data"
        data.mkdir()
        writer = start_service("writer", data, scratch / "writer.log")
        reader = start_service("reader", data, scratch / "reader.log")
        try:
            with RolloutClient(writer.address, reader.address, retry=RetryPolicy(deadline=120.0)) as client:
                for round_no in range(args.rounds):
                    rounds.append(one_round(client, writer.address, args, f"r{round_no}"))
        finally:
            writer.stop()
            reader.stop()
    print(
        f"history {args.history} messages of {args.message_bytes} characters, {args.steps} steps,"
        f" {args.rounds} rounds (medians of the rounds' medians)"
    )
    result = {key: statistics.median(figures[key] for figures in rounds) for key in rounds[0]}
    for key, value in result.items():
        print(f"{key:28} {value:8.3f} ms")
    ratios = [
        ("live step / saver only", result["live: step"] / result["saver only: step"]),
        ("two Appends / one Append", result["two Appends"] / result["one Append"]),
        ("client Append / plain stub Append", result["client Append"] / result["plain stub Append"]),
        ("live step / two Appends", result["live: step"] / result["two Appends"]),
        ("live step / two stream Appends", result["live: step"] / result["two stream Appends"]),
        ("two stream Appends / two Appends", result["two stream Appends"] / result["two Appends"]),
    ]
    for label, ratio in ratios:
        print(f"{label:34} {ratio:6.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
