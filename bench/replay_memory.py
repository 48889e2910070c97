"""Concurrent unary GetReplays of a large session: the reader's RSS growth and a cheap call's latency.

Synthesizes one stopped session of ``--size-mb`` MB (the record mix of
bench/_support.py) and one small stopped session, starts ``rollout serve-reader``
on them as a subprocess, lets it settle (its listing index reads every file once
at start) and resets its peak RSS (``echo 5 > /proc/<pid>/clear_refs``). Then
``--clients`` threads each call GetReplay (unary) on the large session at once,
while one more client, in a process of its own, calls GetStopFacts on the small
session every 25 ms until the last replay has answered. A sampler reads the reader's ``VmRSS`` every 20 ms.

Prints each replay's status, size and seconds; the reader's idle RSS, its peak
(``VmHWM``) and the growth; and the GetStopFacts latencies (median, p99, max).
Targets: RSS growth <= 600 MiB, GetStopFacts max < 250 ms.

With the reader's default unary reply limit (64 MiB) the replays are refused before
the file is read (RESOURCE_EXHAUSTED, pointing to StreamReplay). ``--max-reply-bytes``
starts the reader with another limit: 300000000 has them answered, which measures
the rebuilds under the read budget and what sending a ~190 MB reply costs the other
calls (gRPC holds the reader's event loop for about a millisecond per MB sent).

    .venv/bin/python bench/replay_memory.py [--size-mb 250] [--clients 4] [--max-reply-bytes N] [--check]

Exit status: 0 whatever the figures; with ``--check``, 1 when a target fails;
2 when a call answers something other than OK or RESOURCE_EXHAUSTED, or a
replay's messages differ from what was written.
"""

from __future__ import annotations

import argparse
import multiprocessing
import shlex
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
from _support import MB, HelpFormatter, proc_status_kb, start_service, write_session

from rollout.v1 import reader_pb2, reader_pb2_grpc

TARGET_GROWTH_MIB = 600
TARGET_STOP_FACTS_MS = 250
CLIENT_OPTIONS = [("grpc.max_receive_message_length", 512 * 1024 * 1024)]
_BASE_TIME = datetime(2026, 11, 30, 8, 0, 0, tzinfo=UTC)


@dataclass
class ReplayOutcome:
    status: str
    seconds: float
    reply_bytes: int
    messages: int


def replay(address: str, session_id: str, outcomes: list[ReplayOutcome]) -> None:
    with grpc.insecure_channel(address, options=CLIENT_OPTIONS) as channel:
        stub = reader_pb2_grpc.RolloutReaderStub(channel)  # type: ignore[no-untyped-call]
        started = time.perf_counter()
        try:
            response = stub.GetReplay(reader_pb2.ReplayRequest(session_id=session_id), timeout=900)
        except grpc.RpcError as exc:
            outcomes.append(ReplayOutcome(exc.code().name, time.perf_counter() - started, 0, 0))
            return
        seconds = time.perf_counter() - started
        outcomes.append(ReplayOutcome("OK", seconds, response.ByteSize(), len(response.messages)))


def poll_stop_facts(address: str, session_id: str, done: Any, results: Any) -> None:
    """In a process of its own (so that the replay clients' parsing never delays it): GetStopFacts
    every 25 ms until ``done`` is set; puts the list of latencies (ms), or an error text, on ``results``."""
    latencies: list[float] = []
    with grpc.insecure_channel(address) as channel:
        stub = reader_pb2_grpc.RolloutReaderStub(channel)  # type: ignore[no-untyped-call]
        request = reader_pb2.StopFactsRequest(session_id=session_id)
        while not done.is_set():
            started = time.perf_counter()
            facts = stub.GetStopFacts(request, timeout=60)
            latencies.append((time.perf_counter() - started) * 1000)
            if not facts.found:
                results.put("the small session's stop facts were not found")
                return
            time.sleep(0.025)
    results.put(latencies)


def sample_rss(pid: int, done: threading.Event, samples: list[int]) -> None:
    while not done.is_set():
        samples.append(proc_status_kb(pid, "VmRSS"))
        time.sleep(0.02)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--size-mb", type=float, default=250, help="size of the large session (MB)")
    parser.add_argument("--clients", type=int, default=4, help="concurrent unary GetReplay calls")
    parser.add_argument(
        "--max-reply-bytes",
        type=int,
        default=None,
        help="the reader's unary reply limit (its default when unset)",
    )
    parser.add_argument("--check", action="store_true", help="exit 1 when a target fails")
    args = parser.parse_args(argv)
    if args.size_mb <= 0 or args.clients < 1:
        parser.error("--size-mb and --clients must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print("command:", shlex.join(sys.orig_argv))
    with tempfile.TemporaryDirectory(prefix="rollout-bench-memory-", dir="/tmp") as tmp_name:
        tmp = Path(tmp_name)
        sessions = tmp / "data" / "sessions"
        sessions.mkdir(parents=True)
        started = time.perf_counter()
        large = write_session(sessions, target_bytes=int(args.size_mb * MB), created_at=_BASE_TIME)
        small = write_session(sessions, turns=2, created_at=_BASE_TIME + timedelta(seconds=1))
        print(
            f"workload: one session of {large.bytes / MB:,.1f} MB ({large.messages:,} messages), stopped;"
            f" {args.clients} concurrent unary GetReplays of it, GetStopFacts of a small session every 25 ms"
            f" (generated in {time.perf_counter() - started:.1f} s)"
        )
        limit = [] if args.max_reply_bytes is None else ["--max-reply-bytes", str(args.max_reply_bytes)]
        reader = start_service("reader", sessions.parent, tmp / "reader.stderr", *limit)
        pid = reader.process.pid
        try:
            time.sleep(3)  # the listing index reads every file once at start
            idle_kb = proc_status_kb(pid, "VmRSS")
            Path(f"/proc/{pid}/clear_refs").write_text("5")  # reset VmHWM to the current RSS
            done = threading.Event()
            samples: list[int] = []
            outcomes: list[ReplayOutcome] = []
            spawn = multiprocessing.get_context("spawn")
            polling, results = spawn.Event(), spawn.Queue()
            poller = spawn.Process(
                target=poll_stop_facts, args=(reader.address, small.session_id, polling, results)
            )
            poller.start()
            sampler = threading.Thread(target=sample_rss, args=(pid, done, samples))
            sampler.start()
            time.sleep(2)  # the poller process starts and makes its first calls
            callers = [
                threading.Thread(target=replay, args=(reader.address, large.session_id, outcomes))
                for _ in range(args.clients)
            ]
            wall = time.perf_counter()
            for caller in callers:
                caller.start()
            for caller in callers:
                caller.join()
            wall = time.perf_counter() - wall
            time.sleep(0.2)
            done.set()
            polling.set()
            sampler.join()
            answer = results.get(timeout=60)
            poller.join()
            if isinstance(answer, str):
                raise RuntimeError(answer)
            latencies: list[float] = answer
            peak_kb = proc_status_kb(pid, "VmHWM")
            after_kb = proc_status_kb(pid, "VmRSS")
        except (grpc.RpcError, RuntimeError) as exc:
            detail = f"{exc.code().name}: {exc.details()}" if isinstance(exc, grpc.RpcError) else str(exc)
            print(f"benchmark failed: {detail}")
            return 2
        finally:
            reader.stop()
    problems = [
        outcome
        for outcome in outcomes
        if outcome.status not in ("OK", "RESOURCE_EXHAUSTED")
        or (outcome.status == "OK" and outcome.messages != large.messages)
    ]
    for number, outcome in enumerate(sorted(outcomes, key=lambda o: o.seconds), 1):
        print(
            f"replay {number}: {outcome.status} after {outcome.seconds:6.2f} s, {outcome.reply_bytes / MB:,.1f} MB,"
            f" {outcome.messages:,} messages"
        )
    if problems:
        print(f"unexpected answers: {problems}")
        return 2
    growth_mib = (peak_kb - idle_kb) / 1024
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    print(f"all {args.clients} replays answered in {wall:.1f} s")
    print(
        f"reader RSS idle {idle_kb / 1024:,.1f} MiB, peak {peak_kb / 1024:,.1f} MiB, after {after_kb / 1024:,.1f} MiB"
    )
    print(
        f"reader RSS growth (peak - idle): {growth_mib:,.1f} MiB (max of 20 ms samples: {(max(samples) - idle_kb) / 1024:,.1f})"
    )
    print(
        f"GetStopFacts during the replays: {len(latencies)} calls, median {statistics.median(latencies):.1f} ms,"
        f" p99 {p99:.1f} ms, max {max(latencies):.1f} ms"
    )
    growth_holds = growth_mib <= TARGET_GROWTH_MIB
    latency_holds = max(latencies) < TARGET_STOP_FACTS_MS
    print(f"target RSS growth <= {TARGET_GROWTH_MIB} MiB: {'MET' if growth_holds else 'NOT MET'}")
    print(f"target GetStopFacts max < {TARGET_STOP_FACTS_MS} ms: {'MET' if latency_holds else 'NOT MET'}")
    return 1 if args.check and not (growth_holds and latency_holds) else 0


if __name__ == "__main__":
    sys.exit(main())
