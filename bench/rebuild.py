"""Rebuild speed: shared.rebuild.rebuild against a raw split + orjson.loads baseline.

Synthesizes one session of ``--size-mb`` MB of realistic records (see
bench/_support.py: user/assistant messages of ~1 KB, tool calls and outputs,
reasoning before assistant messages, events and turn contexts, ending with a
checkpoint and a stop record), reads it into memory once, then per round times

* raw: ``data.split(b"\\n")`` and ``orjson.loads`` of every line, nothing else;
* rebuild: ``shared.rebuild.rebuild(data)`` as the services call it: under
  ``shared.rebuild.collector_paused()``, held until the result is released (the
  release is timed too, as raw's is);

alternating which goes first. Prints both rates in MB/s (medians over
``--rounds``) and the median ratio rebuild/raw; the target is rebuild/raw >= 0.7.
For information it also times

* bare rebuild: ``rebuild(data)`` alone, its result released after the clock
  stops; the collector, back on, walks the whole result at the first allocation
  after the call, inside the timing (what the pause spares the services);
* keep: raw, also keeping every message payload, under the same pause;
* ``shared.rebuild_index.index_rebuild(path)``: the bounded-memory rebuild of
  StreamReplay, reading the file in chunks (the file is in the page cache).

    .venv/bin/python bench/rebuild.py [--size-mb 100] [--rounds 5] [--check]

Exit status: 0 whatever the figures; with ``--check``, 1 when the ratio is below
the target; 2 when a rebuild does not find the messages that were written.
"""

from __future__ import annotations

import argparse
import gc
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import orjson
from _support import MB, REPO, HelpFormatter, SessionInfo, write_session

from shared.digest import digest
from shared.rebuild import collector_paused, rebuild
from shared.rebuild_index import index_rebuild

TARGET_RATIO = 0.7


def raw_parse(data: bytes) -> int:
    """The baseline: split on newlines and parse every complete line; returns the line count."""
    loads = orjson.loads
    lines = data.split(b"\n")
    lines.pop()
    for line in lines:
        loads(line)
    return len(lines)


def rebuild_as_served(data: bytes) -> int:
    """Rebuild and release under one collector pause, as every service caller does; returns the message count."""
    with collector_paused():
        found = rebuild(data)
        count = len(found.messages)
        del found
    return count


def keep_messages(data: bytes) -> int:
    """Information only: the baseline, also keeping every message payload (what a rebuild returns)."""
    with collector_paused():
        loads = orjson.loads
        lines = data.split(b"\n")
        lines.pop()
        kept = []
        for line in lines:
            record = loads(line)
            if record["type"] == "message":
                kept.append(record["payload"])
        count = len(kept)
        del kept
    return count


@dataclass(frozen=True)
class Timing:
    cpu: float
    wall: float

    def seconds(self, clock: str) -> float:
        return self.cpu if clock == "cpu" else self.wall


def timed(function: Callable[[], object]) -> Timing:
    """CPU and wall seconds of one call, after a full collection (earlier garbage is not billed).

    The functions are single-threaded and CPU-bound on bytes in memory, so their
    thread CPU time is the work itself; wall time also holds whatever other
    processes took from this core.
    """
    gc.collect()
    cpu, wall = time.thread_time(), time.perf_counter()
    function()
    return Timing(time.thread_time() - cpu, time.perf_counter() - wall)


_PEAK_RSS_CHILD = """
import re, sys
from pathlib import Path
from shared.rebuild import collector_paused, rebuild
data = Path(sys.argv[1]).read_bytes()
if sys.argv[2] == "rebuild":
    with collector_paused():
        found = rebuild(data)
        del found
print(re.search(r"VmHWM:\\s+(\\d+) kB", Path("/proc/self/status").read_text()).group(1))
"""


def rebuild_peak_rss_kib(path: Path) -> int:
    """Peak RSS (KiB) that one rebuild as served adds to a process holding the file's bytes.

    Two fresh child processes: one only reads the file, the other also rebuilds it;
    each reports its ``VmHWM`` (ru_maxrss would carry over this process's peak
    across fork and exec).
    """
    peaks = [
        int(
            subprocess.run(
                [sys.executable, "-c", _PEAK_RSS_CHILD, str(path), what],
                cwd=REPO,
                check=True,
                capture_output=True,
                text=True,
            ).stdout
        )
        for what in ("read", "rebuild")
    ]
    return peaks[1] - peaks[0]


def check_rebuild(info: SessionInfo, data: bytes, path: Path) -> str | None:
    """A problem found in the rebuild of the synthesized session, or None."""
    found = rebuild(data)
    if found.degraded or len(found.messages) != info.messages or found.records != info.records:
        return (
            f"rebuild found {len(found.messages)} messages / {found.records} records"
            f" (wrote {info.messages} / {info.records}), degraded {found.degraded[:3]}"
        )
    if digest(found.messages) != info.digest:
        return "the digest of the rebuilt messages differs from the one written"
    indexed = index_rebuild(path)
    if len(indexed.messages) != info.messages or indexed.degraded:
        return f"index_rebuild found {len(indexed.messages)} messages, degraded {indexed.degraded[:3]}"
    return None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--size-mb", type=float, default=100, help="size of the synthesized session (MB)")
    parser.add_argument("--rounds", type=int, default=5, help="raw + rebuild + index_rebuild measurements")
    parser.add_argument("--check", action="store_true", help=f"exit 1 when rebuild/raw < {TARGET_RATIO}")
    args = parser.parse_args(argv)
    if args.size_mb <= 0 or args.rounds < 1:
        parser.error("--size-mb and --rounds must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print("command:", shlex.join(sys.orig_argv))
    times: dict[str, list[Timing]] = {
        name: [] for name in ("raw", "rebuild", "bare", "keep", "index_rebuild")
    }
    with tempfile.TemporaryDirectory(prefix="rollout-bench-rebuild-", dir="/tmp") as tmp:
        started = time.perf_counter()
        info = write_session(Path(tmp), target_bytes=int(args.size_mb * MB))
        data = info.path.read_bytes()
        print(
            f"workload: one session of {info.bytes / MB:.1f} MB, {info.records:,} records"
            f" ({info.bytes / info.records:.0f} bytes per line on average), {info.messages:,} messages"
            f" (generated in {time.perf_counter() - started:.1f} s)"
        )
        problem = check_rebuild(info, data, info.path)
        if problem is not None:
            print(f"rebuild check failed: {problem}")
            return 2
        print(
            f"peak memory: one rebuild as served adds {rebuild_peak_rss_kib(info.path) / 1024:.0f} MiB of RSS"
            f" to a process holding the file's {info.bytes / MB:.0f} MB"
        )
        subjects: dict[str, Callable[[], object]] = {
            "raw": partial(raw_parse, data),
            "rebuild": partial(rebuild_as_served, data),
            "bare": partial(rebuild, data),
            "keep": partial(keep_messages, data),
            "index_rebuild": partial(index_rebuild, info.path),
        }
        mb = info.bytes / MB
        for number in range(1, args.rounds + 1):
            order = list(subjects) if number % 2 else list(reversed(subjects))
            for name in order:
                times[name].append(timed(subjects[name]))
            if args.rounds > 1:
                rates = "  ".join(f"{name} {mb / times[name][-1].cpu:6.1f}" for name in subjects)
                round_ratio = times["raw"][-1].cpu / times["rebuild"][-1].cpu
                print(f"round {number}: {rates} MB/s (CPU)  ratio {round_ratio:.3f}")

    def rate(name: str, clock: str = "cpu") -> float:
        return mb / statistics.median(timing.seconds(clock) for timing in times[name])

    def ratio(name: str, clock: str = "cpu") -> float:
        """Median over rounds of raw time / ``name`` time (the same round)."""
        pairs = zip(times["raw"], times[name], strict=True)
        return statistics.median(raw.seconds(clock) / other.seconds(clock) for raw, other in pairs)

    note = f"median of {args.rounds} rounds" if args.rounds > 1 else "one round"
    print(f"rates in MB/s ({note}):                     CPU     wall")
    for label, name in (
        ("raw (split + orjson.loads per line)", "raw"),
        ("rebuild (shared.rebuild.rebuild, as served)", "rebuild"),
        ("info: bare rebuild (collector walks result)", "bare"),
        ("info: raw + keep message payloads", "keep"),
        ("info: index_rebuild (file, bounded memory)", "index_rebuild"),
    ):
        print(f"  {label:44s} {rate(name):7.1f}  {rate(name, 'wall'):7.1f}")
    cpu_ratio = ratio("rebuild")
    print(
        f"ratio rebuild/raw: {cpu_ratio:.3f} on CPU time, {ratio('rebuild', 'wall'):.3f} on wall time ({note})"
    )
    print(
        f"info: ratio bare/raw {ratio('bare'):.3f} on CPU time (rebuild with the collector walking its result)"
    )
    print(f"info: ratio keep/raw {ratio('keep'):.3f} on CPU time (parsing plus keeping the payloads alone)")
    holds = cpu_ratio >= TARGET_RATIO
    print(f"target rebuild/raw >= {TARGET_RATIO} (CPU time): {'MET' if holds else 'NOT MET'}")
    return 1 if args.check and not holds else 0


if __name__ == "__main__":
    sys.exit(main())
