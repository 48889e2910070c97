"""GetStopFacts latency on a ~1 GB session against a ~10 KB one; ListSessions page time.

Stop facts are read from a file's tail only, so their latency must not depend on
the session's size. The benchmark writes two stopped sessions (bench/_support.py
records, then ``agent_checkpoint`` + ``stop``) into one data root: a small one
of ~10 KB and a large one of ``--size-mb`` MB. The large one is sparse: a real
head of ~1 MB of records, a hole up to the size (it reads as NUL bytes), then a
``\\n`` and the final checkpoint and stop records; only the tail is meaningful,
which is all GetStopFacts reads. One reader subprocess serves both; after a
warm-up, ``--calls`` calls of each are made, alternating, each timed from the
client (a unary call over loopback gRPC). The target is
median(large) / median(small) <= 1.5.

For context it also times ListSessions: ``--sessions`` small session files
created directly under one data root (every 50th stopped, the rest running),
walked page by page with ``--page-size``; each page is timed, and after each a
page of the same size is read from a second reader whose data root holds
``--page-size`` sessions in all. Prints ms per page (medians) and their ratio;
no target.

    .venv/bin/python bench/stop_facts.py [--size-mb 1000] [--calls 200] [--sessions 10000] [--check]

Exit status: 0 whatever the figures; with ``--check``, 1 when the stop-facts
ratio is over the target; 2 when a call fails or answers something other than
what was written.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

import grpc
from _support import MB, HelpFormatter, Service, SessionInfo, start_service, write_session

from rollout.v1 import reader_pb2, reader_pb2_grpc

TARGET_RATIO = 1.5
WARMUP_CALLS = 20
STOP_EVERY = 50
_BASE_TIME = datetime(2026, 11, 1, tzinfo=UTC)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def timed_ms(call: Callable[[], object]) -> tuple[float, object]:
    started = time.perf_counter()
    result = call()
    return (time.perf_counter() - started) * 1000, result


# -- stop facts ---------------------------------------------------------------------------


def write_stop_sessions(sessions: Path, size_mb: float) -> tuple[SessionInfo, SessionInfo]:
    """(large sparse, small) stopped sessions under ``sessions``."""
    small = write_session(sessions, turns=1, first_turn=1, created_at=_BASE_TIME)
    large = write_session(
        sessions,
        target_bytes=MB,
        created_at=_BASE_TIME + timedelta(seconds=1),
        sparse_bytes=int(size_mb * MB),
    )
    return large, small


def check_stop_facts(facts: reader_pb2.StopFacts, info: SessionInfo) -> str | None:
    if not (facts.found and facts.has_stop_record and facts.stop_kind == "paused"):
        return f"{info.session_id}: found={facts.found} stop_kind={facts.stop_kind!r}"
    if facts.checkpoint.digest != info.digest or facts.stop_seq != info.records - 1:
        return f"{info.session_id}: checkpoint {facts.checkpoint.digest} at stop seq {facts.stop_seq}"
    if not facts.resume.replayable:
        return f"{info.session_id}: a paused session is not replayable: {facts.resume.reason}"
    return None


def measure_stop_facts(
    address: str, large: SessionInfo, small: SessionInfo, calls: int
) -> tuple[list[float], list[float], dict[str, int]]:
    """Latencies (ms) of ``calls`` GetStopFacts per session, alternating; tail bytes read per session."""
    latencies: dict[str, list[float]] = {large.session_id: [], small.session_id: []}
    tail_bytes: dict[str, int] = {}
    with grpc.insecure_channel(address) as channel:
        stub = reader_pb2_grpc.RolloutReaderStub(channel)  # type: ignore[no-untyped-call]
        for number in range(WARMUP_CALLS + calls):
            order = (large, small) if number % 2 else (small, large)
            for info in order:
                request = reader_pb2.StopFactsRequest(session_id=info.session_id)
                elapsed, facts = timed_ms(partial(stub.GetStopFacts, request, timeout=30))
                assert isinstance(facts, reader_pb2.StopFacts)
                if number < WARMUP_CALLS:
                    problem = check_stop_facts(facts, info)
                    if problem is not None:
                        raise RuntimeError(f"GetStopFacts answered wrong: {problem}")
                    tail_bytes[info.session_id] = facts.tail_bytes_read
                else:
                    latencies[info.session_id].append(elapsed)
    return latencies[large.session_id], latencies[small.session_id], tail_bytes


# -- listing -------------------------------------------------------------------------------


def write_listing_root(sessions: Path, count: int) -> None:
    """``count`` one-turn sessions, one second apart; every ``STOP_EVERY``-th stopped."""
    sessions.mkdir(parents=True)
    for index in range(count):
        write_session(
            sessions,
            turns=1,
            created_at=_BASE_TIME + timedelta(seconds=index),
            stop_kind="paused" if index % STOP_EVERY == 0 else "",
        )


def list_page(
    stub: reader_pb2_grpc.RolloutReaderStub, size: int, token: str
) -> reader_pb2.ListSessionsResponse:
    request = reader_pb2.ListSessionsRequest(page_size=size, page_token=token)
    response: reader_pb2.ListSessionsResponse = stub.ListSessions(request, timeout=60)
    return response


def measure_listing(
    big_address: str, small_address: str, page_size: int, sessions: int
) -> tuple[list[float], list[float]]:
    """Per-page ms: every page of the big root (one walk), and as many pages of the small root."""
    big_ms: list[float] = []
    small_ms: list[float] = []
    with (
        grpc.insecure_channel(big_address) as big_channel,
        grpc.insecure_channel(small_address) as small_channel,
    ):
        big = reader_pb2_grpc.RolloutReaderStub(big_channel)  # type: ignore[no-untyped-call]
        small = reader_pb2_grpc.RolloutReaderStub(small_channel)  # type: ignore[no-untyped-call]
        for _ in range(3):  # warm-up: the first call of a reader scans and parses every file name
            list_page(big, page_size, "")
            list_page(small, page_size, "")
        token = ""
        seen: list[str] = []
        stopped = 0
        while True:
            elapsed, response = timed_ms(partial(list_page, big, page_size, token))
            assert isinstance(response, reader_pb2.ListSessionsResponse)
            big_ms.append(elapsed)
            seen.extend(listed.session_id for listed in response.sessions)
            stopped += sum(1 for listed in response.sessions if listed.stop_facts.found)
            elapsed, other = timed_ms(partial(list_page, small, page_size, ""))
            assert isinstance(other, reader_pb2.ListSessionsResponse)
            small_ms.append(elapsed)
            if len(other.sessions) != page_size:
                raise RuntimeError(f"the small root listed {len(other.sessions)} sessions")
            token = response.next_page_token
            if not token:
                break
    expected_stopped = (sessions + STOP_EVERY - 1) // STOP_EVERY
    if len(seen) != sessions or len(set(seen)) != sessions or stopped != expected_stopped:
        raise RuntimeError(
            f"the walk listed {len(seen)} sessions ({len(set(seen))} distinct, {stopped} stopped);"
            f" expected {sessions} ({expected_stopped} stopped)"
        )
    return big_ms, small_ms


# -- main ---------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--size-mb", type=float, default=1000, help="size of the large (sparse) session, MB")
    parser.add_argument("--calls", type=int, default=200, help="timed GetStopFacts calls per session")
    parser.add_argument("--sessions", type=int, default=10_000, help="sessions in the big listing root")
    parser.add_argument(
        "--page-size", type=int, default=100, help="ListSessions page size (and small root size)"
    )
    parser.add_argument("--check", action="store_true", help=f"exit 1 when large/small > {TARGET_RATIO}")
    args = parser.parse_args(argv)
    if args.size_mb < 2 or min(args.calls, args.sessions, args.page_size) < 1:
        parser.error("--size-mb must be >= 2; --calls, --sessions and --page-size positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print("command:", shlex.join(sys.orig_argv))
    services: list[Service] = []
    with tempfile.TemporaryDirectory(prefix="rollout-bench-stopfacts-", dir="/tmp") as tmp_name:
        tmp = Path(tmp_name)
        try:
            stop_root = tmp / "stop" / "sessions"
            stop_root.mkdir(parents=True)
            large, small = write_stop_sessions(stop_root, args.size_mb)
            allocated = os.stat(large.path).st_blocks * 512
            print(
                f"stop facts workload: large {large.bytes / MB:,.1f} MB (sparse, {allocated / MB:.1f} MB"
                f" allocated), small {small.bytes / 1000:.1f} kB; {args.calls} timed calls each"
                f" after {WARMUP_CALLS} warm-up calls, alternating"
            )
            started = time.perf_counter()
            write_listing_root(tmp / "big" / "sessions", args.sessions)
            write_listing_root(tmp / "small" / "sessions", args.page_size)
            print(
                f"listing workload: {args.sessions:,} sessions (one turn each, every {STOP_EVERY}th stopped)"
                f" vs {args.page_size} sessions, page size {args.page_size}"
                f" (written in {time.perf_counter() - started:.1f} s)"
            )
            for name in ("stop", "big", "small"):
                services.append(start_service("reader", tmp / name, tmp / f"reader-{name}.stderr"))
            large_ms, small_ms, tail_bytes = measure_stop_facts(services[0].address, large, small, args.calls)
            big_pages, small_pages = measure_listing(
                services[1].address, services[2].address, args.page_size, args.sessions
            )
        except (grpc.RpcError, RuntimeError) as exc:
            detail = f"{exc.code().name}: {exc.details()}" if isinstance(exc, grpc.RpcError) else str(exc)
            print(f"benchmark failed: {detail}")
            return 2
        finally:
            for service in services:
                service.stop()
    large_median, small_median = statistics.median(large_ms), statistics.median(small_ms)
    ratio = large_median / small_median
    print("GetStopFacts latency, ms:            median     p90   tail bytes read")
    for label, values, info in (("large", large_ms, large), ("small", small_ms, small)):
        print(
            f"  {label} ({info.bytes / MB:9,.3f} MB)     {statistics.median(values):7.3f} {percentile(values, 0.9):7.3f}"
            f"   {tail_bytes[info.session_id]:,}"
        )
    print(f"ratio large/small (medians): {ratio:.3f}")
    big_median, small_page_median = statistics.median(big_pages), statistics.median(small_pages)
    print(f"ListSessions page of {args.page_size}, ms:               median     p90   pages")
    print(
        f"  {args.sessions:,} sessions in the root          {big_median:7.2f} {percentile(big_pages, 0.9):7.2f}"
        f"   {len(big_pages)}"
    )
    print(
        f"  {args.page_size:,} sessions in the root             {small_page_median:7.2f}"
        f" {percentile(small_pages, 0.9):7.2f}   {len(small_pages)}"
    )
    print(
        f"ratio {args.sessions:,}-root/{args.page_size}-root page (medians, info): {big_median / small_page_median:.2f}"
    )
    holds = ratio <= TARGET_RATIO
    print(f"target GetStopFacts large/small <= {TARGET_RATIO}: {'MET' if holds else 'NOT MET'}")
    return 1 if args.check and not holds else 0


if __name__ == "__main__":
    sys.exit(main())
