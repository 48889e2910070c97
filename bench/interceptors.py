"""What the servers' interceptors cost a unary call: shared.serving's RpcObserver (always on:
metrics and refusal logs) and AuthInterceptor (with --auth-tokens), against a bare grpc.aio
server, each answering a no-op unary method.

Each configuration runs as its own server process; the client (this process) keeps
``--concurrency`` calls in flight for ``--calls`` calls, configurations interleaved over
``--rounds`` rounds. Prints calls/s per configuration (median and spread over the rounds)
and each one's ratio to the bare server of the same round.

    .venv/bin/python bench/interceptors.py [--calls 4000] [--concurrency 64] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
import grpc.aio
import orjson

REPO = Path(__file__).resolve().parent.parent
METHOD = "/bench.Noop/Call"
TOKEN = "bench-token-5f1e2d3c"
CONFIGURATIONS = ("bare", "observer", "observer+auth")


async def _serve(configuration: str, tokens: str) -> None:
    sys.path.insert(0, str(REPO))
    from shared.auth import TokenTable
    from shared.serving import ServerSettings

    async def noop(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return b""

    handler = grpc.method_handlers_generic_handler(
        "bench.Noop", {"Call": grpc.unary_unary_rpc_method_handler(noop)}
    )
    if configuration == "bare":
        interceptors: list[grpc.aio.ServerInterceptor] = []
    else:
        settings = ServerSettings(
            tokens=TokenTable(Path(tokens)) if configuration == "observer+auth" else None
        )
        interceptors = settings.interceptors("bench")
    server = grpc.aio.server(interceptors=interceptors)
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(port, flush=True)
    await server.wait_for_termination()


async def _load(port: int, calls: int, concurrency: int) -> float:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_unary(METHOD)
        metadata = (("authorization", f"Bearer {TOKEN}"),)
        remaining = calls

        async def worker() -> None:
            nonlocal remaining
            while remaining > 0:
                remaining -= 1
                await call(b"", metadata=metadata)

        await asyncio.gather(*(worker() for _ in range(min(concurrency, 100))))  # warm-up
        remaining = calls
        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return calls / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--serve", choices=CONFIGURATIONS, help=argparse.SUPPRESS)
    parser.add_argument("--tokens", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(_serve(args.serve, args.tokens))
        return
    print("command:", shlex.join([sys.executable, *sys.argv]))
    with tempfile.TemporaryDirectory() as folder:
        tokens = Path(folder) / "tokens.json"
        tokens.write_bytes(orjson.dumps({TOKEN: "bench"}))
        rates: dict[str, list[float]] = {name: [] for name in CONFIGURATIONS}
        ratios: dict[str, list[float]] = {name: [] for name in CONFIGURATIONS}
        for _ in range(args.rounds):
            this_round: dict[str, float] = {}
            for configuration in CONFIGURATIONS:
                server = subprocess.Popen(
                    [sys.executable, __file__, "--serve", configuration, "--tokens", str(tokens)],
                    stdout=subprocess.PIPE,
                    text=True,
                    env={**os.environ, "PYTHONPATH": str(REPO)},
                )
                try:
                    assert server.stdout is not None
                    port = int(server.stdout.readline())
                    this_round[configuration] = asyncio.run(_load(port, args.calls, args.concurrency))
                finally:
                    server.terminate()
                    server.wait(10)
            for configuration, rate in this_round.items():
                rates[configuration].append(rate)
                ratios[configuration].append(rate / this_round["bare"])
    for configuration in CONFIGURATIONS:
        values, relative = rates[configuration], ratios[configuration]
        print(
            f"{configuration:>14}: {statistics.median(values):7.0f} calls/s (min {min(values):.0f}, max"
            f" {max(values):.0f}); ratio to bare: median {statistics.median(relative):.2f}"
            f" (min {min(relative):.2f}, max {max(relative):.2f})"
        )


if __name__ == "__main__":
    main()
