"""Reading one very long line against reading as many bytes of ~1 KiB lines, as a ratio.

Every whole-file pass (the index rebuild, the replay cache, the writer's reopen,
the fork-point search) reads its file through ``shared.committed_lines`` in chunks;
a line longer than a chunk (a record may be up to the writer's record limit, 64 MiB
by default) is carried over until the chunk that ends it. The benchmark writes two
temporary files of ``--mib`` MiB each: one single line, and lines of ~1 KiB; then,
``--rounds`` times and in this one process, times a pass over each with
``CommittedLines`` at ``--chunk-kib`` (256 KiB: the writer's reopen chunk) and
prints the medians (s, MiB/s) and their ratio long/short. Carrying the pieces and
joining them once keeps the ratio near 1 (time in proportion to the line's length);
joining them again at every chunk made it grow with the square of the length.
Target: ratio <= 2.

    .venv/bin/python bench/long_line.py [--mib 64] [--chunk-kib 256] [--rounds 5] [--check]

Exit status: 0 whatever the figures; with ``--check``, 1 when the ratio is over the
target; 2 when a pass reads other lines than were written.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _support import HelpFormatter

from shared.committed_lines import CommittedLines

TARGET = 2.0


def timed_pass(path: Path, chunk_bytes: int) -> tuple[float, int]:
    """(seconds, complete lines) of one CommittedLines pass over ``path``."""
    with path.open("rb") as handle:
        start = time.perf_counter()
        count = sum(len(batch) for batch in CommittedLines(handle.fileno(), chunk_bytes=chunk_bytes))
        return time.perf_counter() - start, count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--mib", type=int, default=64, help="size of each file (MiB)")
    parser.add_argument("--chunk-kib", type=int, default=256, help="bytes read at a time (KiB)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--check", action="store_true", help="exit 1 when the ratio is over the target")
    options = parser.parse_args()
    size, chunk_bytes = options.mib << 20, options.chunk_kib << 10
    print("command:", shlex.join([".venv/bin/python", "bench/long_line.py", *sys.argv[1:]]))
    with tempfile.TemporaryDirectory(prefix="long-line-") as folder:
        long_file, short_file = Path(folder) / "long.jsonl", Path(folder) / "short.jsonl"
        long_file.write_bytes(b"x" * (size - 1) + b"\n")
        line = b"y" * 1023 + b"\n"
        short_lines = size // len(line)
        short_file.write_bytes(line * short_lines)
        longs, shorts = [], []
        for _ in range(options.rounds):
            seconds, count = timed_pass(long_file, chunk_bytes)
            if count != 1:
                print(f"the long file read as {count} lines, not 1")
                return 2
            longs.append(seconds)
            seconds, count = timed_pass(short_file, chunk_bytes)
            if count != short_lines:
                print(f"the short-line file read as {count} lines, not {short_lines}")
                return 2
            shorts.append(seconds)
    long_s, short_s = statistics.median(longs), statistics.median(shorts)
    ratio = long_s / short_s
    print(f"{options.mib} MiB read in {options.chunk_kib} KiB chunks; {options.rounds} rounds (medians)")
    print(f"  one line of {options.mib} MiB   {long_s:8.3f} s  {options.mib / long_s:8.0f} MiB/s")
    print(f"  {short_lines:,} lines of 1 KiB {short_s:8.3f} s  {options.mib / short_s:8.0f} MiB/s")
    verdict = "MET" if ratio <= TARGET else "NOT MET"
    print(f"  ratio long/short {ratio:.2f}  (target <= {TARGET}: {verdict})")
    return 1 if options.check and ratio > TARGET else 0


if __name__ == "__main__":
    sys.exit(main())
