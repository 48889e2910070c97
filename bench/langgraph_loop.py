"""LedgerSaver under LangGraph's own loop: a chat graph's turns, this checkout beside a baseline.

    .venv/bin/python bench/langgraph_loop.py --baseline CHECKOUT [--turns 20] [--rounds 5]
                                             [--durability sync,async]

Starts a writer and a reader (subprocesses, a temporary data root) and compiles the chat graph
of the saver's tests (tests/client/langgraph_chat.py: ``add_messages`` state, an agent node
that calls an ``add`` tool, LangGraph's ``ToolNode``; no model) twice over one blocking
``RolloutClient``: with this checkout's ``LedgerSaver`` and with the one of ``CHECKOUT``
(``CHECKOUT/rollout_client/langgraph.py``, e.g. a worktree of main, over this checkout's
client). A turn is one ``graph.invoke`` of a user message: four checkpoints and their writes,
sent by LangGraph's loop as it sends them (``put_writes`` and ``put`` in the background, the
next step waiting for the checkpoint with ``durability="sync"``, not waiting with ``"async"``).
Each round, for each durability mode, each saver runs ``--turns`` turns on a new thread, the
two savers taking turns one turn at a time (the load falls on both alike). Figures, medians
over the rounds of each round's median: ms per turn, the Append requests per turn (counted at
the client's session), and this checkout's turn time over the baseline's.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

# As in bench/langgraph.py: this folder must not hide the langgraph package.
BENCH = Path(__file__).resolve().parent
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != BENCH]
sys.path.append(str(BENCH.parent))  # the chat graph of the tests

from langchain_core.messages import HumanMessage  # noqa: E402

from rollout_client import RetryPolicy, RolloutClient  # noqa: E402
from rollout_client._session import AsyncSession  # noqa: E402
from rollout_client.langgraph import LedgerSaver  # noqa: E402
from tests.client.langgraph_chat import build  # noqa: E402

sys.path.append(str(BENCH))
from _support import start_service  # noqa: E402


def baseline_saver(checkout: Path) -> type[LedgerSaver]:
    """The LedgerSaver class of another checkout (see bench/langgraph.py)."""
    spec = importlib.util.spec_from_file_location(
        "baseline_langgraph", checkout / "rollout_client" / "langgraph.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.LedgerSaver  # type: ignore[no-any-return]


#: Append requests per session id, counted at every AsyncSession.append.
REQUESTS: Counter[str] = Counter()


def count_requests() -> None:
    sent = AsyncSession.append

    async def counted(self: AsyncSession, *records: Any, **options: Any) -> Any:
        REQUESTS[self.id] += 1
        return await sent(self, *records, **options)

    AsyncSession.append = counted  # type: ignore[method-assign]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, required=True)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--durability", default="sync,async")
    args = parser.parse_args()
    print("command:", " ".join([".venv/bin/python", *sys.argv]))
    modes = args.durability.split(",")
    count_requests()
    names = ("this", "base")
    turn_ms: dict[tuple[str, str], list[float]] = {}
    per_turn: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        data = scratch / "data"
        data.mkdir()
        writer = start_service("writer", data, scratch / "writer.log")
        reader = start_service("reader", data, scratch / "reader.log")
        try:
            with RolloutClient(writer.address, reader.address, retry=RetryPolicy(deadline=120.0)) as client:
                graphs = {
                    "this": build(LedgerSaver(client)),
                    "base": build(baseline_saver(args.baseline)(client)),
                }
                for round_no in range(args.rounds):
                    for mode in modes:
                        spent: dict[str, list[float]] = {name: [] for name in names}
                        threads = {name: f"r{round_no}-{mode}-{name}" for name in names}
                        order = names if round_no % 2 == 0 else names[::-1]
                        for turn in range(args.turns):
                            for name in order:
                                config = {"configurable": {"thread_id": threads[name]}}
                                started = time.perf_counter()
                                graphs[name].invoke(
                                    {"messages": [HumanMessage(f"{turn}+1")]}, config, durability=mode
                                )
                                spent[name].append(time.perf_counter() - started)
                        for name in names:
                            session_id, _ = client.resolve_session(threads[name])
                            turn_ms.setdefault((mode, name), []).append(statistics.median(spent[name]) * 1000)
                            per_turn.setdefault((mode, name), []).append(REQUESTS[session_id] / args.turns)
        finally:
            writer.stop()
            reader.stop()
    print(f"{args.turns} turns per saver and mode, {args.rounds} rounds (medians of the rounds' medians)")
    print(f"{'durability':>10} {'saver':6} {'ms/turn':>9} {'requests/turn':>14}")
    for mode in modes:
        for name in names:
            print(
                f"{mode:>10} {name:6} {statistics.median(turn_ms[(mode, name)]):>9.2f}"
                f" {statistics.median(per_turn[(mode, name)]):>14.1f}"
            )
    for mode in modes:
        ratios = [
            this / base for this, base in zip(turn_ms[(mode, "this")], turn_ms[(mode, "base")], strict=True)
        ]
        print(
            f"{mode:>10}: ms/turn this / base {statistics.median(ratios):.3f}"
            f" (rounds: {' '.join(f'{ratio:.2f}' for ratio in ratios)})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
