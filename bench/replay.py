"""GetReplay latency against a raw read + split + orjson parse of the same file, as ratios.

Synthesizes running sessions of about ``--messages`` rebuilt messages each (the
realistic record mix of bench/_support.py: ~1 KB user and assistant messages, tool
calls and ~1.5 KB outputs, reasoning, events, turn contexts), starts
``rollout serve-reader`` on them as a subprocess, and per round times, from the
client (a unary call over loopback with the generated stub, the reply parsed):

* raw: in this process, ``Path.read_bytes()`` of the session file, ``split(b"\\n")``
  and ``orjson.loads`` of every line (the median of 5);
* cold: the first GetReplay of a session the reader has never answered (every
  round a copy with its own session id and file, so nothing derived can help);
* unchanged: GetReplay of a session already replayed and not changed since
  (the median of 5);
* appended: one record line appended to that session's file (as the writer
  appends it), then GetReplay (5 times, the median).

Each of the last three is divided by the same round's raw time; the ratios are
reported as the median over ``--rounds`` with their spread (min-max), for every
size in ``--messages``. Targets: cold <= 2.5, unchanged <= 1.0, appended <= 1.5.

For information, the same figures in CPU time: the reader's (every thread's, from
/proc/<pid>/task/*/schedstat, around each call) against raw's thread CPU time. On a
machine that other work loads, wall times also count the waits for a core; the CPU
ratios show what the reader itself spends. Measuring starts once the reader's CPU
time has stayed flat for a second (its listing index has read every file).

    .venv/bin/python bench/replay.py [--messages 1000,10000] [--rounds 7] [--check]

Exit status: 0 whatever the figures; with ``--check``, 1 when a target fails;
2 when a call fails or answers something other than what was written.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import orjson
from _support import (
    MB,
    HelpFormatter,
    SessionInfo,
    messages_in_turn,
    proc_cpu_ns,
    settle,
    start_service,
    write_session,
)

from rollout.v1 import reader_pb2, reader_pb2_grpc
from shared.records import RecordType, encode_line, format_timestamp

TARGETS = {"cold": 2.5, "unchanged": 1.0, "appended": 1.5}
REPEATS = 5
CLIENT_OPTIONS = [("grpc.max_receive_message_length", 256 * 1024 * 1024)]
_BASE_TIME = datetime(2026, 11, 30, 9, 0, 0, tzinfo=UTC)


def raw_parse(path: Path) -> int:
    """The baseline: read the whole file, split it into lines, parse every complete line."""
    loads = orjson.loads
    lines = path.read_bytes().split(b"\n")
    lines.pop()
    for line in lines:
        loads(line)
    return len(lines)


def turns_for_messages(messages: int) -> int:
    """Turns whose rebuilt sequence holds at least ``messages`` messages."""
    turns = total = 0
    while total < messages:
        total += messages_in_turn(turns)
        turns += 1
    return turns


def timed_ms(function: Callable[[], object]) -> tuple[float, object]:
    started = time.perf_counter()
    result = function()
    return (time.perf_counter() - started) * 1000, result


def raw_times(path: Path) -> tuple[float, float]:
    """(wall ms, thread CPU ms) of one :func:`raw_parse` of ``path``."""
    cpu = time.thread_time()
    wall, _ = timed_ms(lambda: raw_parse(path))
    return wall, (time.thread_time() - cpu) * 1000


@dataclass
class Workload:
    """One size: the session replayed again and again, and one fresh copy per round."""

    main: SessionInfo
    copies: list[SessionInfo]
    next_seq: int
    expected_messages: int
    times: dict[str, list[float]] = field(default_factory=dict)

    def append_record(self, number: int) -> None:
        """One ~1 KB user message line at the end of the main session's file (the writer's shape)."""
        ts = format_timestamp(_BASE_TIME + timedelta(hours=1, seconds=number))
        payload = {"role": "user", "content": f"appended {number}: " + "x" * 1000}
        with self.main.path.open("ab") as handle:
            handle.write(encode_line(self.next_seq, ts, RecordType.MESSAGE, payload))
        self.next_seq += 1
        self.expected_messages += 1


def make_workload(sessions: Path, messages: int, rounds: int, index: int) -> Workload:
    turns = turns_for_messages(messages)
    created = _BASE_TIME + timedelta(minutes=index)
    infos = [
        write_session(sessions, turns=turns, created_at=created + timedelta(seconds=number), stop_kind="")
        for number in range(rounds + 1)
    ]
    main = infos[0]
    return Workload(main, infos[1:], main.records, main.messages)


@dataclass
class Replayer:
    """GetReplay calls timed from the client, with the reader's CPU time around each."""

    stub: reader_pb2_grpc.RolloutReaderStub
    reader_pid: int

    def replay(self, session_id: str, expected: int) -> tuple[float, float]:
        """(wall ms, reader CPU ms) of one GetReplay (reply parsed); RuntimeError when it returns
        the wrong count."""
        request = reader_pb2.ReplayRequest(session_id=session_id)
        cpu = proc_cpu_ns(self.reader_pid)
        elapsed, response = timed_ms(lambda: self.stub.GetReplay(request, timeout=120))
        cpu = proc_cpu_ns(self.reader_pid) - cpu
        assert isinstance(response, reader_pb2.ReplayResponse)
        if len(response.messages) != expected:
            raise RuntimeError(
                f"GetReplay of {session_id} returned {len(response.messages)} messages, not {expected}"
            )
        return elapsed, cpu / 1e6


def medians(pairs: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(wall for wall, _ in pairs), statistics.median(cpu for _, cpu in pairs)


def measure_round(replayer: Replayer, workload: Workload, number: int) -> dict[str, tuple[float, float]]:
    """One round's (wall ms, CPU ms) medians of raw, cold, unchanged and appended."""
    main = workload.main
    raw = medians([raw_times(main.path) for _ in range(REPEATS)])
    copy = workload.copies[number]
    cold = replayer.replay(copy.session_id, copy.messages)
    unchanged = medians(
        [replayer.replay(main.session_id, workload.expected_messages) for _ in range(REPEATS)]
    )
    appended = []
    for repeat in range(REPEATS):
        workload.append_record(number * REPEATS + repeat)
        appended.append(replayer.replay(main.session_id, workload.expected_messages))
    return {"raw": raw, "cold": cold, "unchanged": unchanged, "appended": medians(appended)}


def figure_line(name: str, values: list[float], raws: list[float]) -> tuple[str, float | None]:
    """One printed line: the median and spread of ``values`` (ms) and, but for raw, of their
    ratios to the same rounds' ``raws``; returns it with the median ratio (None for raw)."""
    line = f"  {name:10s} {statistics.median(values):16.2f}  ({min(values):.2f}-{max(values):.2f})"
    if name == "raw":
        return line, None
    ratios = [value / raw for value, raw in zip(values, raws, strict=True)]
    ratio = statistics.median(ratios)
    return line + f"  {ratio:20.2f}  ({min(ratios):.2f}-{max(ratios):.2f})", ratio


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument(
        "--messages", default="1000,10000", help="comma-separated session sizes, in rebuilt messages"
    )
    parser.add_argument("--rounds", type=int, default=7, help="rounds per size (one cold copy each)")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target fails")
    args = parser.parse_args(argv)
    try:
        args.sizes = [int(part) for part in args.messages.split(",")]
    except ValueError:
        parser.error("--messages must be comma-separated integers")
    if args.rounds < 1 or min(args.sizes) < 1:
        parser.error("--rounds and every size must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print("command:", shlex.join(sys.orig_argv))
    all_hold = True
    with tempfile.TemporaryDirectory(prefix="rollout-bench-replay-", dir="/tmp") as tmp_name:
        tmp = Path(tmp_name)
        sessions = tmp / "data" / "sessions"
        sessions.mkdir(parents=True)
        workloads = [
            make_workload(sessions, size, args.rounds, index) for index, size in enumerate(args.sizes)
        ]
        reader = start_service("reader", sessions.parent, tmp / "reader.stderr")
        try:
            with grpc.insecure_channel(reader.address, options=CLIENT_OPTIONS) as channel:
                stub = reader_pb2_grpc.RolloutReaderStub(channel)  # type: ignore[no-untyped-call]
                replayer = Replayer(stub, reader.process.pid)
                settle(reader)  # the listing index reads every file once after start
                for workload in workloads:  # warm-up: the first call of a reader scans the folder
                    replayer.replay(workload.main.session_id, workload.expected_messages)
                results: list[list[dict[str, tuple[float, float]]]] = [[] for _ in workloads]
                for number in range(args.rounds):
                    for workload, rounds in zip(workloads, results, strict=True):
                        rounds.append(measure_round(replayer, workload, number))
        except (grpc.RpcError, RuntimeError) as exc:
            detail = f"{exc.code().name}: {exc.details()}" if isinstance(exc, grpc.RpcError) else str(exc)
            print(f"benchmark failed: {detail}")
            return 2
        finally:
            reader.stop()
    for workload, rounds in zip(workloads, results, strict=True):
        info = workload.main
        print(
            f"\nsession of {info.messages:,} messages ({info.bytes / MB:.2f} MB, {info.records:,} records);"
            f" {args.rounds} rounds"
        )
        print("                       ms: median  (min-max)      ratio to raw: median  (min-max)   target")
        for name in ("raw", "cold", "unchanged", "appended"):
            line, ratio = figure_line(
                name, [one[name][0] for one in rounds], [one["raw"][0] for one in rounds]
            )
            if ratio is not None:
                holds = ratio <= TARGETS[name]
                all_hold = all_hold and holds
                line += f"   <= {TARGETS[name]}: {'MET' if holds else 'NOT MET'}"
            print(line)
        print("  CPU time (raw: its thread; the others: the reader's threads), for information:")
        for name in ("raw", "cold", "unchanged", "appended"):
            line, _ = figure_line(name, [one[name][1] for one in rounds], [one["raw"][1] for one in rounds])
            print(line)
    return 1 if args.check and not all_hold else 0


if __name__ == "__main__":
    sys.exit(main())
