"""The LedgerSaver's own work per step, this checkout beside a baseline, in one run.

    .venv/bin/python bench/langgraph_saver_only.py --baseline CHECKOUT [--history 10,1000]
                                                   [--steps 300] [--rounds 9] [--message-bytes 1000]

A step is what bench/langgraph.py times (``put_writes`` of one new message, then ``put`` of the
next checkpoint, the messages list one longer), sent by the saver's coroutines on one event loop
(no blocking client, no thread hop) to the stand-in session of bench/langgraph_step.py, which
encodes each request as the client would and sends nothing: the saver's Python, the serializer
and the request's encoding, nothing of the network or the writer. Two savers, this checkout's
and ``CHECKOUT``'s (``CHECKOUT/rollout_client/langgraph.py``, over this checkout's client), each
with a thread seeded with ``--history`` messages, take ``--steps`` steps in turn, ``--rounds``
times (which goes first alternates). A step's time is the CPU time of the loop's thread
(``time.thread_time``): what the machine's other work does to the wall clock is left out.
The garbage collector is off during a round (as in ``timeit``). Prints the fastest round of
each (microseconds of CPU per step) and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib.util
import sys
import time
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

# As in bench/langgraph.py: this folder must not hide the langgraph package.
BENCH = Path(__file__).resolve().parent
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != BENCH]

from langchain_core.messages import AIMessage, HumanMessage  # noqa: E402

import rollout_client.langgraph as this_saver  # noqa: E402
from rollout_client import AsyncRolloutClient  # noqa: E402


def module_at(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


step_parts = module_at("langgraph_step", BENCH / "langgraph_step.py")


class Stepping:
    """A thread of one saver module's LedgerSaver over a stand-in session."""

    def __init__(self, module: ModuleType, client: AsyncRolloutClient, history: int, size: int) -> None:
        self.saver = module.LedgerSaver(client)
        self.saver._threads["t"] = module._Thread(step_parts.StandInSession(), next_seq=1)
        self.messages = step_parts.history(history, size, "t")
        self.size = size
        self.version = self.saver.get_next_version(None, None)
        self.config: Any = None
        self.step_no = 0

    async def seed(self) -> None:
        self.config = await self.saver.aput(
            {"configurable": {"thread_id": "t", "checkpoint_ns": ""}},
            step_parts.checkpoint(self.messages, self.version),
            {"source": "input", "step": -1},
            {"messages": self.version},
        )

    async def steps(self, count: int) -> float:
        """CPU microseconds per step over ``count`` steps (the time in put_writes and put only)."""
        spent = 0.0
        for _ in range(count):
            new = (AIMessage if len(self.messages) % 2 else HumanMessage)(
                "x" * self.size, id=f"t-step-{self.step_no}"
            )
            grown = [*self.messages, new]
            version = self.saver.get_next_version(self.version, None)
            checkpoint = step_parts.checkpoint(grown, version)
            task_id = str(uuid.uuid4())
            started = time.thread_time()
            await self.saver.aput_writes(self.config, [("messages", [new])], task_id)
            self.config = await self.saver.aput(
                self.config, checkpoint, {"source": "loop", "step": self.step_no}, {"messages": version}
            )
            spent += time.thread_time() - started
            self.messages, self.version, self.step_no = grown, version, self.step_no + 1
        return spent / count * 1e6


async def compare(baseline: ModuleType, history: int, args: Any) -> tuple[float, float]:
    client = AsyncRolloutClient("127.0.0.1:1", "127.0.0.1:1")  # never called: the session is a stand-in
    savers = {"this": Stepping(this_saver, client, history, args.message_bytes)}
    savers["base"] = Stepping(baseline, client, history, args.message_bytes)
    for stepping in savers.values():
        await stepping.seed()
    best = {name: float("inf") for name in savers}
    for round_no in range(args.rounds):
        for name in list(savers) if round_no % 2 else list(savers)[::-1]:
            gc.collect()
            gc.disable()  # as timeit: a collection's cost falls on whichever step triggers it
            try:
                best[name] = min(best[name], await savers[name].steps(args.steps))
            finally:
                gc.enable()
    return best["this"], best["base"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, required=True)
    parser.add_argument("--history", default="10,1000")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--message-bytes", type=int, default=1000)
    args = parser.parse_args()
    print("command:", " ".join([".venv/bin/python", *sys.argv]))
    baseline = module_at("baseline_langgraph", args.baseline / "rollout_client" / "langgraph.py")
    print(f"{'history':>8} {'this CPU us/step':>17} {'base CPU us/step':>17} {'this / base':>12}")
    for history in (int(length) for length in args.history.split(",")):
        this, base = asyncio.run(compare(baseline, history, args))
        print(f"{history:>8} {this:>17.1f} {base:>17.1f} {this / base:>12.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
