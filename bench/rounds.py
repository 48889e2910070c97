"""ListRounds of a session against its GetReplay, cold and cached, as ratios (issue 24).

Synthesizes running sessions of about ``--messages`` rebuilt messages (the record mix of
bench/_support.py: one round per turn, with tool calls, outputs, reasoning, usage events
and turn contexts), starts ``rollout serve-reader`` on them as a subprocess and per round
times, from the client (unary calls over loopback with the generated stub, replies
parsed):

* cold: GetReplay of one copy the reader never read, and ListRounds (every page, 1,000
  rounds a page) of another, so nothing derived helps either;
* cached: GetReplay and ListRounds (every page) of the main session, read before and not
  changed since (the median of 5 each).

The ratio ListRounds / GetReplay is taken per round and reported as the median over
``--rounds`` with its spread (min-max). Target: <= 1.5 cold and cached. Below, for
information, the same in CPU time: the reader's threads (/proc/<pid>/task/*/schedstat)
around each call.

    .venv/bin/python bench/rounds.py [--messages 10000] [--rounds 7] [--check]

Exit status: 0 whatever the figures; with ``--check``, 1 when a target fails; 2 when a call
fails or answers something other than what was written.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
from _support import MB, HelpFormatter, SessionInfo, proc_cpu_ns, settle, start_service, write_session

from rollout.v1 import reader_pb2, reader_pb2_grpc

TARGET = 1.5
REPEATS = 5
PAGE_SIZE = 1000
CLIENT_OPTIONS = [("grpc.max_receive_message_length", 256 * 1024 * 1024)]
_BASE_TIME = datetime(2026, 11, 30, 9, 0, 0, tzinfo=UTC)


def turns_for_messages(messages: int) -> int:
    """Turns whose rebuilt sequence holds at least ``messages`` messages."""
    from _support import messages_in_turn

    turns = total = 0
    while total < messages:
        total += messages_in_turn(turns)
        turns += 1
    return turns


class Calls:
    """GetReplay and ListRounds timed from the client (wall ms, reader CPU ms)."""

    def __init__(self, stub: reader_pb2_grpc.RolloutReaderStub, reader_pid: int) -> None:
        self.stub = stub
        self.reader_pid = reader_pid

    def _timed(self, call: Callable[[], object]) -> tuple[float, float]:
        cpu = proc_cpu_ns(self.reader_pid)
        started = time.perf_counter()
        call()
        wall = (time.perf_counter() - started) * 1000
        return wall, (proc_cpu_ns(self.reader_pid) - cpu) / 1e6

    def replay(self, info: SessionInfo) -> tuple[float, float]:
        def call() -> None:
            reply = self.stub.GetReplay(reader_pb2.ReplayRequest(session_id=info.session_id), timeout=120)
            if len(reply.messages) != info.messages:
                raise RuntimeError(f"GetReplay of {info.session_id}: {len(reply.messages)} messages")

        return self._timed(call)

    def rounds(self, info: SessionInfo, turns: int) -> tuple[float, float]:
        def call() -> None:
            token, count = "", 0
            while True:
                page = self.stub.ListRounds(
                    reader_pb2.ListRoundsRequest(
                        session_id=info.session_id, page_size=PAGE_SIZE, page_token=token
                    ),
                    timeout=120,
                )
                count += len(page.rounds)
                token = page.next_page_token
                if not token:
                    break
            if count != turns:
                raise RuntimeError(f"ListRounds of {info.session_id}: {count} rounds, not {turns}")

        return self._timed(call)


def median_pair(pairs: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(wall for wall, _ in pairs), statistics.median(cpu for _, cpu in pairs)


def report(name: str, rounds: list[dict[str, tuple[float, float]]], index: int) -> tuple[str, float]:
    """A printed line for ``name`` (cold or cached): both medians in ms and the ratio's median
    and spread; ``index`` 0 reads wall times, 1 CPU times."""
    replays = [one[f"{name} replay"][index] for one in rounds]
    listings = [one[f"{name} rounds"][index] for one in rounds]
    ratios = [listing / replay for listing, replay in zip(listings, replays, strict=True)]
    ratio = statistics.median(ratios)
    return (
        f"  {name:7s} GetReplay {statistics.median(replays):9.2f} ms  ListRounds"
        f" {statistics.median(listings):9.2f} ms  ratio {ratio:5.2f} ({min(ratios):.2f}-{max(ratios):.2f})",
        ratio,
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--messages", type=int, default=10_000, help="session size, in rebuilt messages")
    parser.add_argument("--rounds", type=int, default=7, help="rounds (two cold copies each)")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target fails")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.messages < 1:
        parser.error("--rounds and --messages must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print("command:", shlex.join(sys.orig_argv))
    turns = turns_for_messages(args.messages)
    with tempfile.TemporaryDirectory(prefix="rollout-bench-rounds-", dir="/tmp") as tmp_name:
        tmp = Path(tmp_name)
        sessions = tmp / "data" / "sessions"
        sessions.mkdir(parents=True)
        infos = [
            write_session(
                sessions, turns=turns, created_at=_BASE_TIME + timedelta(seconds=number), stop_kind=""
            )
            for number in range(1 + 2 * args.rounds)
        ]
        main_info, copies = infos[0], infos[1:]
        reader = start_service("reader", sessions.parent, tmp / "reader.stderr")
        results: list[dict[str, tuple[float, float]]] = []
        try:
            with grpc.insecure_channel(reader.address, options=CLIENT_OPTIONS) as channel:
                calls = Calls(reader_pb2_grpc.RolloutReaderStub(channel), reader.process.pid)  # type: ignore[no-untyped-call]
                settle(reader)
                calls.replay(main_info)  # warm-up: the first call of a reader scans the folder,
                calls.rounds(main_info, turns)  # and these fill both caches for "cached"
                for number in range(args.rounds):
                    results.append(
                        {
                            "cold replay": calls.replay(copies[2 * number]),
                            "cold rounds": calls.rounds(copies[2 * number + 1], turns),
                            "cached replay": median_pair([calls.replay(main_info) for _ in range(REPEATS)]),
                            "cached rounds": median_pair(
                                [calls.rounds(main_info, turns) for _ in range(REPEATS)]
                            ),
                        }
                    )
        except (grpc.RpcError, RuntimeError) as exc:
            detail = f"{exc.code().name}: {exc.details()}" if isinstance(exc, grpc.RpcError) else str(exc)
            print(f"benchmark failed: {detail}")
            return 2
        finally:
            reader.stop()
    print(
        f"\nsession of {main_info.messages:,} messages, {turns:,} rounds ({main_info.bytes / MB:.2f} MB,"
        f" {main_info.records:,} records); {args.rounds} rounds of measures"
    )
    all_hold = True
    for name in ("cold", "cached"):
        line, ratio = report(name, results, 0)
        holds = ratio <= TARGET
        all_hold = all_hold and holds
        print(f"{line}   <= {TARGET}: {'MET' if holds else 'NOT MET'}")
    print("  CPU time (the reader's threads), for information:")
    for name in ("cold", "cached"):
        print(report(name, results, 1)[0])
    return 1 if args.check and not all_hold else 0


if __name__ == "__main__":
    sys.exit(main())
