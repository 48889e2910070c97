"""What the servers' interceptors cost a unary call: serving.server's RpcObserver (always on:
metrics and refusal logs) and AuthInterceptor (with --auth-tokens), against a bare grpc.aio
server, each answering a no-op unary method.

Each configuration runs as its own server process; the client (this process) keeps
``--concurrency`` calls in flight for ``--calls`` calls, configurations interleaved over
``--rounds`` rounds. Prints, per configuration, the server's CPU time per call (from
/proc/<pid>/stat: what the interceptors add, little moved by other work on the machine) and
calls/s (wall clock: moved by everything else running), each as a median with its spread over
the rounds, and its ratio to the bare server of the same round. First, the interceptors'
own Python time per call, in-process, against awaiting the handler directly (``--direct``
calls, 5 runs).

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
    from serving.auth import TokenTable
    from serving.server import ServerSettings

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


class _Context:
    """Stands in for a servicer context: what the interceptors ask of one, answered at once."""

    def peer(self) -> str:
        return "ipv4:127.0.0.1:50000"

    def code(self) -> None:
        return None

    def details(self) -> str:
        return ""

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {TOKEN}"), ("user-agent", "grpc-python"))


async def _direct(tokens: Path, calls: int) -> dict[str, list[float]]:
    """Microseconds per call of each interceptor's intercept() around a no-op handler, 5 runs."""
    sys.path.insert(0, str(REPO))
    from serving.auth import AuthInterceptor, TokenTable
    from serving.rpc_observer import RpcObserver

    async def noop(request: bytes, context: object) -> bytes:
        return b""

    observer, auth = RpcObserver("bench"), AuthInterceptor(TokenTable(tokens), certificates=False)
    context = _Context()
    ways = {
        "handler alone": noop,
        "observer": lambda request, context: observer.intercept(noop, request, context, METHOD),
        "token check": lambda request, context: auth.intercept(noop, request, context, METHOD),
    }
    timings: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(5):
        for name, way in ways.items():
            started = time.perf_counter()
            for _ in range(calls):
                await way(b"", context)
            timings[name].append((time.perf_counter() - started) / calls)
    return timings


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far (seconds)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _spread(values: list[float], scale: float = 1.0, digits: int = 0) -> str:
    return (
        f"{statistics.median(values) * scale:.{digits}f} ({min(values) * scale:.{digits}f}-"
        f"{max(values) * scale:.{digits}f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--direct", type=int, default=50_000)
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
        print("in-process, us per call: median (min-max) of 5 runs")
        for name, values in asyncio.run(_direct(tokens, args.direct)).items():
            print(f"{name:>14}: {_spread(values, 1e6, 2)}")
        rates: dict[str, list[float]] = {name: [] for name in CONFIGURATIONS}
        ratios: dict[str, list[float]] = {name: [] for name in CONFIGURATIONS}
        cpu: dict[str, list[float]] = {name: [] for name in CONFIGURATIONS}
        cpu_ratios: dict[str, list[float]] = {name: [] for name in CONFIGURATIONS}
        for _ in range(args.rounds):
            this_round: dict[str, float] = {}
            this_cpu: dict[str, float] = {}
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
                    asyncio.run(_load(port, min(args.calls, 500), args.concurrency))  # warm-up
                    before = _cpu_seconds(server.pid)
                    this_round[configuration] = asyncio.run(_load(port, args.calls, args.concurrency))
                    this_cpu[configuration] = (_cpu_seconds(server.pid) - before) / args.calls
                finally:
                    server.terminate()
                    server.wait(10)
            for configuration, rate in this_round.items():
                rates[configuration].append(rate)
                ratios[configuration].append(rate / this_round["bare"])
                cpu[configuration].append(this_cpu[configuration])
                cpu_ratios[configuration].append(this_cpu[configuration] / this_cpu["bare"])
    print("median (min-max) over the rounds; ratios to the bare server of the same round")
    for configuration in CONFIGURATIONS:
        print(
            f"{configuration:>14}: server CPU {_spread(cpu[configuration], 1e6)} us/call,"
            f" ratio {_spread(cpu_ratios[configuration], digits=2)};"
            f" {_spread(rates[configuration])} calls/s, ratio {_spread(ratios[configuration], digits=2)}"
        )


if __name__ == "__main__":
    main()
