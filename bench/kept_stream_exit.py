"""What a kept AppendStream adds to the end of an ``asyncio.run``: each run makes two
``LedgerSession.add_items`` calls (the second goes over the run's kept stream) and returns; the
time from the call of ``asyncio.run`` to its return, against the same run over unary Appends
(``AsyncSession.append``, no stream to end). ``asyncio.run`` cancels every task of its loop,
gRPC's own status task of an open stream among them, before it closes the async generators that
end the kept streams, so ending one waits for a status that cannot come, up to
``rollout_client._kept_stream.END_SECONDS``.

    .venv/bin/python bench/kept_stream_exit.py [--runs 10]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from _support import start_service

from rollout_client import RolloutClient
from rollout_client.agents import LedgerSession


def timed_runs(runs: int, make: Callable[[int], Coroutine[Any, Any, None]]) -> list[float]:
    """Seconds each ``asyncio.run(make(run))`` took, call to return."""
    seconds = []
    for run in range(runs):
        started = time.perf_counter()
        asyncio.run(make(run))
        seconds.append(time.perf_counter() - started)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        data = Path(root) / "data"
        writer = start_service("writer", data, Path(root) / "writer.log")
        reader = start_service("reader", data, Path(root) / "reader.log")
        try:
            with RolloutClient(writer.address, reader.address) as client:
                ledger = LedgerSession("kept-stream-exit", client=client)
                unary = client.core.session(client.create_session().id)

                async def kept(run: int) -> None:
                    await ledger.add_items([{"role": "user", "content": f"{run} a"}])
                    await ledger.add_items([{"role": "user", "content": f"{run} b"}])

                async def plain(run: int) -> None:
                    await unary.append({"role": "user", "content": f"{run} a"})
                    await unary.append({"role": "user", "content": f"{run} b"})

                baseline = statistics.median(timed_runs(args.runs, plain))
                measured = statistics.median(timed_runs(args.runs, kept))
        finally:
            writer.stop()
            reader.stop()
    print(f"$ .venv/bin/python bench/kept_stream_exit.py --runs {args.runs}")
    print(f"asyncio.run of two appends, median of {args.runs}:")
    print(f"  unary Appends (baseline):        {baseline * 1000:8.1f} ms")
    print(f"  LedgerSession over a kept stream: {measured * 1000:8.1f} ms  ({measured / baseline:.1f}x)")


if __name__ == "__main__":
    main()
