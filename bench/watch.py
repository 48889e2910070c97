"""What a watcher costs the reader: WatchSession with 1 watcher against many on one session.

Usage:

    .venv/bin/python bench/watch.py [--records 10000] [--per-write 10] [--watchers 1,50] [--rounds 3]

One reader (``rollout serve-reader`` on a temporary data root, port 0) and one session file
written directly (no writer: its fsyncs are not what is measured). In each round, for each
watcher count W (in rotating order), a fresh session gets W WatchSession streams (grpc.aio,
one channel), then ``--records`` ~1 KB message lines are appended in writes of
``--per-write`` lines, as fast as the file takes them; the round ends when every watcher has
the last record. It prints, per W, the median over rounds of the reader's CPU time (user +
system, /proc) per 1,000 records delivered to all watchers, with the spread (min..max), the
same per watcher, and the ratio of each W's median to the first W's. The reader reads,
parses and encodes each write once for all of its watchers (one tail per session); what
grows with W is one stream message of the shared bytes per watcher.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from pathlib import Path

import grpc
from _support import HelpFormatter, proc_cpu_seconds, start_service

from rollout.v1 import reader_pb2, reader_pb2_grpc
from shared.naming import build_file_name, new_session_id
from shared.records import RecordType, encode_line, now_timestamp, parse_timestamp

TEXT = "the agent read the failing test and proposed a fix; " * 19  # ~1 KB


def _new_session(data_dir: Path) -> tuple[str, Path]:
    session_id, ts = new_session_id(), now_timestamp()
    folder = data_dir / "sessions"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / build_file_name(parse_timestamp(ts), session_id)
    path.write_bytes(
        encode_line(0, ts, RecordType.SESSION_META, {"session_id": session_id, "created_at": ts})
    )
    return session_id, path


async def _watch(
    stub: reader_pb2_grpc.RolloutReaderStub, session_id: str, last: int, started: asyncio.Event
) -> None:
    call = stub.WatchSession(reader_pb2.WatchSessionRequest(session_id=session_id))
    async for reply in call:
        started.set()
        if reply.records[-1].seq >= last:
            call.cancel()
            return


async def _round(
    address: str, data_dir: Path, watchers: int, records: int, per_write: int, pid: int
) -> float:
    """Reader CPU seconds to deliver ``records`` new records to ``watchers`` watchers."""
    session_id, path = _new_session(data_dir)
    async with grpc.aio.insecure_channel(address) as channel:
        stub = reader_pb2_grpc.RolloutReaderStub(channel)
        starts = [asyncio.Event() for _ in range(watchers)]
        tasks = [asyncio.create_task(_watch(stub, session_id, records, started)) for started in starts]
        for started in starts:  # every stream has its session_meta: all are live
            await started.wait()
        before = proc_cpu_seconds(pid)
        with path.open("ab") as handle:
            for first in range(1, records + 1, per_write):
                last = min(first + per_write, records + 1)
                handle.write(
                    b"".join(
                        encode_line(
                            seq, now_timestamp(), RecordType.MESSAGE, {"role": "user", "content": TEXT}
                        )
                        for seq in range(first, last)
                    )
                )
                handle.flush()
                await asyncio.sleep(0)  # let the streams take what arrived
        await asyncio.gather(*tasks)
        return proc_cpu_seconds(pid) - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--records", type=int, default=10000, help="records appended per round")
    parser.add_argument("--per-write", type=int, default=10, help="records per write")
    parser.add_argument("--watchers", default="1,50", help="watcher counts, comma separated")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    counts = [int(part) for part in args.watchers.split(",")]
    print("command:", " ".join([".venv/bin/python", "bench/watch.py", *sys.argv[1:]]))
    with tempfile.TemporaryDirectory(prefix="rollout-bench-watch-") as folder:
        data_dir = Path(folder) / "data"
        data_dir.mkdir()
        reader = start_service("reader", data_dir, Path(folder) / "reader.log")
        try:
            cpu: dict[int, list[float]] = {count: [] for count in counts}
            for round_number in range(args.rounds):
                order = counts[round_number % len(counts) :] + counts[: round_number % len(counts)]
                for count in order:
                    seconds = asyncio.run(
                        _round(
                            reader.address, data_dir, count, args.records, args.per_write, reader.process.pid
                        )
                    )
                    cpu[count].append(seconds * 1000 / args.records * 1000)  # ms per 1,000 records
        finally:
            reader.stop()
    base = statistics.median(cpu[counts[0]])
    for count in counts:
        values = cpu[count]
        median = statistics.median(values)
        print(
            f"{count:>4} watchers: reader CPU {median:8.1f} ms per 1,000 records"
            f" ({min(values):.1f}..{max(values):.1f}), {median / count:7.2f} ms per watcher,"
            f" x{median / base:.2f} of {counts[0]} watcher(s)"
        )


if __name__ == "__main__":
    main()
