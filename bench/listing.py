"""ListSessions on 10,000 and 20,000 sessions: a page of 100, and a tenant filter matching nothing.

Writes two data roots of one-turn sessions (bench/_support.py records; one second
apart, every 50th stopped, all of tenant ``t``): ``--sessions`` and twice as many.
One reader subprocess serves each. A reader indexes every session once when it
starts (heads, tails, message records); the benchmark waits until each reader's
CPU time stays flat for a second and prints how long that took. Then, alternating
between the two readers, it times ``--calls`` calls of each kind from the client:

* first page: ListSessions with ``page_size`` 100 and no filter;
* middle page: the same, from a token in the middle of the walk;
* tenant nobody: ListSessions with a tenant no session has (an empty page).

Prints medians and p90 per kind and root, and the ratio of the medians, bigger
root over smaller. The target is a ratio <= 2 for each kind (the time does not
grow with the number of sessions).

    .venv/bin/python bench/listing.py [--sessions 10000] [--calls 60] [--check]

Exit status: 0 whatever the figures; with ``--check``, 1 when a target fails; 2
when a call fails or a page is not what was written.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
from _support import HelpFormatter, Service, settle, start_service, write_session

from rollout.v1 import reader_pb2, reader_pb2_grpc

TARGET_RATIO = 2.0
STOP_EVERY = 50
PAGE_SIZE = 100
_BASE_TIME = datetime(2026, 10, 1, tzinfo=UTC)


def write_root(sessions: Path, count: int) -> None:
    sessions.mkdir(parents=True)
    for index in range(count):
        write_session(
            sessions,
            turns=1,
            first_turn=index % 7,
            created_at=_BASE_TIME + timedelta(seconds=index),
            stop_kind="paused" if index % STOP_EVERY == 0 else "",
        )


def timed_call(
    stub: reader_pb2_grpc.RolloutReaderStub, request: reader_pb2.ListSessionsRequest
) -> tuple[float, reader_pb2.ListSessionsResponse]:
    started = time.perf_counter()
    response: reader_pb2.ListSessionsResponse = stub.ListSessions(request, timeout=120)
    return (time.perf_counter() - started) * 1000, response


def middle_token(stub: reader_pb2_grpc.RolloutReaderStub, count: int) -> str:
    """The page token halfway through the walk (by asking with a page of half the sessions)."""
    _, response = timed_call(stub, reader_pb2.ListSessionsRequest(page_size=min(count // 2, 1000)))
    token = response.next_page_token
    for _ in range(max(0, count // 2 // 1000 - 1)):
        _, response = timed_call(stub, reader_pb2.ListSessionsRequest(page_size=1000, page_token=token))
        token = response.next_page_token
    return token


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument(
        "--sessions",
        type=int,
        default=10_000,
        help="sessions in the smaller root (the bigger has twice as many)",
    )
    parser.add_argument("--calls", type=int, default=60, help="timed calls of each kind per root")
    parser.add_argument("--check", action="store_true", help=f"exit 1 when a ratio is over {TARGET_RATIO}")
    args = parser.parse_args(argv)
    if args.sessions < 2 * PAGE_SIZE or args.calls < 1:
        parser.error(f"--sessions must be >= {2 * PAGE_SIZE} and --calls positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print("command:", shlex.join(sys.orig_argv))
    counts = (args.sessions, 2 * args.sessions)
    kinds = ("first page", "middle page", "tenant nobody")
    times: dict[tuple[str, int], list[float]] = {(kind, count): [] for kind in kinds for count in counts}
    services: list[Service] = []
    with tempfile.TemporaryDirectory(prefix="rollout-bench-listing-", dir="/tmp") as tmp_name:
        tmp = Path(tmp_name)
        try:
            started = time.perf_counter()
            for count in counts:
                write_root(tmp / str(count) / "sessions", count)
            print(
                f"workload: {counts[0]:,} and {counts[1]:,} one-turn sessions (written in {time.perf_counter() - started:.1f} s)"
            )
            for count in counts:
                services.append(start_service("reader", tmp / str(count), tmp / f"reader-{count}.stderr"))
                print(
                    f"reader of {count:,} sessions settled (index warm) {settle(services[-1]):.1f} s after start"
                )
            channels = [grpc.insecure_channel(service.address) for service in services]
            stubs = [reader_pb2_grpc.RolloutReaderStub(channel) for channel in channels]  # type: ignore[no-untyped-call]
            tokens = [middle_token(stub, count) for stub, count in zip(stubs, counts, strict=True)]
            requests = {
                "first page": lambda _token: reader_pb2.ListSessionsRequest(page_size=PAGE_SIZE),
                "middle page": lambda token: reader_pb2.ListSessionsRequest(
                    page_size=PAGE_SIZE, page_token=token
                ),
                "tenant nobody": lambda _token: reader_pb2.ListSessionsRequest(
                    page_size=PAGE_SIZE, tenant="nobody"
                ),
            }
            for number in range(args.calls + 3):
                order = list(zip(stubs, counts, tokens, strict=True))
                for stub, count, token in order if number % 2 else reversed(order):
                    for kind in kinds:
                        elapsed, response = timed_call(stub, requests[kind](token))
                        expected = 0 if kind == "tenant nobody" else PAGE_SIZE
                        if len(response.sessions) != expected:
                            raise RuntimeError(f"{kind} on {count} sessions listed {len(response.sessions)}")
                        if number >= 3:  # three warm-up rounds
                            times[(kind, count)].append(elapsed)
            for channel in channels:
                channel.close()
        except (grpc.RpcError, RuntimeError) as exc:
            detail = f"{exc.code().name}: {exc.details()}" if isinstance(exc, grpc.RpcError) else str(exc)
            print(f"benchmark failed: {detail}")
            return 2
        finally:
            for service in services:
                service.stop()
    all_hold = True
    print(
        f"ListSessions, ms ({args.calls} calls each):   {counts[0]:,} sessions: median  p90    {counts[1]:,} sessions: median  p90    ratio"
    )
    for kind in kinds:
        small, big = times[(kind, counts[0])], times[(kind, counts[1])]
        ratio = statistics.median(big) / statistics.median(small)
        holds = ratio <= TARGET_RATIO
        all_hold = all_hold and holds
        p90 = lambda values: sorted(values)[int(0.9 * len(values))]  # noqa: E731
        print(
            f"  {kind:14s} {'':22s}{statistics.median(small):7.2f} {p90(small):6.2f}"
            f"  {'':19s}{statistics.median(big):7.2f} {p90(big):6.2f}   {ratio:5.2f}  <= {TARGET_RATIO}: {'MET' if holds else 'NOT MET'}"
        )
    return 1 if args.check and not all_hold else 0


if __name__ == "__main__":
    sys.exit(main())
