"""LedgerSession side by side with the Agents SDK's own SQLiteSession, in one process.

    .venv/bin/python bench/agents_session.py [--items 1040] [--large-items 10000] [--rounds 5]
                                             [--client blocking|async]

Starts a writer and a reader (subprocesses, a temporary data root) and, in this process,
a file-backed SQLiteSession (its default fsync per commit) and a LedgerSession over the
pair on loopback. Items are ~1 KB, as a Runner writes them: user inputs and assistant
output messages. Each round measures, SQLite first then the ledger, on fresh sessions:

* ``add_items`` of 1 item (items/s) and of 32 items (items/s), until ``--items`` are in;
* ``get_items()`` of those ``--items`` items (ms);
* ``get_items(limit=10)`` of a session of ``--large-items`` items (ms);
* each read's first call apart, for information (the reader builds its cache of a session on
  its first read: a pass over the whole file), its CPU time not counted in the read's;
* ``get_items()`` by a new session object of the same session, three times (ms, the median),
  for information: what a caller that makes one object per request pays (a LedgerSession that
  has read or written the session asks the reader only for what changed since);
* ``pop_item()`` of the last item, 50 times (ms each); for information, 50 more pops of the
  large session after :data:`RUN_OF_POPS` pops of it (each pop names an ever older item: what a
  long run of pops costs once the writer no longer remembers the items named);
* before each read figure, the ledger's services are let settle (their CPU time flat: the
  reader indexes what was just written in the background);
* for the ledger, the floor of any call: a gRPC health check round trip to the reader and to
  the writer (ms, over loopback from this process, no ledger work).

Prints each figure's median over the rounds and the ratio ledger/SQLite, with the target of
each (rates: ledger/SQLite at least the target; times: at most), then the floors as ratios to
SQLite's ``get_items(limit=10)`` and ``pop_item()``: what one round trip alone costs against
them. For information, each figure's CPU time too (per item for the adds, per call otherwise):
this process's for SQLite; this process's, the writer's and the reader's for the ledger. The
machine is shared and noisy, so only the ratios, taken within one round, are compared.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import grpc
from _support import ServiceProcess, proc_cpu_ns, settle, start_service
from agents import SQLiteSession
from grpc_health.v1 import health_pb2, health_pb2_grpc

from rollout_client import AsyncRolloutClient, RetryPolicy, RolloutClient
from rollout_client.agents import LedgerSession

#: (figure, kind, target): kind "rate" wants ledger/SQLite >= target, "time" wants <= target.
FIGURES = (
    ("add_items(1 item)", "rate", 0.5),
    ("add_items(32 items)", "rate", 0.8),
    ("get_items() at N", "time", 1.0),
    ("get_items(limit=10) at LARGE", "time", 1.0),
    ("pop_item()", "time", 2.0),
)
#: Pops of the large session before its pops are timed (the last figure, for information).
RUN_OF_POPS = 400
TEXT = "the agent looked at the failing test, read the module and proposed a patch. " * 13


def items(count: int, start: int = 0) -> list[dict[str, Any]]:
    """~1 KB items as a Runner writes them: user inputs and assistant output messages."""
    made: list[dict[str, Any]] = []
    for index in range(start, start + count):
        if index % 2 == 0:
            made.append({"content": f"{index}: {TEXT}", "role": "user"})
        else:
            made.append(
                {
                    "id": f"msg_{index}",
                    "content": [{"annotations": [], "text": f"{index}: {TEXT}", "type": "output_text"}],
                    "role": "assistant",
                    "status": "completed",
                    "type": "message",
                }
            )
    return made


async def timed(call: Callable[[], Awaitable[Any]]) -> float:
    started = time.perf_counter()
    await call()
    return time.perf_counter() - started


class CpuClock:
    """CPU time (ns) the processes ``pids`` have used, all their threads (this process and, for the
    ledger, the writer and the reader): a figure a loaded machine disturbs far less than wall time.
    ``services``: the processes :meth:`settle` waits for."""

    def __init__(self, pids: Sequence[int], services: Sequence[ServiceProcess] = ()) -> None:
        self.pids = pids
        self.services = services

    def now(self) -> int:
        return sum(proc_cpu_ns(pid) for pid in self.pids)

    def settle(self) -> None:
        """Wait until the services' CPU time stays flat: the reader indexes what was just written
        (search, listing) in the background, which would count in, and slow, the next reads."""
        for service in self.services:
            settle(service, quiet_seconds=0.5, limit=120)


async def measure(
    session: Any, large: Any, reopen: Callable[[], Any], count: int, large_count: int, cpu: CpuClock
) -> dict[str, float]:
    """One round's figures of one session kind (``large`` is a second session for the big read,
    ``reopen()`` a new object of ``session``'s session), each with its CPU time per item (adds)
    or per call (reads, pops), in ms, under "<figure> cpu"."""
    figures: dict[str, float] = {}
    single = items(count // 4)
    spent, used = 0.0, cpu.now()
    for item in single:
        spent += await timed(lambda item=item: session.add_items([item]))
    figures["add_items(1 item)"] = len(single) / spent
    figures["add_items(1 item) cpu"] = (cpu.now() - used) / len(single) / 1e6
    rest = items(count - len(single), len(single))
    spent, used = 0.0, cpu.now()
    for first in range(0, len(rest), 32):
        spent += await timed(lambda first=first: session.add_items(rest[first : first + 32]))
    figures["add_items(32 items)"] = len(rest) / spent
    figures["add_items(32 items) cpu"] = (cpu.now() - used) / len(rest) / 1e6
    cpu.settle()
    figures["first get_items() at N"] = await timed(session.get_items) * 1000
    used = cpu.now()
    reads = [await timed(session.get_items) for _ in range(7)]
    figures["get_items() at N"] = statistics.median(reads) * 1000
    figures["get_items() at N cpu"] = (cpu.now() - used) / len(reads) / 1e6
    fresh = []
    for _ in range(3):
        other = reopen()
        fresh.append(await timed(other.get_items))
        other.close()
    figures["get_items() at N, new object"] = statistics.median(fresh) * 1000
    for first in range(0, large_count, 500):
        await large.add_items(items(min(500, large_count - first), first))
    cpu.settle()
    figures["first get_items(limit=10) at LARGE"] = await timed(lambda: large.get_items(limit=10)) * 1000
    used = cpu.now()
    limited = [await timed(lambda: large.get_items(limit=10)) for _ in range(31)]
    figures["get_items(limit=10) at LARGE"] = statistics.median(limited) * 1000
    figures["get_items(limit=10) at LARGE cpu"] = (cpu.now() - used) / len(limited) / 1e6
    used = cpu.now()
    pops = [await timed(session.pop_item) for _ in range(50)]
    figures["pop_item()"] = statistics.median(pops) * 1000
    figures["pop_item() cpu"] = (cpu.now() - used) / len(pops) / 1e6
    for _ in range(RUN_OF_POPS):  # a long run of pops: each names an ever older item
        await large.pop_item()
    later = [await timed(large.pop_item) for _ in range(50)]
    figures["pop_item() after a run of pops"] = statistics.median(later) * 1000
    return figures


async def round_trip(address: str) -> float:
    """The median time (ms) of a gRPC health check of the service at ``address``: one loopback
    round trip through its server, interceptors included, and no ledger work."""
    async with grpc.aio.insecure_channel(address) as channel:
        check = health_pb2_grpc.HealthStub(channel).Check
        request = health_pb2.HealthCheckRequest()
        await check(request)
        return statistics.median([await timed(lambda: check(request)) for _ in range(51)]) * 1000


async def one_round(
    round_no: int,
    folder: Path,
    make_ledger: Callable[[str], LedgerSession],
    args: Any,
    services: tuple[ServiceProcess, ServiceProcess],
) -> tuple[dict[str, float], dict[str, float]]:
    writer, reader = services
    sqlite = SQLiteSession(f"s{round_no}", folder / f"sqlite-{round_no}.db")
    sqlite_large = SQLiteSession(f"l{round_no}", folder / f"sqlite-large-{round_no}.db")
    baseline = await measure(
        sqlite,
        sqlite_large,
        lambda: SQLiteSession(f"s{round_no}", folder / f"sqlite-{round_no}.db"),
        args.items,
        args.large_items,
        CpuClock([os.getpid()]),
    )
    sqlite.close()
    sqlite_large.close()
    ledger = await measure(
        make_ledger(f"s{round_no}"),
        make_ledger(f"l{round_no}"),
        lambda: make_ledger(f"s{round_no}"),
        args.items,
        args.large_items,
        CpuClock([os.getpid(), writer.process.pid, reader.process.pid], services),
    )
    ledger["reader round trip"] = await round_trip(reader.address)
    ledger["writer round trip"] = await round_trip(writer.address)
    return baseline, ledger


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=1040)
    parser.add_argument("--large-items", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--client", choices=("blocking", "async"), default="blocking")
    args = parser.parse_args()
    print("command:", " ".join([".venv/bin/python", *sys.argv]))
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        data = folder / "data"
        data.mkdir()
        writer = start_service("writer", data, folder / "writer.log")
        reader = start_service("reader", data, folder / "reader.log")
        retry = RetryPolicy(deadline=120.0)
        try:
            results: list[tuple[dict[str, float], dict[str, float]]] = []
            if args.client == "blocking":
                with RolloutClient(writer.address, reader.address, retry=retry) as client:
                    for round_no in range(args.rounds):
                        results.append(
                            asyncio.run(
                                one_round(
                                    round_no,
                                    folder,
                                    lambda key: LedgerSession(key, client=client),
                                    args,
                                    (writer, reader),
                                )
                            )
                        )
            else:

                async def run_all() -> None:
                    async with AsyncRolloutClient(writer.address, reader.address, retry=retry) as client:
                        for round_no in range(args.rounds):
                            results.append(
                                await one_round(
                                    round_no,
                                    folder,
                                    lambda key: LedgerSession(key, client=client),
                                    args,
                                    (writer, reader),
                                )
                            )

                asyncio.run(run_all())
        finally:
            writer.stop()
            reader.stop()
    print(
        f"{args.items} items (~1 KB), large session {args.large_items} items, {args.rounds} rounds, {args.client} client"
    )
    print(f"{'figure':34} {'SQLiteSession':>14} {'LedgerSession':>14} {'ratio':>7}  target")
    for name, kind, target in FIGURES:
        label = name.replace("N", str(args.items)).replace("LARGE", str(args.large_items))
        sqlite = statistics.median(base[name] for base, _ in results)
        ledger = statistics.median(led[name] for _, led in results)
        ratios = [led[name] / base[name] for base, led in results]
        ratio = statistics.median(ratios)
        unit = "items/s" if kind == "rate" else "ms"
        met = ratio >= target if kind == "rate" else ratio <= target
        sign = ">=" if kind == "rate" else "<="
        print(
            f"{label:34} {sqlite:>10.2f} {unit:<3} {ledger:>10.2f} {unit:<3} {ratio:>7.2f}  {sign} {target}"
            f" {'met' if met else 'NOT MET'} (ratios {min(ratios):.2f}-{max(ratios):.2f})"
        )
    for name in (
        "first get_items() at N",
        "get_items() at N, new object",
        "first get_items(limit=10) at LARGE",
        "pop_item() after a run of pops",
    ):
        label = name.replace("N", str(args.items)).replace("LARGE", str(args.large_items))
        sqlite = statistics.median(base[name] for base, _ in results)
        ledger = statistics.median(led[name] for _, led in results)
        ratios = [led[name] / base[name] for base, led in results]
        print(
            f"{label:34} {sqlite:>10.2f} ms  {ledger:>10.2f} ms  {statistics.median(ratios):>7.2f}"
            f"  (no target; ratios {min(ratios):.2f}-{max(ratios):.2f})"
        )
    print("CPU time, all processes (this one; for the ledger also the writer and the reader):")
    for name, kind, _ in FIGURES:
        label = name.replace("N", str(args.items)).replace("LARGE", str(args.large_items))
        sqlite = statistics.median(base[name + " cpu"] for base, _ in results)
        ledger = statistics.median(led[name + " cpu"] for _, led in results)
        ratios = [led[name + " cpu"] / base[name + " cpu"] for base, led in results]
        unit = "ms/item" if kind == "rate" else "ms/call"
        print(
            f"  {label:32} {sqlite:>8.3f} {unit:<7} {ledger:>8.3f} {unit:<7} {statistics.median(ratios):>7.2f}"
            f"  (ratios {min(ratios):.2f}-{max(ratios):.2f})"
        )
    for service, figure in (("reader", "get_items(limit=10) at LARGE"), ("writer", "pop_item()")):
        trips = [led[f"{service} round trip"] for _, led in results]
        floors = [led[f"{service} round trip"] / base[figure] for base, led in results]
        label = figure.replace("LARGE", str(args.large_items))
        print(
            f"floor: one round trip to the {service}: {statistics.median(trips):.2f} ms,"
            f" {statistics.median(floors):.2f}x SQLite's {label} (ratios {min(floors):.2f}-{max(floors):.2f})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
