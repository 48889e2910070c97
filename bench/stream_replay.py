"""StreamReplay of a large session: the reader's peak RSS and the stream's throughput.

Synthesizes one session of ``--size-mb`` MB (default ~1 GB) of realistic records
(see bench/_support.py) ending with an ``agent_checkpoint`` whose digest covers
every message, starts ``rollout serve-reader`` on it as a subprocess, and reads
the reader's peak RSS (``VmHWM`` of /proc/<pid>/status) right after start: the
baseline of an idle reader. A client then calls StreamReplay and consumes every
chunk (counting messages, checking that ``first_index`` has no gaps and that the
last chunk's summary says DIGEST_STATUS_VERIFIED with the digest that was
written). Afterwards ``VmHWM`` is read again: the peak RSS of the whole replay.

Prints the throughput (file MB / seconds from the call to the last chunk), the
idle and peak RSS and their ratio; the target is peak RSS <= 256 MiB.

    .venv/bin/python bench/stream_replay.py [--size-mb 1000] [--check]

Exit status: 0 whatever the figures; with ``--check``, 1 when the peak RSS is
over the target; 2 when the stream fails or does not return what was written.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import grpc
from _support import (
    MB,
    HelpFormatter,
    SessionInfo,
    proc_cpu_seconds,
    proc_status_kb,
    start_service,
    write_session,
)

from rollout.v1 import reader_pb2, reader_pb2_grpc

TARGET_PEAK_MIB = 256
CLIENT_OPTIONS = [("grpc.max_receive_message_length", 256 * 1024 * 1024)]


@dataclass(frozen=True)
class StreamResult:
    seconds: float
    chunks: int
    messages: int
    summary: reader_pb2.ReplaySummary
    problems: list[str]


def consume(address: str, session_id: str) -> StreamResult:
    """One StreamReplay, every chunk read and dropped; the summary is the last chunk's."""
    problems: list[str] = []
    chunks = messages = 0
    summary = reader_pb2.ReplaySummary()
    with grpc.insecure_channel(address, options=CLIENT_OPTIONS) as channel:
        stub = reader_pb2_grpc.RolloutReaderStub(channel)  # type: ignore[no-untyped-call]
        started = time.perf_counter()
        for chunk in stub.StreamReplay(reader_pb2.ReplayRequest(session_id=session_id), timeout=900):
            if chunk.first_index != messages:
                problems.append(f"chunk {chunks} starts at {chunk.first_index}, expected {messages}")
            chunks += 1
            messages += len(chunk.messages)
            if chunk.HasField("summary"):
                summary = chunk.summary
        seconds = time.perf_counter() - started
    return StreamResult(seconds, chunks, messages, summary, problems)


def check(result: StreamResult, info: SessionInfo) -> list[str]:
    """What the stream returned that differs from what was written."""
    problems = list(result.problems)
    summary = result.summary
    if result.messages != info.messages or summary.message_count != info.messages:
        problems.append(
            f"{result.messages} messages streamed, summary says {summary.message_count}, wrote {info.messages}"
        )
    if summary.digest_status != reader_pb2.DIGEST_STATUS_VERIFIED:
        problems.append(f"digest status {reader_pb2.DigestStatus.Name(summary.digest_status)}")
    if summary.computed_digest != info.digest:
        problems.append(f"computed digest {summary.computed_digest}, written {info.digest}")
    if summary.degraded:
        problems.append(f"{len(summary.degraded)} degraded entries, first: {summary.degraded[0]}")
    return problems


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--size-mb", type=float, default=1000, help="size of the synthesized session (MB)")
    parser.add_argument(
        "--check", action="store_true", help=f"exit 1 when the peak RSS is over {TARGET_PEAK_MIB} MiB"
    )
    args = parser.parse_args(argv)
    if args.size_mb <= 0:
        parser.error("--size-mb must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print("command:", shlex.join(sys.orig_argv))
    with tempfile.TemporaryDirectory(prefix="rollout-bench-stream-", dir="/tmp") as tmp:
        sessions = Path(tmp) / "data" / "sessions"
        sessions.mkdir(parents=True)
        started = time.perf_counter()
        info = write_session(sessions, target_bytes=int(args.size_mb * MB))
        print(
            f"workload: one session of {info.bytes / MB:,.1f} MB, {info.records:,} records,"
            f" {info.messages:,} messages, checkpoint + stop at the end"
            f" (generated in {time.perf_counter() - started:.1f} s; the file is in the page cache)"
        )
        reader = start_service("reader", sessions.parent, Path(tmp) / "reader.stderr")
        try:
            idle_kb = proc_status_kb(reader.process.pid, "VmHWM")
            reader_cpu = proc_cpu_seconds(reader.process.pid)
            client_cpu = time.process_time()
            result = consume(reader.address, info.session_id)
            client_cpu = time.process_time() - client_cpu
            reader_cpu = proc_cpu_seconds(reader.process.pid) - reader_cpu
            peak_kb = proc_status_kb(reader.process.pid, "VmHWM")
            after_kb = proc_status_kb(reader.process.pid, "VmRSS")
        except grpc.RpcError as exc:
            print(f"StreamReplay failed: {exc.code().name}: {exc.details()}")
            return 2
        finally:
            reader.stop()
    problems = check(result, info)
    for problem in problems:
        print(f"stream check failed: {problem}")
    if problems:
        return 2
    print(
        f"stream: {result.chunks:,} chunks, {result.messages:,} messages in {result.seconds:.1f} s,"
        f" digest {reader_pb2.DigestStatus.Name(result.summary.digest_status)}"
    )
    print(
        f"throughput: {info.bytes / MB / result.seconds:,.1f} MB/s of session file,"
        f" {result.messages / result.seconds:,.0f} messages/s"
        f" (CPU during the stream: reader {reader_cpu:.1f} s, client {client_cpu:.1f} s)"
    )
    print(f"reader RSS idle (VmHWM right after start): {idle_kb / 1024:7.1f} MiB")
    print(f"reader RSS peak (VmHWM after the stream):  {peak_kb / 1024:7.1f} MiB")
    print(f"reader RSS after the stream (VmRSS):       {after_kb / 1024:7.1f} MiB")
    print(f"ratio peak/idle: {peak_kb / idle_kb:.2f}; peak - idle: {(peak_kb - idle_kb) / 1024:.1f} MiB")
    holds = peak_kb <= TARGET_PEAK_MIB * 1024
    print(f"target peak RSS <= {TARGET_PEAK_MIB} MiB: {'MET' if holds else 'NOT MET'}")
    return 1 if args.check and not holds else 0


if __name__ == "__main__":
    sys.exit(main())
