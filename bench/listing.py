"""ListSessions against the number of sessions, and cheap calls while sessions are being created.

Scaling (the default): ListSessions on 10,000 and 20,000 sessions, a page of 100
and a tenant filter matching nothing. Writes two data roots of one-turn sessions
(bench/_support.py records; one second apart, every 50th stopped, all of tenant
``t``): ``--sessions`` and twice as many. One reader subprocess serves each. A
reader indexes every session once when it starts (heads, tails, message
records); the benchmark waits until each reader's CPU time stays flat for a
second and prints how long that took. Then, alternating between the two
readers, it times ``--calls`` calls of each kind from the client:

* first page: ListSessions with ``page_size`` 100 and no filter;
* middle page: the same, from a token in the middle of the walk;
* tenant nobody: ListSessions with a tenant no session has (an empty page).

Prints medians and p90 per kind and root, and the ratio of the medians, bigger
root over smaller. The target is a ratio <= 2 for each kind (the time does not
grow with the number of sessions).

    .venv/bin/python bench/listing.py [--sessions 10000] [--calls 60] [--check]

Churn (``--churn``): one data root of ``--churn-sessions`` one-turn sessions (the
same records, tenant ``t``), a writer and a reader serving it. The benchmark
times the same probes from the client in three phases, one probe cycle every
``1 / --probe-rate`` seconds:

* idle: nothing else runs;
* churn: a thread creates ``--rate`` sessions a second through the writer
  (CreateSession of tenant ``t``, then an Append of one user message), for
  ``--churn-seconds``; afterwards every one of them must be listed, once, by a
  walk of the tenant's pages (exit 2 otherwise);
* soak: ``rollout loadtest`` with ``--agents`` agents (each a parent session
  delegating to a child every fourth turn) runs in its own process against the
  writer for ``--soak-seconds``.

A cycle is: first page (ListSessions, ``page_size`` 100, no filter), tenant page
(the same with tenant ``t``), and stop facts: GetStopFacts of a session picked at
random among those written before the start, then of the newest session the
first page listed (under churn and in the soak, one just created). Prints per phase and probe the median, p90
and p99 (ms), the sessions created per second and the reader's CPU share.
Targets: churn / idle median <= 2 for both pages, soak / idle stop-facts p99 <=
5.

    .venv/bin/python bench/listing.py --churn [--churn-sessions 50000] [--rate 20] [--agents 64] [--check]

``--service-repo PATH`` runs the writer and the reader from another checkout (to
measure code before a change with the same benchmark).

Exit status: 0 whatever the figures; with ``--check``, 1 when a target fails; 2
when a call fails or a page is not what was written.
"""

from __future__ import annotations

import argparse
import random
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import orjson
from _support import REPO, HelpFormatter, Service, proc_cpu_seconds, settle, start_service, write_session

from rollout.v1 import reader_pb2, reader_pb2_grpc, records_pb2, writer_pb2, writer_pb2_grpc
from shared.records import format_timestamp

TARGET_RATIO = 2.0
#: Churn mode: a page while sessions are created, over the same page idle (medians).
CHURN_PAGE_TARGET = 2.0
#: Churn mode: stop facts during the soak, over stop facts idle (p99).
SOAK_STOP_FACTS_TARGET = 5.0
STOP_EVERY = 50
PAGE_SIZE = 100
TENANT = "t"
_BASE_TIME = datetime(2026, 10, 1, tzinfo=UTC)


def write_root(sessions: Path, count: int, base: datetime = _BASE_TIME) -> list[str]:
    """``count`` one-turn sessions, one second apart from ``base``; returns their ids."""
    sessions.mkdir(parents=True)
    return [
        write_session(
            sessions,
            turns=1,
            first_turn=index % 7,
            created_at=base + timedelta(seconds=index),
            stop_kind="paused" if index % STOP_EVERY == 0 else "",
        ).session_id
        for index in range(count)
    ]


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


# -- churn mode ---------------------------------------------------------------------------

PROBES = ("first page", "tenant page", "stop facts")


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


@dataclass
class Phase:
    """What one phase measured: ms per probe, its length, the reader's CPU and sessions created."""

    name: str
    times: dict[str, list[float]] = field(default_factory=lambda: {probe: [] for probe in PROBES})
    seconds: float = 0.0
    reader_cpu: float = 0.0
    created: int = 0
    note: str = ""


class Prober:
    """Times one probe cycle every ``1 / rate`` seconds (a cycle that ends late starts the next at
    once, never a burst): the first page, the tenant page, then the stop facts of a session
    written before the start and of the newest session the first page listed."""

    def __init__(self, stub: reader_pb2_grpc.RolloutReaderStub, ids: list[str], rate: float) -> None:
        self.stub = stub
        self.ids = ids
        self.interval = 1 / rate
        self.rng = random.Random(20261202)
        self.newest = ids[-1]

    def _page(self, tenant: str) -> None:
        response = self.stub.ListSessions(
            reader_pb2.ListSessionsRequest(page_size=PAGE_SIZE, tenant=tenant), timeout=120
        )
        if len(response.sessions) != PAGE_SIZE:
            raise RuntimeError(f"a page of tenant {tenant!r} listed {len(response.sessions)} sessions")
        if not tenant:
            self.newest = response.sessions[0].session_id

    def _stop_facts(self, session_id: str) -> None:
        facts = self.stub.GetStopFacts(reader_pb2.StopFactsRequest(session_id=session_id), timeout=120)
        if facts.session_id != session_id:
            raise RuntimeError(f"stop facts of {session_id} answered for {facts.session_id}")

    def run(self, phase: Phase, pid: int, done: Callable[[], bool]) -> None:
        calls: list[tuple[str, Callable[[], None]]] = [
            ("first page", lambda: self._page("")),
            ("tenant page", lambda: self._page(TENANT)),
            ("stop facts", lambda: self._stop_facts(self.rng.choice(self.ids))),
            ("stop facts", lambda: self._stop_facts(self.newest)),
        ]
        cpu_before, started = proc_cpu_seconds(pid), time.perf_counter()
        next_at = started
        while not done():
            for probe, call in calls:
                begun = time.perf_counter()
                call()
                phase.times[probe].append((time.perf_counter() - begun) * 1000)
            next_at += self.interval
            delay = next_at - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            else:
                next_at = time.perf_counter()
        phase.seconds = time.perf_counter() - started
        phase.reader_cpu = proc_cpu_seconds(pid) - cpu_before


class Creator(threading.Thread):
    """Creates ``rate`` sessions of tenant ``t`` a second through the writer (CreateSession, then
    one Append) until ``stop`` is set; ``ids`` holds those created, ``error`` what failed."""

    def __init__(self, stub: writer_pb2_grpc.RolloutWriterStub, rate: float, stop: threading.Event) -> None:
        super().__init__(name="bench-creator", daemon=True)
        self.stub = stub
        self.interval = 1 / rate
        self.stop = stop
        self.ids: list[str] = []
        self.error: Exception | None = None

    def run(self) -> None:
        record = writer_pb2.AppendRecord(
            message=records_pb2.ChatMessage(role="user", text="Summarize the failing tests.")
        )
        next_at = time.perf_counter()
        try:
            while not self.stop.is_set():
                created = self.stub.CreateSession(
                    writer_pb2.CreateSessionRequest(
                        tenant=TENANT, agent_name="churn", role=writer_pb2.SESSION_ROLE_ROOT
                    ),
                    timeout=30,
                )
                self.stub.Append(
                    writer_pb2.AppendRequest(session_id=created.session_id, records=[record]), timeout=30
                )
                self.ids.append(created.session_id)
                next_at += self.interval
                delay = next_at - time.perf_counter()
                if delay > 0:
                    self.stop.wait(delay)
        except grpc.RpcError as exc:
            self.error = exc


def listed_since(stub: reader_pb2_grpc.RolloutReaderStub, since: datetime) -> list[str]:
    """Every session of tenant ``t`` created at or after ``since``, walked page by page."""
    found: list[str] = []
    token = ""
    while True:
        response = stub.ListSessions(
            reader_pb2.ListSessionsRequest(
                page_size=1000, page_token=token, tenant=TENANT, created_after=format_timestamp(since)
            ),
            timeout=120,
        )
        found.extend(listed.session_id for listed in response.sessions)
        token = response.next_page_token
        if not token:
            return found


def run_churn(args: argparse.Namespace) -> int:
    print("command:", shlex.join(sys.orig_argv))
    print(f"service code: {args.service_repo.resolve()}")
    phases = [Phase("idle"), Phase("churn"), Phase("soak")]
    services: list[Service] = []
    with tempfile.TemporaryDirectory(prefix="rollout-bench-churn-", dir="/tmp") as tmp_name:
        tmp = Path(tmp_name)
        try:
            started = time.perf_counter()
            base = datetime.now(UTC).replace(microsecond=0) - timedelta(days=1, seconds=args.churn_sessions)
            ids = write_root(tmp / "root" / "sessions", args.churn_sessions, base)
            print(
                f"workload: {args.churn_sessions:,} one-turn sessions of tenant {TENANT!r}"
                f" (written in {time.perf_counter() - started:.1f} s)"
            )
            repo = args.service_repo.resolve()
            started = time.perf_counter()
            writer = start_service("writer", tmp / "root", tmp / "writer.stderr", repo=repo)
            services.append(writer)
            print(f"writer listening {time.perf_counter() - started:.1f} s after start")
            reader = start_service("reader", tmp / "root", tmp / "reader.stderr", repo=repo)
            services.append(reader)
            print(f"reader settled (index warm) {settle(reader):.1f} s after start")
            pid = reader.process.pid
            with (
                grpc.insecure_channel(reader.address) as reader_channel,
                grpc.insecure_channel(writer.address) as writer_channel,
            ):
                prober = Prober(reader_pb2_grpc.RolloutReaderStub(reader_channel), ids, args.probe_rate)  # type: ignore[no-untyped-call]
                writer_stub = writer_pb2_grpc.RolloutWriterStub(writer_channel)  # type: ignore[no-untyped-call]
                warm_up = Phase("warm-up")
                until = time.perf_counter() + 2
                prober.run(warm_up, pid, lambda: time.perf_counter() > until)

                idle = phases[0]
                until = time.perf_counter() + args.idle_seconds
                prober.run(idle, pid, lambda: time.perf_counter() > until)

                churn = phases[1]
                since = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
                stop = threading.Event()
                creator = Creator(writer_stub, args.rate, stop)
                creator.start()
                until = time.perf_counter() + args.churn_seconds
                prober.run(churn, pid, lambda: time.perf_counter() > until or creator.error is not None)
                stop.set()
                creator.join()
                if creator.error is not None:
                    raise creator.error
                churn.created = len(creator.ids)
                listed = listed_since(prober.stub, since)
                if sorted(listed) != sorted(creator.ids):
                    missing = len(set(creator.ids) - set(listed))
                    raise RuntimeError(
                        f"of {len(creator.ids)} sessions created under churn, {missing} are not listed"
                        f" ({len(listed)} listed, {len(set(listed))} distinct)"
                    )
                churn.note = f"all {len(creator.ids)} listed once"

                soak = phases[2]
                loadtest = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "rollout_cli.main",
                        "loadtest",
                        "--writer",
                        writer.address,
                        "--sessions",
                        str(args.agents),
                        "--duration",
                        str(args.soak_seconds),
                        "--think-ms",
                        str(args.think_ms),
                        "--json",
                    ],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    cwd=REPO,
                )
                try:
                    prober.run(soak, pid, lambda: loadtest.poll() is not None)
                finally:
                    output, _ = loadtest.communicate(timeout=120)
                if loadtest.returncode != 0:
                    raise RuntimeError(f"rollout loadtest failed (exit {loadtest.returncode})")
                report = orjson.loads(output)
                soak.created = report["sessions_created"]
                soak.note = (
                    f"{args.agents} agents: {report['appends_per_second']:,.0f} appends/s,"
                    f" ack p99 {report['ack_ms']['p99']:.1f} ms"
                )
        except (grpc.RpcError, RuntimeError) as exc:
            detail = f"{exc.code().name}: {exc.details()}" if isinstance(exc, grpc.RpcError) else str(exc)
            print(f"benchmark failed: {detail}")
            return 2
        finally:
            for service in services:
                service.stop()
    return report_churn(phases, args)


def report_churn(phases: list[Phase], args: argparse.Namespace) -> int:
    print(
        f"\n{args.churn_sessions:,} sessions, probes every {1000 / args.probe_rate:.0f} ms; ms median / p90 / p99"
    )
    print(f"{'phase':6} {'s':>4} {'created/s':>9} {'reader CPU':>10}  " + "".join(f"{p:>24}" for p in PROBES))
    for phase in phases:
        figures = "".join(
            f"{statistics.median(phase.times[p]):8.1f}{percentile(phase.times[p], 0.9):8.1f}"
            f"{percentile(phase.times[p], 0.99):8.1f}"
            for p in PROBES
        )
        print(
            f"{phase.name:6} {phase.seconds:4.0f} {phase.created / phase.seconds:9.1f}"
            f" {phase.reader_cpu / phase.seconds:9.0%}   {figures}"
            + (f"   ({phase.note})" if phase.note else "")
        )
    idle, churn, soak = phases
    checks = [
        (
            f"churn / idle, {probe} median",
            statistics.median(churn.times[probe]) / statistics.median(idle.times[probe]),
            CHURN_PAGE_TARGET,
        )
        for probe in ("first page", "tenant page")
    ]
    checks.append(
        (
            "soak / idle, stop facts p99",
            percentile(soak.times["stop facts"], 0.99) / percentile(idle.times["stop facts"], 0.99),
            SOAK_STOP_FACTS_TARGET,
        )
    )
    all_hold = True
    for name, ratio, target in checks:
        holds = ratio <= target
        all_hold = all_hold and holds
        print(f"  {name:32s} {ratio:6.2f}  <= {target}: {'MET' if holds else 'NOT MET'}")
    return 1 if args.check and not all_hold else 0


# -- main -----------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument(
        "--sessions",
        type=int,
        default=10_000,
        help="sessions in the smaller root (the bigger has twice as many)",
    )
    parser.add_argument("--calls", type=int, default=60, help="timed calls of each kind per root")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is not met")
    churn = parser.add_argument_group("churn mode")
    churn.add_argument("--churn", action="store_true", help="measure probes idle, under churn and in a soak")
    churn.add_argument("--churn-sessions", type=int, default=50_000, help="sessions written before the start")
    churn.add_argument("--rate", type=float, default=20, help="sessions created a second in the churn phase")
    churn.add_argument("--probe-rate", type=float, default=10, help="probe cycles a second")
    churn.add_argument("--idle-seconds", type=float, default=30, help="length of the idle phase")
    churn.add_argument("--churn-seconds", type=float, default=30, help="length of the churn phase")
    churn.add_argument("--soak-seconds", type=float, default=60, help="length of the soak")
    churn.add_argument("--agents", type=int, default=64, help="agents of the soak (rollout loadtest)")
    churn.add_argument("--think-ms", type=float, default=0, help="the soak agents' pause between Appends")
    parser.add_argument(
        "--service-repo", type=Path, default=REPO, help="checkout whose writer and reader are measured"
    )
    args = parser.parse_args(argv)
    if args.sessions < 2 * PAGE_SIZE or args.calls < 1:
        parser.error(f"--sessions must be >= {2 * PAGE_SIZE} and --calls positive")
    if args.churn_sessions < PAGE_SIZE or min(args.rate, args.probe_rate, args.agents) <= 0:
        parser.error(f"--churn-sessions must be >= {PAGE_SIZE}; --rate, --probe-rate and --agents positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.churn:
        return run_churn(args)
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
                services.append(
                    start_service(
                        "reader",
                        tmp / str(count),
                        tmp / f"reader-{count}.stderr",
                        repo=args.service_repo.resolve(),
                    )
                )
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
