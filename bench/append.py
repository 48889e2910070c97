"""Append throughput: the writer's AppendStream against a raw orjson + write + fsync baseline.

Streams ``--requests`` AppendRequests of ``--batch`` ~1 KB message records each
through a writer started as a subprocess on a temporary data root (with the
default --batch 32 the writer fdatasyncs once per request: a group-commit batch
holds at most 32 records), then writes the same records, in the same line shape,
straight to a file with ``orjson.dumps`` + ``os.write`` + ``os.fdatasync`` per
batch. Prints both rates in records/s and their ratio; the target is
service/raw >= 0.5.

    .venv/bin/python bench/append.py [--requests 2000] [--batch 32] [--rounds 1] [--check]
                                     [--compare-sync-call]

Exit status: 0 whatever the figures; with ``--check``, 1 when the ratio is below
the target; 2 when the stream fails (the gRPC status is printed).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import orjson
from _support import HelpFormatter

from rollout.v1 import records_pb2, writer_pb2, writer_pb2_grpc
from tests.processes import ServiceProcess, start_service

REPO = Path(__file__).resolve().parent.parent
TARGET_RATIO = 0.5
_LISTENING = re.compile(r"listening on (\S+:\d+)")
# A seq and ts of representative width, used only to size the text of a record.
_SIZING_SEQ = 12345
_SIZING_TS = "2026-11-30T10:15:30.123456Z"


@dataclass(frozen=True)
class Result:
    records: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.records / self.seconds


def _timestamp() -> str:
    """The record ``ts`` format of the writer (RFC 3339 UTC, microseconds)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _line(seq: int, ts: str, payload: dict[str, Any]) -> bytes:
    return orjson.dumps({"v": 1, "seq": seq, "ts": ts, "type": "message", "payload": payload}) + b"\n"


def make_payloads(count: int, record_bytes: int) -> list[dict[str, Any]]:
    """``count`` message payloads, user/assistant alternating, each line ~``record_bytes`` long."""
    overhead = len(_line(_SIZING_SEQ, _SIZING_TS, {"role": "assistant", "content": ""}))
    text_bytes = max(record_bytes - overhead, 16)
    filler = "The quick brown fox jumps over the lazy dog; 0123456789. " * (text_bytes // 56 + 2)
    payloads = []
    for index in range(count):
        head = f"#{index}: "
        payloads.append(
            {
                "role": "user" if index % 2 == 0 else "assistant",
                "content": head + filler[: text_bytes - len(head)],
            }
        )
    return payloads


def make_requests(
    session_id: str, payloads: list[dict[str, Any]], batch: int
) -> list[writer_pb2.AppendRequest]:
    requests = []
    for start in range(0, len(payloads), batch):
        request = writer_pb2.AppendRequest(session_id=session_id)
        for payload in payloads[start : start + batch]:
            message = records_pb2.ChatMessage(role=payload["role"], text=payload["content"])
            request.records.add(message=message)
        requests.append(request)
    return requests


# -- raw baseline ---------------------------------------------------------------------


def run_raw(path: Path, payloads: list[dict[str, Any]], batch: int) -> Result:
    """Encode each batch as JSONL lines with orjson, one write and one fdatasync per batch."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
    try:
        os.write(fd, _line(0, _timestamp(), {"session_id": "raw"}))
        os.fsync(fd)
        seq = 1
        started = time.perf_counter()
        for start in range(0, len(payloads), batch):
            ts = _timestamp()
            lines = []
            for payload in payloads[start : start + batch]:
                lines.append(_line(seq, ts, payload))
                seq += 1
            view = memoryview(b"".join(lines))
            while view:
                view = view[os.write(fd, view) :]
            os.fdatasync(fd)
        elapsed = time.perf_counter() - started
    finally:
        os.close(fd)
    return Result(len(payloads), elapsed)


# -- service ----------------------------------------------------------------------------


def start_writer(data_dir: Path, stderr_path: Path, *extra: str) -> ServiceProcess:
    """``rollout serve-writer [extra]`` on a free port; waits for its "listening on" line."""
    return start_service("writer", data_dir, stderr_path, *extra)


def run_service(address: str, payloads: list[dict[str, Any]], batch: int) -> tuple[Result, str]:
    """CreateSession, then one pipelined AppendStream of every batch; returns (result, session id)."""
    with grpc.insecure_channel(address) as channel:
        stub = writer_pb2_grpc.RolloutWriterStub(channel)  # type: ignore[no-untyped-call]
        session_id = stub.CreateSession(
            writer_pb2.CreateSessionRequest(agent_name="bench", role=writer_pb2.SESSION_ROLE_ROOT)
        ).session_id
        requests = make_requests(session_id, payloads, batch)
        first_send: list[float] = []

        def feed() -> Iterator[writer_pb2.AppendRequest]:
            first_send.append(time.perf_counter())
            yield from requests

        acks = 0
        next_seq = 0
        for response in stub.AppendStream(feed()):
            acks += 1
            next_seq = response.next_seq
        last_ack = time.perf_counter()
    if acks != len(requests) or next_seq != len(payloads) + 1:
        raise RuntimeError(f"{acks} acks for {len(requests)} requests, next_seq {next_seq}")
    return Result(len(payloads), last_ack - first_send[0]), session_id


def count_lines(data_dir: Path, session_id: str) -> int:
    files = [path for path in data_dir.rglob("*.jsonl") if session_id in path.name]
    if len(files) != 1:
        raise RuntimeError(f"expected one session file for {session_id}, found {files}")
    with files[0].open("rb") as handle:
        return sum(1 for _ in handle)


# -- main ---------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--requests", type=int, default=2000, help="AppendRequests to stream")
    parser.add_argument("--batch", type=int, default=32, help="records per request and per raw fsync")
    parser.add_argument("--record-bytes", type=int, default=1024, help="approximate bytes per line")
    parser.add_argument(
        "--rounds", type=int, default=1, help="raw + service measurements; figures are the medians"
    )
    parser.add_argument("--check", action="store_true", help=f"exit 1 when service/raw < {TARGET_RATIO}")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (prints its path)")
    parser.add_argument(
        "--compare-sync-call",
        action="store_true",
        help="also run a second writer with --sync-call fdatasync (write + fdatasync) in every round,"
        " alternating which writer goes first, and print its rate and the paired ratio",
    )
    args = parser.parse_args(argv)
    if min(args.requests, args.batch, args.rounds) < 1:
        parser.error("--requests, --batch and --rounds must be positive")
    return args


def measure_service(address: str, data_dir: Path, payloads: list[dict[str, Any]], batch: int) -> Result:
    """One pipelined AppendStream of every payload, checked line by line in the session file."""
    service, session_id = run_service(address, payloads, batch)
    lines = count_lines(data_dir, session_id)
    if lines != len(payloads) + 1:
        raise RuntimeError(f"session file has {lines} lines, expected {len(payloads) + 1}")
    return service


def measure(
    tmp: Path, payloads: list[dict[str, Any]], args: argparse.Namespace
) -> list[tuple[Result, Result, Result | None]]:
    """(raw, service, service with --sync-call fdatasync or None) per round.

    One writer process (two with --compare-sync-call, on separate data roots)
    serves every round, a new session each.
    """
    options = {"service": ("--sync-call", "pwritev2")}
    if args.compare_sync_call:
        options["fdatasync"] = ("--sync-call", "fdatasync")
    data_dirs = {name: tmp / f"data-{name}" for name in options}
    writers = {
        name: start_writer(data_dirs[name], tmp / f"writer-{name}.stderr", *options[name]) for name in options
    }
    rounds = []
    try:
        for number in range(1, args.rounds + 1):
            raw = run_raw(tmp / f"raw-{number}.jsonl", payloads, args.batch)
            order = list(writers) if number % 2 else list(reversed(writers))
            rates = {
                name: measure_service(writers[name].address, data_dirs[name], payloads, args.batch)
                for name in order
            }
            service, other = rates["service"], rates.get("fdatasync")
            if args.rounds > 1:
                compared = f"  (fdatasync writer {other.rate:,.0f})" if other else ""
                print(
                    f"round {number}: raw {raw.rate:,.0f}  service {service.rate:,.0f} records/s"
                    f"  ratio {service.rate / raw.rate:.3f}{compared}"
                )
            rounds.append((raw, service, other))
    finally:
        for writer in writers.values():
            writer.stop()
    return rounds


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    payloads = make_payloads(args.requests * args.batch, args.record_bytes)
    sample = len(_line(_SIZING_SEQ, _timestamp(), payloads[0]))
    print("command:", shlex.join(sys.orig_argv))
    print(
        f"workload: {args.requests} requests x {args.batch} records = {len(payloads)} records,"
        f" {sample} bytes per line, fdatasync per {args.batch} records"
    )
    tmp = Path(tempfile.mkdtemp(prefix="rollout-bench-"))
    try:
        rounds = measure(tmp, payloads, args)
    except grpc.RpcError as exc:
        print(f"service run failed: {exc.code().name}: {exc.details()}")
        return 2
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    raw_rate = statistics.median(raw.rate for raw, _, _ in rounds)
    service_rate = statistics.median(service.rate for _, service, _ in rounds)
    ratio = statistics.median(service.rate / raw.rate for raw, service, _ in rounds)
    if len(rounds) == 1:
        raw_note = f"  ({rounds[0][0].seconds:.3f} s)"
        service_note = f"  ({rounds[0][1].seconds:.3f} s)"
        ratio_note = ""
    else:
        raw_note = service_note = "  (median)"
        ratio_note = f"  (median of {len(rounds)} rounds)"
    print(f"raw     (orjson + write + fdatasync): {raw_rate:10,.0f} records/s{raw_note}")
    print(f"service (AppendStream over gRPC):     {service_rate:10,.0f} records/s{service_note}")
    print(f"ratio service/raw: {ratio:.3f}{ratio_note}")
    compared = [(service, other) for _, service, other in rounds if other is not None]
    if compared:
        other_rate = statistics.median(other.rate for _, other in compared)
        gain = statistics.median(service.rate / other.rate for service, other in compared)
        print(f"info: writer with --sync-call fdatasync: {other_rate:10,.0f} records/s (median)")
        print(f"info: ratio pwritev2/fdatasync writer: {gain:.3f} (median of paired rounds)")
    if args.batch >= 32:
        # The writer's default --batch-max-records is 32 and a request is never split.
        print(f"batches: every {args.batch}-record request is its own group-commit batch (cap 32 records)")
    else:
        print("batches: distribution not available (serve-writer exposes no metrics endpoint)")
    holds = ratio >= TARGET_RATIO
    print(f"target service/raw >= {TARGET_RATIO}: {'MET' if holds else 'NOT MET'}")
    return 1 if args.check and not holds else 0


if __name__ == "__main__":
    sys.exit(main())
