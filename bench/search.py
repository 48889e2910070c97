"""Content search (reader_service.search_index): query cost against the number of sessions,
index lag under the fleet load, the fleet figure with indexing on against off, index size.

Every figure is a ratio against a baseline measured in the same run:

* ``scale``: the median time of a query over ``--sessions`` sessions (default 20,000 of
  ~``--session-kb`` KB each: ~2 GB) against the same query when the same data root held a
  tenth of them (the first tenth: the matching sessions are the same). Queries: a rare word
  (planted in 20 sessions of the first tenth, the way an error string or a PR number is
  rare), the same word with a cwd filter, and a common word (in every session: it costs what
  matches it, reported for context). Target for the rare word: <= 2. The index is built in
  this process (:meth:`SearchIndex.catch_up`), and its size is reported over the bytes of
  text it indexed.
* ``lag``: a writer and a reader (real processes) while 64 agents append as in
  ``bench/fleet.py`` (``fleet`` workload): a probe appends a user message with a fresh word
  every ``--probe-ms`` and asks SearchSessions every 5 ms until it is found; the p50 and p99
  of append-acknowledged to found.
* ``fleet``: the same 64-agent records/s with the reader indexing (``serve-reader``) against
  the reader without an index (``serve-reader --no-search``), rounds alternating. Target >= 0.9.
* ``indexing``: the indexing thread's own CPU time per 1,000 records, while 64 session files
  get ~1 KB records at ``--indexing-rate`` records/s in all (a child process appends the lines
  itself: no writer, no RPC, so the figure moves little with the host's load), for this
  checkout against ``--baseline-repo`` (another checkout: the code before a change), rounds
  alternating. Lower is better; the ratio is this checkout's over the baseline's.

Usage:

    .venv/bin/python bench/search.py [--sessions 20000] [--session-kb 100] [--rounds 3]
                                     [--seconds 4] [--only scale,fleet,indexing]
                                     [--baseline-repo PATH] [--indexing-rate 1000]

``--sessions`` scales the first part down (say so with the figures when you do).
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
from _support import HelpFormatter, proc_cpu_seconds, turn_records
from fleet import AGENTS, Servers, fleet_rate, start_process

from reader_service.search_index import SearchFilters, SearchIndex
from rollout.v1 import reader_pb2, reader_pb2_grpc, records_pb2, writer_pb2, writer_pb2_grpc
from shared.layout import DataRoot
from shared.naming import build_file_name, new_session_id
from shared.records import RecordType, encode_line, format_timestamp
from tests.processes import ServiceProcess

REPO = Path(__file__).resolve().parent.parent
RARE = "zebraquartzine"
#: The writer's CPU seconds per 1,000 records of each fleet run.
WRITER_CPU: list[float] = []
PLANTED = 20
BASE = datetime(2026, 6, 1, tzinfo=UTC)


def write_sessions(root: Path, start: int, count: int, target_bytes: int, planted_below: int) -> int:
    """Sessions ``start`` .. ``start + count - 1`` (each ~``target_bytes``); returns bytes written.
    Session ``i`` runs in ``/home/dev/p{i % 50}``; :data:`PLANTED` sessions spread over the
    first ``planted_below`` hold the rare word in a tool output."""
    data = DataRoot(root)
    if not data.resolve():
        data.create()
    written = 0
    for number in range(start, start + count):
        created = BASE + timedelta(seconds=number)
        session_id = new_session_id()
        meta = {
            "session_id": session_id,
            "tenant": "default",
            "cwd": f"/home/dev/p{number % 50}",
            "created_at": format_timestamp(created),
        }
        ts = format_timestamp(created)
        lines = [encode_line(0, ts, RecordType.SESSION_META, meta)]
        size, seq, turn = len(lines[0]), 1, number % 60
        while size < target_bytes:
            records, _ = turn_records(turn)
            for record_type, payload in records:
                lines.append(encode_line(seq, ts, record_type, payload))
                size += len(lines[-1])
                seq += 1
            turn += 1
        if number < planted_below and number % max(1, planted_below // PLANTED) == 0:
            output = {"role": "tool", "tool_call_id": "x", "content": f"error: {RARE} at db.ts:42"}
            lines.append(encode_line(seq, ts, RecordType.MESSAGE, output))
        path = data.session_path(session_id, build_file_name(created, session_id))
        path.parent.mkdir(parents=True, exist_ok=True)
        blob = b"".join(lines)
        path.write_bytes(blob)
        written += len(blob)
    return written


def query_seconds(index: SearchIndex, query: str, filters: SearchFilters, rounds: int) -> float:
    index.search(query, filters, 20, 0)  # warm the page cache and the connection
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        index.search(query, filters, 20, 0)
        times.append(time.perf_counter() - started)
    return min(times)  # the machine is shared: the least time is the query's own cost


QUERIES = {
    "rare word": (RARE, SearchFilters()),
    "rare word, cwd filter": (RARE, SearchFilters(cwd="/home/dev/p0")),
    "common word (every session)": ("shell", SearchFilters()),
    # Every word must be in the session, in one record or several: the rare one is found first,
    # then each of its sessions is probed for the common one.
    "rare and common words": (f"{RARE} shell", SearchFilters()),
}


def bench_scale(tmp: Path, args: argparse.Namespace) -> list[str]:
    root, small = tmp / "data-scale", max(1, args.sessions // 10)
    lines = [f"scale: {args.sessions:,} sessions of ~{args.session_kb} KB against the first {small:,}"]
    started = time.perf_counter()
    written = write_sessions(root, 0, small, args.session_kb * 1000, small)
    index = SearchIndex(DataRoot(root), tmp / "index-scale")
    try:
        built = time.perf_counter()
        index.catch_up()
        build_small = time.perf_counter() - built
        before = {name: query_seconds(index, *query, args.query_rounds) for name, query in QUERIES.items()}
        written += write_sessions(root, small, args.sessions - small, args.session_kb * 1000, small)
        built = time.perf_counter()
        index.catch_up()
        build_rest = time.perf_counter() - built
        after = {name: query_seconds(index, *query, args.query_rounds) for name, query in QUERIES.items()}
        hits = len(index.search(RARE, SearchFilters(), 100, 0).hits)
        index_bytes, text_bytes = index.sizes()
    finally:
        index.close()
    lines.append(
        f"  files {written / 1e9:.2f} GB written; index built at {written / 1e6 / (build_small + build_rest):.1f}"
        f" MB of files/s ({build_small:.0f} s + {build_rest:.0f} s; total {time.perf_counter() - started:.0f} s)"
    )
    for name in QUERIES:
        ratio = after[name] / before[name]
        target = "  target <= 2: " + ("MET" if ratio <= 2 else "NOT MET") if name == "rare word" else ""
        lines.append(
            f"  {name:<24} {after[name] * 1e3:8.2f} ms over {args.sessions:,} / {before[name] * 1e3:8.2f} ms"
            f" over {small:,} = {ratio:5.2f}x{target}"
        )
    lines.append(f"  rare word hits: {hits} sessions (planted in {PLANTED})")
    lines.append(
        f"  index size {index_bytes / 1e6:,.1f} MB over {text_bytes / 1e6:,.1f} MB of text indexed"
        f" = {index_bytes / text_bytes:.2f}x (files: {written / 1e6:,.0f} MB)"
    )
    return lines


class Reader:
    def __init__(self, tmp: Path, data_dir: Path, search: bool) -> None:
        argv = [sys.executable, "-m", "rollout_cli.main", "serve-reader", "--data-dir", str(data_dir)]
        argv += ["--address", "127.0.0.1:0", "--search" if search else "--no-search"]
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO)}
        self.process: ServiceProcess = start_process(argv, tmp / "reader.log", REPO, env)


def probe_lag(writer: str, reader: str, stop: threading.Event, probe_ms: float, lags: list[float]) -> None:
    """Append a fresh word every ``probe_ms`` and time acknowledgement to found."""
    with grpc.insecure_channel(writer) as writer_channel, grpc.insecure_channel(reader) as reader_channel:
        writes = writer_pb2_grpc.RolloutWriterStub(writer_channel)  # type: ignore[no-untyped-call]
        reads = reader_pb2_grpc.RolloutReaderStub(reader_channel)  # type: ignore[no-untyped-call]
        session_id = writes.CreateSession(
            writer_pb2.CreateSessionRequest(role=writer_pb2.SESSION_ROLE_ROOT)
        ).session_id
        while not stop.is_set():
            word = "probe" + uuid.uuid4().hex[:12]
            record = writer_pb2.AppendRecord(
                message=records_pb2.ChatMessage(role="user", text=f"look {word}")
            )
            writes.Append(writer_pb2.AppendRequest(session_id=session_id, records=[record]))
            acknowledged = time.perf_counter()
            while not reads.SearchSessions(reader_pb2.SearchSessionsRequest(query=word)).hits:
                time.sleep(0.005)
            lags.append(time.perf_counter() - acknowledged)
            stop.wait(probe_ms / 1000)


def fleet_with_reader(
    servers: Servers, tmp: Path, name: str, search: bool, seconds: float, probe: dict | None = None
) -> tuple[float, float]:
    """64-agent records/s (bench/fleet.py) with a reader on the same data root, and the reader's
    CPU seconds over the run per 1,000 records; with ``probe`` ({"probe_ms", "lags"}), a lag
    probe runs meanwhile (its appends and searches load the pair)."""
    data_dir = tmp / f"data-{name}"
    writer, _ = servers.writer(data_dir)
    reader = Reader(tmp, data_dir, search).process
    stop = threading.Event()
    thread = None
    try:
        if probe is not None:
            arguments = (writer.address, reader.address, stop, probe["probe_ms"], probe["lags"])
            thread = threading.Thread(target=probe_lag, args=arguments)
            thread.start()
        cpu = proc_cpu_seconds(reader.process.pid)
        writer_cpu = proc_cpu_seconds(writer.process.pid)
        started = time.perf_counter()
        rate = fleet_rate(writer.address, seconds)
        thousands = rate * (time.perf_counter() - started) / 1000
        WRITER_CPU.append((proc_cpu_seconds(writer.process.pid) - writer_cpu) / thousands)
        return rate, (proc_cpu_seconds(reader.process.pid) - cpu) / thousands
    finally:
        stop.set()
        if thread is not None:
            thread.join()
        reader.stop()
        writer.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


def bench_fleet(tmp: Path, args: argparse.Namespace) -> list[str]:
    servers = Servers(tmp, REPO)
    rates: dict[bool, list[float]] = {True: [], False: []}
    cpu: dict[bool, list[float]] = {True: [], False: []}
    for number in range(args.rounds):
        for search in (True, False) if number % 2 == 0 else (False, True):
            rate, reader_cpu = fleet_with_reader(
                servers, tmp, f"fleet-{number}-{search}", search, args.seconds
            )
            rates[search].append(rate)
            cpu[search].append(reader_cpu)
        print(
            f"fleet round {number + 1}: indexing on {rates[True][-1]:,.0f}  off {rates[False][-1]:,.0f} records/s"
        )
    lags: list[float] = []
    for number in range(args.rounds):
        probe = {"probe_ms": args.probe_ms, "lags": lags}
        fleet_with_reader(servers, tmp, f"lag-{number}", True, args.seconds, probe)
    ratios = [on / off for on, off in zip(rates[True], rates[False], strict=True)]
    extra = statistics.median(cpu[True]) - statistics.median(cpu[False])
    ratio = statistics.median(ratios)
    lags.sort()
    p50 = lags[len(lags) // 2] if lags else float("nan")
    p99 = lags[min(len(lags) - 1, int(len(lags) * 0.99))] if lags else float("nan")
    return [
        f"fleet: {AGENTS} agents x 1 record/Append, a reader indexing against a reader without an index",
        f"  records/s on {statistics.median(rates[True]):,.0f} / off {statistics.median(rates[False]):,.0f}"
        f" = {ratio:.2f} [{min(ratios):.2f}-{max(ratios):.2f}]"
        f"  target >= 0.9: {'MET' if ratio >= 0.9 else 'NOT MET'}",
        f"  reader CPU per 1,000 records appended: on {statistics.median(cpu[True]) * 1e3:.0f} ms /"
        f" off {statistics.median(cpu[False]) * 1e3:.0f} ms; the writer's"
        f" {statistics.median(WRITER_CPU) * 1e3:.0f} ms: on a CPU-bound host the indexing would cost"
        f" the fleet {extra / (extra + statistics.median(WRITER_CPU)):.1%}"
        f" (ratio {statistics.median(WRITER_CPU) / (extra + statistics.median(WRITER_CPU)):.2f})",
        f"  index lag under that load, {args.rounds} more runs with a probe (append acknowledged to"
        f" found by SearchSessions): p50 {p50 * 1e3:.0f} ms, p99 {p99 * 1e3:.0f} ms over {len(lags)} probes",
    ]


def indexing_child(seconds: float, rate: float) -> None:
    """In a process of its own (``--indexing-child``): index 64 files appended at ``rate``
    records/s for ``seconds``, then print the indexing thread's CPU seconds per 1,000 records."""
    data = Path(tempfile.mkdtemp(prefix="rollout-indexing-"))
    try:
        DataRoot(data).create()
        created = datetime.now(UTC)
        paths = []
        for _ in range(AGENTS):
            session_id = new_session_id()
            meta = {"session_id": session_id, "tenant": "T1", "created_at": format_timestamp(created)}
            path = DataRoot(data).session_path(session_id, build_file_name(created, session_id))
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(encode_line(0, format_timestamp(created), RecordType.SESSION_META, meta))
            paths.append(path)
        index = SearchIndex(DataRoot(data), data.parent / (data.name + "-index"))
        index.catch_up()
        index.start()
        assert index._thread is not None
        stat = Path(f"/proc/self/task/{index._thread.native_id}/stat")

        def cpu() -> float:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

        text = ("The agent read the file, ran the tests and wrote a short plan. " * 16)[:950]
        handles = [path.open("ab", buffering=0) for path in paths]
        seqs = [1] * AGENTS
        before, started, written = cpu(), time.monotonic(), 0
        while time.monotonic() - started < seconds:
            delay = started + written / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            agent = written % AGENTS
            payload = {"role": "user", "content": f"{text} w{written}"}
            stamp = format_timestamp(datetime.now(UTC))
            handles[agent].write(encode_line(seqs[agent], stamp, RecordType.MESSAGE, payload))
            seqs[agent] += 1
            written += 1
        for path in paths:  # caught up: every byte indexed
            assert index.wait_indexed(path.name, path.stat().st_size, 120), path
        print((cpu() - before) / written * 1000)
        for handle in handles:
            handle.close()
        index.close()
    finally:
        shutil.rmtree(data, ignore_errors=True)
        shutil.rmtree(data.parent / (data.name + "-index"), ignore_errors=True)


def bench_indexing(args: argparse.Namespace) -> list[str]:
    """This checkout's indexing CPU per 1,000 records against ``--baseline-repo``'s (see the module doc)."""
    repos = {"this": REPO} | ({"baseline": args.baseline_repo.resolve()} if args.baseline_repo else {})
    cpu: dict[str, list[float]] = {name: [] for name in repos}
    for number in range(args.rounds):
        for name in list(repos) if number % 2 == 0 else list(reversed(repos)):
            # The child runs this script against the checkout's code (PYTHONPATH): an older
            # checkout need not have this part.
            child = [sys.executable, str(Path(__file__).resolve()), "--indexing-child"]
            child += ["--seconds", str(args.seconds * 2), "--indexing-rate", str(args.indexing_rate)]
            env = {**os.environ, "PYTHONPATH": str(repos[name])}
            done = subprocess.run(child, cwd=repos[name], env=env, capture_output=True, text=True, check=True)
            cpu[name].append(float(done.stdout.split()[-1]))
        print(f"indexing round {number + 1}: " + "  ".join(f"{n} {cpu[n][-1] * 1e3:.1f} ms" for n in repos))
    this = statistics.median(cpu["this"])
    lines = [
        f"indexing: the indexing thread's CPU per 1,000 records, {AGENTS} files appended at"
        f" {args.indexing_rate:,.0f} records/s in all",
        f"  this checkout {this * 1e3:.1f} ms [{min(cpu['this']) * 1e3:.1f}-{max(cpu['this']) * 1e3:.1f}]",
    ]
    if "baseline" in cpu:
        base = statistics.median(cpu["baseline"])
        lines.append(
            f"  {args.baseline_repo}: {base * 1e3:.1f} ms"
            f" [{min(cpu['baseline']) * 1e3:.1f}-{max(cpu['baseline']) * 1e3:.1f}]; ratio {this / base:.2f}"
        )
    return lines


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--sessions", type=int, default=20_000, help="Sessions of the large corpus.")
    parser.add_argument("--session-kb", type=int, default=100, help="Size of each session (KB).")
    parser.add_argument("--query-rounds", type=int, default=21, help="Times each query is timed.")
    parser.add_argument("--rounds", type=int, default=3, help="Fleet rounds (each: on and off).")
    parser.add_argument("--seconds", type=float, default=4.0, help="Seconds of each fleet run.")
    parser.add_argument("--probe-ms", type=float, default=50.0, help="Pause between two lag probes (ms).")
    parser.add_argument("--only", default="scale,fleet", help="Parts to run: scale, fleet, indexing.")
    parser.add_argument("--baseline-repo", type=Path, help="indexing: another checkout to compare with.")
    parser.add_argument("--indexing-rate", type=float, default=1000.0, help="indexing: records/s in all.")
    parser.add_argument("--indexing-child", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.indexing_child:
        indexing_child(args.seconds, args.indexing_rate)
        return 0
    only = set(args.only.split(","))
    print("command:", shlex.join(sys.orig_argv))
    tmp = Path(tempfile.mkdtemp(prefix="rollout-search-bench-", dir=os.environ.get("TMPDIR")))
    report: list[str] = []
    try:
        if "scale" in only:
            report += bench_scale(tmp, args)
        if "fleet" in only:
            report += bench_fleet(tmp, args)
        if "indexing" in only:
            report += bench_indexing(args)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print()
    print("\n".join(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
