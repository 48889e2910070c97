"""What the sharded layout costs: the same code on a 256-shard data root against a flat one, as ratios.

Each figure runs this checkout's services on two data roots holding the same sessions: one
sharded (``cluster.json``, ``shards/<NNN>/sessions/``: shared.layout) and one in the flat
single-folder layout of roots written before shards, alternating which goes first each round.

* ``fleet``: 64 client threads, one session each (made by CreateSession on each root), one
  record per Append for ``--seconds``; records/s sharded / flat. Target >= 0.9.
* ``round-robin``: 8 threads append one record each to sessions taken in turn over
  ``--sessions`` pre-written open sessions of ~``--session-kb`` KB (more than the writer keeps
  open: most appends reopen a session); appends/s and writer CPU per append, sharded / flat.
  Target >= 0.9.
* ``listing``: in this process, a reader's listing index over ``--listed`` sessions: a page of 50
  (``list_sessions``) and a lookup by id, p50 in microseconds, sharded / flat, once the folders'
  time stamps have settled. Target <= 1.2.

Usage:

    .venv/bin/python bench/shards.py [--rounds 5] [--seconds 3] [--sessions 1000] [--session-kb 20]
                                     [--listed 2000] [--check]

Each figure is the median over ``--rounds`` rounds with the spread (min-max). Exit status: 0
whatever the figures; with ``--check``, 1 when a target is not met.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
from _support import HelpFormatter, proc_cpu_ns
from fleet import (
    REPO,
    Figure,
    Servers,
    _record,
    _spread,
    _stub,
    fleet_rate,
    round_robin_rate,
    write_open_sessions,
)

from reader_service.listing import list_sessions
from reader_service.listing_index import ListingIndex
from rollout.v1 import writer_pb2
from shared.layout import DataRoot
from shared.naming import build_file_name
from shared.records import encode_line, format_timestamp

LAYOUTS = ("sharded", "flat")


def flat_root(folder: Path) -> Path:
    """An empty data root in the layout written before shards (a sessions folder, no record)."""
    (folder / "sessions").mkdir(parents=True)
    return folder


def into_shards(flat: Path, folder: Path) -> Path:
    """A sharded root (256 shards) holding the files of the flat root ``flat`` (moved)."""
    root = DataRoot(folder)
    root.create(256)
    for path in (flat / "sessions").iterdir():
        session_id = path.name.split("_")[2].removesuffix(".jsonl")
        target = root.session_path(session_id, path.name)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.rename(path, target)
    return folder


def bench_fleet(servers: Servers, tmp: Path, args: argparse.Namespace) -> Figure:
    figure = Figure("fleet: 64 agents x 1 record/Append", "records/s sharded vs flat", 0.9, True)
    writers = {
        "sharded": servers.writer(tmp / "fleet-sharded")[0],
        "flat": servers.writer(flat_root(tmp / "fleet-flat"))[0],
    }
    try:
        for number in range(args.rounds):
            rates = {}
            for name in LAYOUTS if number % 2 == 0 else reversed(LAYOUTS):
                rates[name] = fleet_rate(writers[name].address, args.seconds)
            figure.add(rates["sharded"], rates["flat"])
            print(
                f"fleet round {number + 1}: sharded {rates['sharded']:,.0f}  flat {rates['flat']:,.0f} records/s"
            )
    finally:
        for writer in writers.values():
            writer.stop()
    return figure


def bench_round_robin(servers: Servers, tmp: Path, args: argparse.Namespace) -> list[Figure]:
    rate = Figure(f"round-robin: {args.sessions:,} sessions", "appends/s sharded vs flat", 0.9, True)
    cpu = Figure(
        f"round-robin: {args.sessions:,} sessions", "writer CPU us/append sharded vs flat", 1.1, False
    )
    ids = write_open_sessions(tmp / "rr-flat", args.sessions, args.session_kb * 1024)
    shutil.copytree(tmp / "rr-flat", tmp / "rr-copy")
    roots = {"flat": tmp / "rr-flat", "sharded": into_shards(tmp / "rr-copy", tmp / "rr-sharded")}
    writers = {name: servers.writer(roots[name])[0] for name in LAYOUTS}
    try:
        for writer in writers.values():  # one untimed append to each: the steady state, not a first open
            with grpc.insecure_channel(writer.address) as channel:
                stub = _stub(channel)
                for session_id in ids:
                    stub.Append(writer_pb2.AppendRequest(session_id=session_id, records=[_record()]))
        for number in range(args.rounds):
            got = {}
            for name in LAYOUTS if number % 2 == 0 else reversed(LAYOUTS):
                pid = writers[name].process.pid
                before, started = proc_cpu_ns(pid), time.perf_counter()
                appends_per_second = round_robin_rate(writers[name].address, ids, args.seconds)
                appends = appends_per_second * (time.perf_counter() - started)
                got[name] = (appends_per_second, (proc_cpu_ns(pid) - before) / 1000 / max(appends, 1))
            rate.add(got["sharded"][0], got["flat"][0])
            cpu.add(got["sharded"][1], got["flat"][1])
            print(
                f"round-robin round {number + 1}: sharded {got['sharded'][0]:,.0f}  flat {got['flat'][0]:,.0f}"
                f" appends/s; CPU {got['sharded'][1]:.0f} / {got['flat'][1]:.0f} us per append"
            )
    finally:
        for writer in writers.values():
            writer.stop()
    return [rate, cpu]


def write_listed(folder: Path, count: int, sharded: bool) -> Path:
    """``count`` one-line sessions, one second apart, in a sharded or a flat root."""
    root = DataRoot(folder)
    if sharded:
        root.create(256)
    else:
        flat_root(folder)
    base = datetime(2026, 1, 1, tzinfo=UTC)
    for number in range(count):
        session_id = f"01900000-0000-7000-8000-{number:012x}"
        created = base + timedelta(seconds=number)
        name = build_file_name(created, session_id)
        path = root.session_path(session_id, name) if sharded else folder / "sessions" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        meta = {"session_id": session_id, "tenant": "t", "created_at": format_timestamp(created)}
        path.write_bytes(encode_line(0, format_timestamp(created), "session_meta", meta))
    return folder


def bench_listing(tmp: Path, args: argparse.Namespace) -> list[Figure]:
    page = Figure(f"listing: a page of 50 of {args.listed:,}", "us p50 sharded vs flat", 1.2, False)
    lookup = Figure(f"listing: a lookup of {args.listed:,}", "us p50 sharded vs flat", 1.2, False)
    indexes = {
        name: ListingIndex(DataRoot(write_listed(tmp / f"listed-{name}", args.listed, name == "sharded")))
        for name in LAYOUTS
    }
    try:
        for index in indexes.values():
            list_sessions(index, page_size=50)
        time.sleep(3)  # time stamps older than the coarse-stamp window: the folders settle
        for index in indexes.values():
            for _ in range(20):
                list_sessions(index, page_size=50)
        ids = [f"01900000-0000-7000-8000-{number:012x}" for number in range(0, args.listed, 7)]
        for number in range(args.rounds):
            got = {}
            for name in LAYOUTS if number % 2 == 0 else reversed(LAYOUTS):
                pages, lookups = [], []
                for _ in range(100):
                    started = time.perf_counter()
                    list_sessions(indexes[name], page_size=50)
                    pages.append(time.perf_counter() - started)
                for session_id in ids:
                    started = time.perf_counter()
                    indexes[name].locate(session_id)
                    lookups.append(time.perf_counter() - started)
                got[name] = (statistics.median(pages) * 1e6, statistics.median(lookups) * 1e6)
            page.add(got["sharded"][0], got["flat"][0])
            lookup.add(got["sharded"][1], got["flat"][1])
            print(
                f"listing round {number + 1}: page {got['sharded'][0]:,.0f} / {got['flat'][0]:,.0f} us,"
                f" lookup {got['sharded'][1]:,.1f} / {got['flat'][1]:,.1f} us (sharded / flat)"
            )
    finally:
        for index in indexes.values():
            index.close()
    return [page, lookup]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--rounds", type=int, default=5, help="measurements per figure (medians reported)")
    parser.add_argument("--seconds", type=float, default=3.0, help="length of each throughput measurement")
    parser.add_argument("--sessions", type=int, default=1000, help="pre-written sessions for round-robin")
    parser.add_argument("--session-kb", type=int, default=20, help="size of each pre-written session (KB)")
    parser.add_argument("--listed", type=int, default=2000, help="sessions in the listing roots")
    parser.add_argument(
        "--only", default="fleet,round-robin,listing", help="comma-separated workloads to run"
    )
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is not met")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    only = set(args.only.split(","))
    print("command:", shlex.join(sys.orig_argv))
    tmp = Path(tempfile.mkdtemp(prefix="rollout-shards-", dir=os.environ.get("TMPDIR")))
    servers = Servers(tmp, REPO)
    figures: list[Figure] = []
    try:
        if "fleet" in only:
            figures.append(bench_fleet(servers, tmp, args))
        if "round-robin" in only:
            figures.extend(bench_round_robin(servers, tmp, args))
        if "listing" in only:
            figures.extend(bench_listing(tmp, args))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print()
    print(f"{'workload':<36} {'sharded':>24} {'flat':>24} {'ratio':>20}  target")
    failed = False
    for figure in figures:
        sign = ">=" if figure.higher_is_better else "<="
        verdict = "MET" if figure.holds else "NOT MET"
        failed |= not figure.holds
        print(
            f"{figure.name:<36} {_spread(figure.subject, ',.1f'):>24} {_spread(figure.baseline, ',.1f'):>24}"
            f" {_spread(figure.ratios, '.2f'):>20}  {sign} {figure.target} {verdict} ({figure.unit})"
        )
    print("(medians over rounds, [min-max] spread)")
    return 1 if args.check and failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
