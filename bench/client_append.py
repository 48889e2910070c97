"""What rollout_client adds to one agent's append: SDK Session.append against raw generated stubs.

Usage:

    .venv/bin/python bench/client_append.py [--appends 500] [--rounds 5]

One writer (``rollout serve-writer`` on a temporary data root, port 0) and one agent that
appends one ~1 KB user message per call and waits for each ack, as an agent does per turn.
Four clients take turns in every round, in a rotating order, each on its own session:

* ``raw``: the generated stub ``RolloutWriterStub.Append`` on a blocking channel, with a
  request id and ``expected_next_seq`` (what a careful hand-written client sends);
* ``raw-async``: the same through a ``grpc.aio`` channel (what the SDK is built on);
* ``sdk``: ``rollout_client.RolloutClient`` ``Session.append(user(text))`` (the dict is
  checked and converted, the call crosses to the client's event loop thread);
* ``sdk-async``: ``rollout_client.AsyncRolloutClient`` ``await session.append(...)``.

It prints, per client, the median over rounds of each round's p50 ack latency (ms) with the
spread (min..max of the round p50s), and the ratios sdk/raw, sdk-async/raw and
sdk-async/raw-async of the medians. The figures are ratios against ``raw`` measured in the same rounds, because this
machine is shared and the fsync cost drifts.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import grpc
from _support import HelpFormatter, start_service

from rollout.v1 import records_pb2, writer_pb2, writer_pb2_grpc
from rollout_client import AsyncRolloutClient, RolloutClient, user

TEXT = "x" * 1000


def _request(session_id: str, next_seq: int) -> writer_pb2.AppendRequest:
    """One user message with a fresh request id and the expected next seq (built inside the timing, as the SDK builds its own)."""
    record = writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="user", text=TEXT))
    return writer_pb2.AppendRequest(
        session_id=session_id, records=[record], expected_next_seq=next_seq, request_id=uuid.uuid4().hex
    )


def _raw(address: str, appends: int) -> list[float]:
    with grpc.insecure_channel(address) as channel:
        stub = writer_pb2_grpc.RolloutWriterStub(channel)
        session = stub.CreateSession(writer_pb2.CreateSessionRequest())
        next_seq = session.next_seq
        latencies = []
        for _ in range(appends):
            started = time.perf_counter()
            response = stub.Append(_request(session.session_id, next_seq))
            latencies.append(time.perf_counter() - started)
            next_seq = response.next_seq
    return latencies


def _raw_async(address: str, appends: int) -> list[float]:
    async def run() -> list[float]:
        async with grpc.aio.insecure_channel(address) as channel:
            stub = writer_pb2_grpc.RolloutWriterStub(channel)
            session = await stub.CreateSession(writer_pb2.CreateSessionRequest())
            next_seq = session.next_seq
            latencies = []
            for _ in range(appends):
                started = time.perf_counter()
                response = await stub.Append(_request(session.session_id, next_seq))
                latencies.append(time.perf_counter() - started)
                next_seq = response.next_seq
            return latencies

    return asyncio.run(run())


def _sdk(address: str, appends: int) -> list[float]:
    with RolloutClient(address, "127.0.0.1:1") as client:
        session = client.create_session()
        latencies = []
        for _ in range(appends):
            started = time.perf_counter()
            session.append(user(TEXT))
            latencies.append(time.perf_counter() - started)
    return latencies


def _sdk_async(address: str, appends: int) -> list[float]:
    async def run() -> list[float]:
        async with AsyncRolloutClient(address, "127.0.0.1:1") as client:
            session = await client.create_session()
            latencies = []
            for _ in range(appends):
                started = time.perf_counter()
                await session.append(user(TEXT))
                latencies.append(time.perf_counter() - started)
            return latencies

    return asyncio.run(run())


CLIENTS: dict[str, Callable[[str, int], list[float]]] = {
    "raw": _raw,
    "raw-async": _raw_async,
    "sdk": _sdk,
    "sdk-async": _sdk_async,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--appends", type=int, default=500, help="appends per client per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (client order rotates)")
    args = parser.parse_args(argv)
    print(f"command: bench/client_append.py --appends {args.appends} --rounds {args.rounds}")
    p50s: dict[str, list[float]] = {name: [] for name in CLIENTS}
    with tempfile.TemporaryDirectory(prefix="client-bench-") as tmp:
        writer = start_service("writer", Path(tmp) / "data", Path(tmp) / "writer.stderr")
        try:
            names = list(CLIENTS)
            for round_number in range(args.rounds):
                order = names[round_number % len(names) :] + names[: round_number % len(names)]
                for name in order:
                    latencies = CLIENTS[name](writer.address, args.appends)
                    p50s[name].append(statistics.median(latencies) * 1000)
        finally:
            writer.stop()
    medians = {name: statistics.median(values) for name, values in p50s.items()}
    for name, values in p50s.items():
        print(f"{name:10s} ack p50 {medians[name]:.3f} ms (round p50s {min(values):.3f}..{max(values):.3f})")
    for name, base in (("sdk", "raw"), ("sdk-async", "raw"), ("sdk-async", "raw-async")):
        print(f"{name}/{base} = {medians[name] / medians[base]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
