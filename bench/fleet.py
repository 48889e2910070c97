"""Many agents at once: the writer against a no-op gRPC server and raw disk baselines, as ratios.

Every figure is measured in one run, side by side with its baseline, and printed
as a ratio (the machine is shared: absolute figures drift between runs, ratios
much less). Subprocesses: the real writer (``rollout serve-writer``) and a no-op
server answering ``RolloutWriter/Append`` with the project's own stubs and an
empty ``AppendResponse`` (grpc.aio, the writer's server kind): the ceiling of
what any writer could answer from the same client threads.

Workloads (each ~1 KB user message record):

* ``fleet``: 64 client threads, one session each, one record per Append, for
  ``--seconds``; records/s, writer / no-op. Target >= 0.6.
* ``single``: one thread, one record per Append, idle writer; ack p50 against
  no-op unary p50 + raw ``write`` + ``fdatasync`` p50 of one line on the data
  root's file system. Target <= 1.5.
* ``stream``: 4 client threads, each one AppendStream whose 32-record requests
  go round-robin over 16 sessions (64 sessions in all); records/s against the
  ``syncfs`` physical limit measured in the same run: 64 files each getting one
  1 KB line per round, one ``syncfs()`` per round. Target >= 0.5. (For context
  the same rounds made durable by one ``fdatasync`` per file are printed too.)
* ``round-robin``: 8 threads append one record each to sessions taken in turn,
  over 1,000 open sessions of ~200 KB against 100 of them (files written before
  the writer starts, then one warm-up append to each, untimed: the steady state,
  not a first open); appends/s 1000 / 100. Target >= 0.8.
* ``unknown``: one agent's sequential Append p50 while 4 threads send Appends to
  unknown (valid, absent) session ids, against its p50 alone, on a data root of
  ``--startup-files`` sessions. Target <= 2. The writer's start-up time over
  that root (spawn to listening) is printed with it.

Usage:

    .venv/bin/python bench/fleet.py [--rounds 3] [--seconds 4] [--only fleet,single,...]
                                    [--writer-repo PATH] [--startup-files 20000]

``--writer-repo`` runs the writer from another checkout (to measure code before a
change with the same bench). Each figure is the median over ``--rounds`` rounds,
with the spread (min-max) beside it. Exit status: 0 whatever the figures; with
``--check``, 1 when a target is not met.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
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
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
from _support import HelpFormatter, proc_cpu_seconds, turn_records

from rollout.v1 import records_pb2, writer_pb2, writer_pb2_grpc
from shared.naming import build_file_name, new_session_id
from shared.records import RecordType, encode_line, format_timestamp
from tests.processes import ServiceProcess

REPO = Path(__file__).resolve().parent.parent
TEXT = ("The agent read the file, ran the tests and wrote a short plan for the next step. " * 14)[:950]
AGENTS = 64


@dataclass
class Figure:
    """One measured pair over rounds: the subject and its baseline, and how the ratio is read."""

    name: str
    unit: str
    target: float
    higher_is_better: bool
    subject: list[float] = field(default_factory=list)
    baseline: list[float] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, subject: float, baseline: float) -> None:
        self.subject.append(subject)
        self.baseline.append(baseline)
        self.ratios.append(subject / baseline if baseline else float("inf"))

    @property
    def holds(self) -> bool:
        ratio = statistics.median(self.ratios)
        return ratio >= self.target if self.higher_is_better else ratio <= self.target


def _spread(values: list[float], fmt: str) -> str:
    if len(values) == 1:
        return format(values[0], fmt)
    return f"{format(statistics.median(values), fmt)} [{format(min(values), fmt)}-{format(max(values), fmt)}]"


# -- the no-op server -----------------------------------------------------------------------


class _NoOpWriter(writer_pb2_grpc.RolloutWriterServicer):
    """Creates sessions in a set and answers Append from it: OK for a created id (an empty
    answer), NOT_FOUND for any other (the cheapest refusal grpc.aio allows: a status set, no
    exception)."""

    def __init__(self) -> None:
        self.known: set[str] = set()

    async def CreateSession(self, request, context):
        session_id = str(uuid.uuid4())
        self.known.add(session_id)
        return writer_pb2.CreateSessionResponse(session_id=session_id, next_seq=1)

    async def Append(self, request, context):
        if request.session_id not in self.known:
            context.set_code(grpc.StatusCode.NOT_FOUND)
            context.set_details(f"session {request.session_id!r} not found")
            return writer_pb2.AppendResponse()
        return writer_pb2.AppendResponse(session_id=request.session_id, seqs=[1], next_seq=2)


async def _serve_noop() -> None:
    server = grpc.aio.server()
    writer_pb2_grpc.add_RolloutWriterServicer_to_server(_NoOpWriter(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(f"no-op listening on 127.0.0.1:{port}", flush=True)
    await server.wait_for_termination()


def start_process(argv: list[str], log_path: Path, cwd: Path, env: dict[str, str]) -> ServiceProcess:
    """Start a server process and wait for its "listening on HOST:PORT" line."""
    with log_path.open("a") as log:
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, text=True, cwd=cwd, env=env)
    assert process.stdout is not None
    line = process.stdout.readline()
    if "listening on" not in line:
        process.kill()
        raise RuntimeError(f"{argv[-1]} did not start: {line!r}\n{log_path.read_text(errors='replace')}")
    return ServiceProcess(process, line.rsplit(" ", 1)[1].strip(), log_path)


class Servers:
    """Starts the writer (from ``--writer-repo``) and the no-op server."""

    def __init__(self, tmp: Path, writer_repo: Path) -> None:
        self.tmp = tmp
        self.writer_repo = writer_repo
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(writer_repo)}

    def writer(self, data_dir: Path, *extra: str) -> tuple[ServiceProcess, float]:
        """A writer on ``data_dir``; returns it and its start-up seconds (spawn to listening)."""
        argv = [sys.executable, "-m", "rollout_cli.main", "serve-writer", "--data-dir", str(data_dir)]
        started = time.perf_counter()
        service = start_process(
            [*argv, "--address", "127.0.0.1:0", *extra], self.tmp / "writer.log", self.writer_repo, self.env
        )
        return service, time.perf_counter() - started

    def noop(self) -> ServiceProcess:
        argv = [sys.executable, str(Path(__file__).resolve()), "--noop-server"]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        return start_process(argv, self.tmp / "noop.log", REPO, env)


# -- client helpers -------------------------------------------------------------------------


def _record() -> writer_pb2.AppendRecord:
    return writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="user", text=TEXT))


def _stub(channel: grpc.Channel) -> writer_pb2_grpc.RolloutWriterStub:
    return writer_pb2_grpc.RolloutWriterStub(channel)  # type: ignore[no-untyped-call]


def create_sessions(channel: grpc.Channel, count: int) -> list[str]:
    stub = _stub(channel)
    return [
        stub.CreateSession(
            writer_pb2.CreateSessionRequest(agent_name="fleet", role=writer_pb2.SESSION_ROLE_ROOT)
        ).session_id
        for _ in range(count)
    ]


def run_threads(count: int, seconds: float, work: Callable[[int, threading.Event], int]) -> float:
    """``count`` threads run ``work(index, stop)`` (returning units done) for ``seconds``; units/s."""
    stop = threading.Event()
    done = [0] * count
    start_gate = threading.Barrier(count + 1)

    def body(index: int) -> None:
        start_gate.wait()
        done[index] = work(index, stop)

    threads = [threading.Thread(target=body, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    start_gate.wait()
    started = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join()
    return sum(done) / (time.perf_counter() - started)


def fleet_rate(address: str, seconds: float) -> float:
    """64 agents, one session each, one record per Append: records/s."""
    with grpc.insecure_channel(address) as channel:
        stub = _stub(channel)
        sessions = create_sessions(channel, AGENTS)

        def work(index: int, stop: threading.Event) -> int:
            request = writer_pb2.AppendRequest(session_id=sessions[index], records=[_record()])
            count = 0
            while not stop.is_set():
                stub.Append(request)
                count += 1
            return count

        return run_threads(AGENTS, seconds, work)


def sequential_p50(stub: writer_pb2_grpc.RolloutWriterStub, session_id: str, calls: int) -> float:
    """Median seconds of ``calls`` sequential single-record Appends."""
    request = writer_pb2.AppendRequest(session_id=session_id, records=[_record()])
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        stub.Append(request)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def raw_fdatasync_p50(folder: Path, calls: int) -> float:
    """Median seconds of ``write`` + ``fdatasync`` of one ~1 KB line on ``folder``'s file system."""
    path = folder / f"raw-{os.urandom(4).hex()}.jsonl"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    line = encode_line(1, format_timestamp(datetime.now(UTC)), "message", {"role": "user", "content": TEXT})
    times = []
    try:
        for _ in range(calls):
            started = time.perf_counter()
            os.write(fd, line)
            os.fdatasync(fd)
            times.append(time.perf_counter() - started)
    finally:
        os.close(fd)
        path.unlink()
    return statistics.median(times)


def raw_rounds(folder: Path, files: int, seconds: float, sync: str) -> float:
    """Records/s of rounds writing one ~1 KB line to each of ``files`` files, each round made durable
    by one ``syncfs`` (sync="syncfs"), one ``fdatasync`` per file in turn (sync="fdatasync"), or
    one ``fdatasync`` per file issued by N threads at once (sync="parallel-N")."""
    paths = [folder / f"raw-{n}-{os.urandom(4).hex()}.jsonl" for n in range(files)]
    fds = [os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644) for path in paths]
    line = encode_line(1, format_timestamp(datetime.now(UTC)), "message", {"role": "user", "content": TEXT})
    threads = int(sync.partition("-")[2]) if sync.startswith("parallel-") else 0
    pool = ThreadPoolExecutor(threads) if threads else None
    rounds = 0
    try:
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            for fd in fds:
                os.write(fd, line)
            if sync == "syncfs":
                _syncfs(fds[0])
            elif pool is not None:
                for _ in pool.map(os.fdatasync, fds):
                    pass
            else:
                for fd in fds:
                    os.fdatasync(fd)
            rounds += 1
        elapsed = time.perf_counter() - started
    finally:
        if pool is not None:
            pool.shutdown()
        for fd in fds:
            os.close(fd)
        for path in paths:
            path.unlink()
    return rounds * files / elapsed


_LIBC = ctypes.CDLL(None, use_errno=True)


def _syncfs(fd: int) -> None:
    if _LIBC.syncfs(fd) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))


def stream_rate(address: str, seconds: float) -> float:
    """4 AppendStreams of 32-record requests, each round-robin over its own 16 sessions: records/s."""
    streams, per_stream, batch = 4, AGENTS // 4, 32
    with grpc.insecure_channel(address) as channel:
        stub = _stub(channel)
        sessions = create_sessions(channel, AGENTS)

        def work(index: int, stop: threading.Event) -> int:
            mine = sessions[index * per_stream : (index + 1) * per_stream]
            requests = [
                writer_pb2.AppendRequest(session_id=sid, records=[_record() for _ in range(batch)])
                for sid in mine
            ]

            def feed() -> Iterator[writer_pb2.AppendRequest]:
                turn = 0
                while not stop.is_set():
                    yield requests[turn % per_stream]
                    turn += 1

            return sum(batch for _ in stub.AppendStream(feed()))

        return run_threads(streams, seconds, work)


# -- pre-written data roots ----------------------------------------------------------------


def write_open_sessions(data_dir: Path, count: int, target_bytes: int) -> list[str]:
    """``count`` open sessions of about ``target_bytes`` each (a realistic record mix), written
    directly in the on-disk format; returns their ids."""
    sessions = data_dir / "sessions"
    sessions.mkdir(parents=True, exist_ok=True)
    created = datetime(2026, 11, 30, 10, 0, 0, tzinfo=UTC)
    ts = format_timestamp(created)
    body: list[bytes] = []
    size, turn, seq = 0, 0, 1
    while size < target_bytes:
        records, _ = turn_records(turn)
        for record_type, payload in records:
            line = encode_line(seq, ts, record_type, payload)
            body.append(line)
            size += len(line)
            seq += 1
        turn += 1
    ids = []
    for number in range(count):
        session_id = new_session_id()
        moment = created + timedelta(seconds=number)
        meta = {"session_id": session_id, "tenant": "fleet", "created_at": format_timestamp(moment)}
        head = encode_line(0, ts, RecordType.SESSION_META, meta)
        (sessions / build_file_name(moment, session_id)).write_bytes(head + b"".join(body))
        ids.append(session_id)
    return ids


def round_robin_rate(address: str, ids: list[str], seconds: float) -> float:
    """8 threads each append one record to the next session in turn: appends/s."""
    counter = iter(range(10**12))
    lock = threading.Lock()
    with grpc.insecure_channel(address) as channel:
        stub = _stub(channel)

        def work(_index: int, stop: threading.Event) -> int:
            count = 0
            while not stop.is_set():
                with lock:
                    turn = next(counter)
                request = writer_pb2.AppendRequest(session_id=ids[turn % len(ids)], records=[_record()])
                stub.Append(request)
                count += 1
            return count

        return run_threads(8, seconds, work)


def unknown_id_noise(address: str, threads: int, stop: threading.Event) -> float:
    """``threads`` threads send single-record Appends to unknown (valid, never created) ids until
    ``stop`` is set; returns their rate (calls/s, each answered NOT_FOUND)."""
    done = [0] * threads

    def noise(index: int) -> None:
        with grpc.insecure_channel(address) as channel:
            stub = _stub(channel)
            while not stop.is_set():
                try:
                    stub.Append(writer_pb2.AppendRequest(session_id=new_session_id(), records=[_record()]))
                except grpc.RpcError as exc:
                    if exc.code() != grpc.StatusCode.NOT_FOUND:
                        raise
                done[index] += 1

    workers = [threading.Thread(target=noise, args=(index,)) for index in range(threads)]
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return sum(done) / (time.perf_counter() - started)


def _noise_client(address: str, threads: int) -> None:
    """The ``--unknown-noise`` process: noise until stdin closes, then print its rate (calls/s)."""
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    print("ready", flush=True)
    print(unknown_id_noise(address, threads, stop), flush=True)


@dataclass
class NoisyP50:
    """The agent's p50 under unknown-id noise, the noise's rate, and the server's CPU per call."""

    p50: float  # seconds
    noise_rate: float  # unknown-id calls/s
    cpu_per_call: float  # server CPU seconds per call (the agent's and the noise's together)


def unknown_id_p50(
    address: str, server_pid: int, session_id: str, calls: int, noise_threads: int, in_process: bool
) -> NoisyP50:
    """The agent's sequential Append p50 while ``noise_threads`` threads append to unknown ids.

    ``in_process``: the noise threads run in this (the agent's) process, sharing its GIL;
    otherwise in a client process of their own, as another agent runtime would.
    """
    stop = threading.Event()
    rates: list[float] = []
    runner, noise_process = None, None
    if in_process:
        runner = threading.Thread(target=lambda: rates.append(unknown_id_noise(address, noise_threads, stop)))
        runner.start()
    else:
        argv = [sys.executable, str(Path(__file__).resolve()), "--unknown-noise", address]
        argv += ["--noise-threads", str(noise_threads)]
        noise_process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO
        )
        assert noise_process.stdout is not None
        if noise_process.stdout.readline().strip() != "ready":
            raise RuntimeError("the unknown-id noise client did not start")
    try:
        time.sleep(0.3)
        cpu_before, started = proc_cpu_seconds(server_pid), time.perf_counter()
        with grpc.insecure_channel(address) as channel:
            p50 = sequential_p50(_stub(channel), session_id, calls)
        cpu, elapsed = proc_cpu_seconds(server_pid) - cpu_before, time.perf_counter() - started
    finally:
        stop.set()
        if noise_process is not None:
            assert noise_process.stdin is not None
            assert noise_process.stdout is not None
            noise_process.stdin.close()
            rates.append(float(noise_process.stdout.readline()))
            noise_process.wait()
        elif runner is not None:
            runner.join()
    return NoisyP50(p50, rates[0], cpu / (rates[0] * elapsed + calls))


def write_small_sessions(data_dir: Path, count: int) -> None:
    """``count`` one-turn open sessions (~10 KB each), for start-up and unknown-id figures."""
    write_open_sessions(data_dir, count, 8_000)


# -- main -------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="measurements per figure (medians reported)")
    parser.add_argument("--seconds", type=float, default=4.0, help="length of each throughput measurement")
    parser.add_argument("--calls", type=int, default=300, help="sequential calls per latency measurement")
    parser.add_argument(
        "--only", default="fleet,single,stream,round-robin,unknown", help="comma-separated workloads to run"
    )
    parser.add_argument("--writer-repo", type=Path, default=REPO, help="checkout the writer runs from")
    parser.add_argument(
        "--startup-files", type=int, default=20_000, help="sessions in the unknown-id data root"
    )
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is not met")
    parser.add_argument("--noop-server", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--unknown-noise", metavar="ADDRESS", help=argparse.SUPPRESS)
    parser.add_argument("--noise-threads", type=int, default=4, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.noop_server:
        asyncio.run(_serve_noop())
        return 0
    if args.unknown_noise:
        return _noise_main(args.unknown_noise, args.noise_threads)
    only = set(args.only.split(","))
    print("command:", shlex.join(sys.orig_argv))
    print(f"writer code: {args.writer_repo.resolve()}")
    tmp = Path(tempfile.mkdtemp(prefix="rollout-fleet-", dir=os.environ.get("TMPDIR")))
    servers = Servers(tmp, args.writer_repo.resolve())
    figures: list[Figure] = []
    try:
        noop = servers.noop()
        try:
            if "fleet" in only:
                figures.append(bench_fleet(servers, noop, tmp, args))
            if "single" in only:
                figures.append(bench_single(servers, noop, tmp, args))
            if "stream" in only:
                figures.append(bench_stream(servers, tmp, args))
            if "round-robin" in only:
                figures.append(bench_round_robin(servers, tmp, args))
            if "unknown" in only:
                figures.extend(bench_unknown(servers, noop, tmp, args))
        finally:
            noop.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print()
    print(f"{'workload':<34} {'subject':>26} {'baseline':>26} {'ratio':>22}  target")
    failed = False
    for figure in figures:
        sign = ">=" if figure.higher_is_better else "<="
        verdict = "MET" if figure.holds else "NOT MET"
        failed |= not figure.holds
        print(
            f"{figure.name:<34} {_spread(figure.subject, ',.1f'):>26} {_spread(figure.baseline, ',.1f'):>26}"
            f" {_spread(figure.ratios, '.2f'):>22}  {sign} {figure.target} {verdict} ({figure.unit})"
        )
        for note in figure.notes:
            print(f"    {note}")
    print("(medians over rounds, [min-max] spread)")
    return 1 if args.check and failed else 0


def bench_fleet(servers: Servers, noop: ServiceProcess, tmp: Path, args: argparse.Namespace) -> Figure:
    figure = Figure("fleet: 64 agents x 1 record/Append", "records/s writer vs no-op", 0.6, True)
    writer, _ = servers.writer(tmp / "data-fleet")
    try:
        for number in range(args.rounds):
            order = ["noop", "writer"] if number % 2 == 0 else ["writer", "noop"]
            rates = {}
            for name in order:
                address = noop.address if name == "noop" else writer.address
                rates[name] = fleet_rate(address, args.seconds)
            figure.add(rates["writer"], rates["noop"])
            print(
                f"fleet round {number + 1}: writer {rates['writer']:,.0f}  no-op {rates['noop']:,.0f} records/s"
            )
    finally:
        writer.stop()
    return figure


def bench_single(servers: Servers, noop: ServiceProcess, tmp: Path, args: argparse.Namespace) -> Figure:
    figure = Figure("single: one agent, ack p50", "ms writer vs no-op + raw fdatasync", 1.5, False)
    data_dir = tmp / "data-single"
    writer, _ = servers.writer(data_dir)
    try:
        with grpc.insecure_channel(writer.address) as channel, grpc.insecure_channel(noop.address) as other:
            stub, noop_stub = _stub(channel), _stub(other)
            session_id = create_sessions(channel, 1)[0]
            noop_session = create_sessions(other, 1)[0]
            sequential_p50(stub, session_id, 20)
            sequential_p50(noop_stub, noop_session, 20)
            for number in range(args.rounds):
                writer_p50 = sequential_p50(stub, session_id, args.calls)
                noop_p50 = sequential_p50(noop_stub, noop_session, args.calls)
                raw_p50 = raw_fdatasync_p50(data_dir, args.calls)
                figure.add(writer_p50 * 1000, (noop_p50 + raw_p50) * 1000)
                print(
                    f"single round {number + 1}: writer p50 {writer_p50 * 1000:.2f} ms  no-op p50"
                    f" {noop_p50 * 1000:.2f} ms  raw write+fdatasync p50 {raw_p50 * 1000:.2f} ms"
                )
    finally:
        writer.stop()
    return figure


#: How the raw rounds of the stream figure are made durable, beside the syncfs baseline.
RAW_SYNCS = ("fdatasync", "parallel-4", "parallel-64")


def bench_stream(servers: Servers, tmp: Path, args: argparse.Namespace) -> Figure:
    figure = Figure(
        "stream: 32-record batches, 64 sessions", "records/s writer vs raw syncfs rounds", 0.5, True
    )
    data_dir = tmp / "data-stream"
    writer, _ = servers.writer(data_dir)
    others: dict[str, list[float]] = {sync: [] for sync in RAW_SYNCS}
    try:
        for number in range(args.rounds):
            rate = stream_rate(writer.address, args.seconds)
            syncfs_rate = raw_rounds(data_dir, AGENTS, min(args.seconds, 2.0), "syncfs")
            for sync in RAW_SYNCS:
                others[sync].append(raw_rounds(data_dir, AGENTS, min(args.seconds, 2.0), sync))
            figure.add(rate, syncfs_rate)
            print(
                f"stream round {number + 1}: writer {rate:,.0f} records/s  raw 64 files x 1 line: syncfs"
                f" {syncfs_rate:,.0f}, "
                + ", ".join(f"{sync} {others[sync][-1]:,.0f}" for sync in RAW_SYNCS)
                + " records/s"
            )
    finally:
        writer.stop()
    names = {
        "fdatasync": "one fdatasync per file in turn",
        "parallel-4": "one fdatasync per file, 4 threads at once",
        "parallel-64": "one fdatasync per file, 64 threads at once",
    }
    for sync in RAW_SYNCS:
        ratios = [value / base for value, base in zip(others[sync], figure.baseline, strict=True)]
        figure.notes.append(
            f"raw rounds, {names[sync]}: {_spread(others[sync], ',.0f')} records/s"
            f" ({_spread(ratios, '.2f')} x syncfs)"
        )
    return figure


def bench_round_robin(servers: Servers, tmp: Path, args: argparse.Namespace) -> Figure:
    figure = Figure("round-robin: 1,000 vs 100 sessions", "appends/s 1000 vs 100 sessions", 0.8, True)
    data_dir = tmp / "data-round-robin"
    started = time.perf_counter()
    ids = write_open_sessions(data_dir, 1000, 200_000)
    print(f"round-robin: wrote 1,000 sessions of ~200 KB in {time.perf_counter() - started:.1f} s")
    writer, startup = servers.writer(data_dir)
    figure.notes.append(f"writer start-up over 1,000 x 200 KB sessions: {startup:.2f} s")
    try:
        started = time.perf_counter()
        with grpc.insecure_channel(writer.address) as channel:  # warm-up: one append to each session
            stub = _stub(channel)
            for session_id in ids:
                stub.Append(writer_pb2.AppendRequest(session_id=session_id, records=[_record()]))
        figure.notes.append(
            f"warm-up pass, one append to each of the 1,000 sessions: {time.perf_counter() - started:.2f} s"
        )
        for number in range(args.rounds):
            many = round_robin_rate(writer.address, ids, args.seconds)
            few = round_robin_rate(writer.address, ids[:100], args.seconds)
            figure.add(many, few)
            print(
                f"round-robin round {number + 1}: 1,000 sessions {many:,.0f}  100 sessions {few:,.0f} appends/s"
            )
    finally:
        writer.stop()
    return figure


def bench_unknown(
    servers: Servers, noop: ServiceProcess, tmp: Path, args: argparse.Namespace
) -> list[Figure]:
    """The agent's p50 under 4 threads of unknown-id Appends, against its p50 alone.

    The noise runs in a client process of its own (``noise: process``, the figure the target
    is read on: the agent and the noisy client are two runtimes) and, for comparison, as
    threads of the agent's own process (``noise: threads``, where the agent's client-side
    Python also waits for the GIL the noise holds). The same noise against the no-op server
    (which refuses an unknown id by setting NOT_FOUND, nothing else) gives the floor of any
    grpc.aio writer on this machine at this moment.
    """
    unit = "ms p50 with 4 unknown-id threads vs alone"
    by_process = Figure(f"unknown ids, noise: process ({args.startup_files:,} files)", unit, 2.0, False)
    by_threads = Figure("unknown ids, noise: threads", unit, 2.0, False)
    floor = Figure("unknown ids, no-op server (floor)", unit, 2.0, False)
    data_dir = tmp / "data-unknown"
    started = time.perf_counter()
    write_small_sessions(data_dir, args.startup_files)
    print(f"unknown: wrote {args.startup_files:,} sessions in {time.perf_counter() - started:.1f} s")
    startups = []
    for _ in range(args.rounds):
        writer, startup = servers.writer(data_dir)
        startups.append(startup)
        writer.stop()
    by_process.notes.append(
        f"writer start-up (spawn to listening) over {args.startup_files:,} sessions: {_spread(startups, '.2f')} s"
    )
    writer_cpu: list[float] = []
    noop_cpu: list[float] = []
    writer, _ = servers.writer(data_dir)
    try:
        with grpc.insecure_channel(writer.address) as channel, grpc.insecure_channel(noop.address) as other:
            session_id = create_sessions(channel, 1)[0]
            noop_session = create_sessions(other, 1)[0]
            sequential_p50(_stub(channel), session_id, 20)
            sequential_p50(_stub(other), noop_session, 20)
            for number in range(args.rounds):
                pid = writer.process.pid
                alone = sequential_p50(_stub(channel), session_id, args.calls)
                noisy = unknown_id_p50(writer.address, pid, session_id, args.calls, 4, in_process=False)
                threads = unknown_id_p50(writer.address, pid, session_id, args.calls, 4, in_process=True)
                noop_alone = sequential_p50(_stub(other), noop_session, args.calls)
                noop_noisy = unknown_id_p50(
                    noop.address, noop.process.pid, noop_session, args.calls, 4, in_process=False
                )
                by_process.add(noisy.p50 * 1000, alone * 1000)
                by_threads.add(threads.p50 * 1000, alone * 1000)
                floor.add(noop_noisy.p50 * 1000, noop_alone * 1000)
                writer_cpu.append(noisy.cpu_per_call * 1e6)
                noop_cpu.append(noop_noisy.cpu_per_call * 1e6)
                print(
                    f"unknown round {number + 1}: writer p50 alone {alone * 1000:.2f} ms, noise process"
                    f" {noisy.p50 * 1000:.2f} ms ({noisy.noise_rate:,.0f} refusals/s, writer CPU"
                    f" {noisy.cpu_per_call * 1e6:.0f} us/call), noise threads {threads.p50 * 1000:.2f} ms;"
                    f" no-op alone {noop_alone * 1000:.2f} ms, noise process {noop_noisy.p50 * 1000:.2f} ms"
                    f" ({noop_noisy.noise_rate:,.0f} refusals/s, CPU {noop_noisy.cpu_per_call * 1e6:.0f} us/call)"
                )
    finally:
        writer.stop()
    by_process.notes.append(
        f"server CPU per call under the noise: writer {_spread(writer_cpu, '.0f')} us,"
        f" no-op {_spread(noop_cpu, '.0f')} us"
    )
    unpaced = Figure("unknown ids, noise: process, pacing off", unit, 2.0, False)
    writer, _ = servers.writer(data_dir, "--unknown-id-rate", "0")
    try:
        with grpc.insecure_channel(writer.address) as channel:
            session_id = create_sessions(channel, 1)[0]
            sequential_p50(_stub(channel), session_id, 20)
            for number in range(args.rounds):
                alone = sequential_p50(_stub(channel), session_id, args.calls)
                noisy = unknown_id_p50(
                    writer.address, writer.process.pid, session_id, args.calls, 4, in_process=False
                )
                unpaced.add(noisy.p50 * 1000, alone * 1000)
                print(
                    f"unknown round {number + 1}, pacing off: writer p50 alone {alone * 1000:.2f} ms, noise"
                    f" process {noisy.p50 * 1000:.2f} ms ({noisy.noise_rate:,.0f} refusals/s)"
                )
    finally:
        writer.stop()
    return [by_process, by_threads, unpaced, floor]


def _noise_main(address: str, threads: int) -> int:
    _noise_client(address, threads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
