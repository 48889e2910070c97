"""The writer's memory: large and rejected requests, and Stop / Resume / Fork of a large session.

Starts ``rollout serve-writer`` (from ``--writer-repo``, this checkout by default) on a
temporary data root holding one open session of ``--size-mb`` MB (written directly in
the on-disk format, realistic record mix), then measures the writer's resident memory
from ``/proc/<pid>/status``: ``VmRSS`` when idle, and for each step the peak
(``VmHWM``, reset before the step through ``/proc/<pid>/clear_refs``) and ``VmRSS``
a second after it. Steps:

* ``rejected``: ``--large`` concurrent Appends of one ``--large-mb`` MB message each, all
  refused: over the request limit that follows the record limit (RESOURCE_EXHAUSTED, from
  gRPC, with the default 3 MiB) or, with a larger ``--max-record-bytes`` such as 30000000,
  decoded and over the record limit (INVALID_ARGUMENT);
* ``stop``: Stop of the large session (paused), ``resume``: Resume of it,
  ``fork``: Fork of it at its last seq.

Figures are MiB above idle. Target (the issue's): Stop, Resume and Fork peak under
256 MiB above idle; RSS after a rejected request back near idle.

    .venv/bin/python bench/writer_memory.py [--size-mb 500] [--large 8] [--large-mb 60] [--max-record-bytes 3145728]
                                            [--writer-repo PATH]
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import grpc
from _support import HelpFormatter, proc_status_kb, write_session
from fleet import Servers

from rollout.v1 import records_pb2, writer_pb2, writer_pb2_grpc

REPO = Path(__file__).resolve().parent.parent
OPTIONS = [("grpc.max_send_message_length", 128 * 1024 * 1024)]
REFUSED = (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED)


def _mib(kb: int) -> float:
    return kb / 1024


def measure(pid: int, label: str, idle_kb: int, step) -> tuple[float, float, float]:
    """Run ``step()``; returns (seconds, peak MiB above idle, MiB above idle a second after)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    started = time.perf_counter()
    step()
    elapsed = time.perf_counter() - started
    peak = proc_status_kb(pid, "VmHWM")
    time.sleep(1.0)
    after = proc_status_kb(pid, "VmRSS")
    print(
        f"{label:<10} {elapsed:7.2f} s   peak {_mib(peak - idle_kb):8.1f} MiB above idle"
        f"   after {_mib(after - idle_kb):8.1f} MiB above idle"
    )
    return elapsed, _mib(peak - idle_kb), _mib(after - idle_kb)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--size-mb", type=int, default=500, help="size of the large session (MB)")
    parser.add_argument("--large", type=int, default=8, help="concurrent oversized Appends")
    parser.add_argument("--large-mb", type=int, default=60, help="size of each oversized message (MB)")
    parser.add_argument("--writer-repo", type=Path, default=REPO, help="checkout the writer runs from")
    parser.add_argument(
        "--max-record-bytes",
        type=int,
        default=3 * 1024 * 1024,
        help="the writer's record limit; the --large-mb messages must be over it to be refused"
        " (3 MiB: the limit the issue's figures were taken with; the writer's default is 64 MiB)",
    )
    args = parser.parse_args(argv)
    if args.large_mb * 1_000_000 <= args.max_record_bytes:
        parser.error("--large-mb must be over --max-record-bytes: the large Appends are meant to be refused")
    print("command:", shlex.join(sys.orig_argv))
    tmp = Path(tempfile.mkdtemp(prefix="rollout-memory-"))
    try:
        sessions = tmp / "data" / "sessions"
        sessions.mkdir(parents=True)
        started = time.perf_counter()
        info = write_session(sessions, target_bytes=args.size_mb * 1_000_000, stop_kind="")
        print(
            f"wrote a {info.bytes / 1e6:.0f} MB session ({info.records:,} records) in {time.perf_counter() - started:.1f} s"
        )
        writer, _ = Servers(tmp, args.writer_repo.resolve()).writer(
            tmp / "data", "--max-record-bytes", str(args.max_record_bytes)
        )
        pid = writer.process.pid
        try:
            with grpc.insecure_channel(writer.address, options=OPTIONS) as channel:
                stub = writer_pb2_grpc.RolloutWriterStub(channel)  # type: ignore[no-untyped-call]
                small = stub.CreateSession(writer_pb2.CreateSessionRequest()).session_id
                time.sleep(1.0)
                idle = proc_status_kb(pid, "VmRSS")
                print(f"idle RSS {_mib(idle):.1f} MiB")
                text = "x" * (args.large_mb * 1_000_000)

                def rejected() -> None:
                    def one() -> None:
                        message = records_pb2.ChatMessage(role="user", text=text)
                        request = writer_pb2.AppendRequest(
                            session_id=small, records=[writer_pb2.AppendRecord(message=message)]
                        )
                        try:
                            stub.Append(request, timeout=120)
                        except grpc.RpcError as exc:
                            # Over the record limit (INVALID_ARGUMENT), or over the request limit
                            # that follows it, refused by gRPC before any decoding (RESOURCE_EXHAUSTED).
                            if exc.code() not in REFUSED:
                                raise
                            refusals[exc.code().name] += 1

                    refusals: Counter[str] = Counter()
                    threads = [threading.Thread(target=one) for _ in range(args.large)]
                    for thread in threads:
                        thread.start()
                    for thread in threads:
                        thread.join()
                    print(f"refused: {dict(refusals)} (of {args.large})")
                    if sum(refusals.values()) != args.large:
                        raise RuntimeError("a large Append was not refused")

                measure(pid, "rejected", idle, rejected)
                big = info.session_id
                measure(
                    pid,
                    "stop",
                    idle,
                    lambda: stub.Stop(
                        writer_pb2.StopRequest(session_id=big, stop_kind=records_pb2.STOP_KIND_PAUSED),
                        timeout=600,
                    ),
                )
                measure(
                    pid,
                    "resume",
                    idle,
                    lambda: stub.Resume(writer_pb2.ResumeRequest(session_id=big), timeout=600),
                )
                measure(
                    pid,
                    "fork",
                    idle,
                    lambda: stub.Fork(
                        writer_pb2.ForkRequest(session_id=big, at_seq=info.records - 1), timeout=600
                    ),
                )
        finally:
            writer.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
