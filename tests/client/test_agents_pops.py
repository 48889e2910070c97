"""LedgerSession pops are atomic in one process and across processes, never take an item added
after the one they return, and a cancelled mutation finishes before its cancellation is raised."""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import sys
import threading
from typing import Any

import pytest

from rollout_client import RolloutClient, agents
from rollout_client.agents import LedgerSession
from tests.client.conftest import TEST_RETRY
from tests.conftest import REPO
from tests.processes import launch

POPS = 40


def _items(prefix: str, count: int) -> list[dict]:
    return [{"role": "user", "content": f"{prefix} {index}"} for index in range(count)]


def test_forty_concurrent_pops_of_one_object_return_forty_distinct_items(client) -> None:
    """40 pops at once on one LedgerSession: 40 different items, then empty, and the 41st is None."""
    ledger = LedgerSession("pops-one-object", client=client)

    async def run() -> tuple[list, list, object]:
        await ledger.add_items(_items("item", POPS))
        popped = await asyncio.gather(*(ledger.pop_item() for _ in range(POPS)))
        return popped, await ledger.get_items(), await ledger.pop_item()

    popped, left, last = asyncio.run(run())
    assert sorted(item["content"] for item in popped) == sorted(
        item["content"] for item in _items("item", POPS)
    )
    assert (left, last) == ([], None)


def test_forty_concurrent_pops_of_forty_objects_return_forty_distinct_items(client) -> None:
    """Each pop through its own LedgerSession (no shared lock): the writer's compare-and-swap decides."""

    async def run() -> tuple[list, list]:
        await LedgerSession("pops-many-objects", client=client).add_items(_items("item", POPS))
        popped = await asyncio.gather(
            *(LedgerSession("pops-many-objects", client=client).pop_item() for _ in range(POPS))
        )
        return popped, await LedgerSession("pops-many-objects", client=client).get_items()

    popped, left = asyncio.run(run())
    assert sorted(item["content"] for item in popped) == sorted(
        item["content"] for item in _items("item", POPS)
    )
    assert left == []


_POPPER = """
import asyncio, json, sys
from rollout_client import RolloutClient
from rollout_client.agents import LedgerSession
with RolloutClient(sys.argv[1], sys.argv[2]) as client:
    async def run():
        sessions = [LedgerSession(sys.argv[3], client=client) for _ in range(int(sys.argv[4]))]
        return await asyncio.gather(*(session.pop_item() for session in sessions))
    print(json.dumps(asyncio.run(run())))
"""


def test_pops_split_over_two_processes_never_return_the_same_item(
    client, writer_process, reader_process
) -> None:
    """Two processes pop 20 each at the same time: 40 distinct items between them, nothing left."""
    asyncio.run(LedgerSession("pops-two-processes", client=client).add_items(_items("item", POPS)))
    command = [
        sys.executable,
        "-c",
        _POPPER,
        writer_process.address,
        reader_process.address,
        "pops-two-processes",
    ]
    workers = [
        launch([*command, str(POPS // 2)], stdout=subprocess.PIPE, text=True, cwd=REPO) for _ in range(2)
    ]
    popped = []
    for worker in workers:
        out, _ = worker.communicate(timeout=240)
        assert worker.returncode == 0
        popped.extend(json.loads(out))
    assert sorted(item["content"] for item in popped) == sorted(
        item["content"] for item in _items("item", POPS)
    )
    assert asyncio.run(LedgerSession("pops-two-processes", client=client).get_items()) == []


def test_pops_racing_adds_lose_nothing_and_take_nothing_twice(client) -> None:
    """Adds and pops from separate objects at once: every added item is popped once or still there."""
    added = _items("raced", 30)

    async def run() -> tuple[list, list]:
        adder = LedgerSession("pops-and-adds", client=client)
        await adder.add_items(added[:10])

        async def add_rest() -> None:
            for item in added[10:]:
                await adder.add_items([item])

        pops = [LedgerSession("pops-and-adds", client=client).pop_item() for _ in range(15)]
        results = await asyncio.gather(add_rest(), *pops)
        return [item for item in results[1:] if item is not None], await adder.get_items()

    popped, left = asyncio.run(run())
    contents = [item["content"] for item in popped] + [item["content"] for item in left]
    assert sorted(contents) == sorted(item["content"] for item in added)


def test_a_cancelled_add_finishes_before_the_cancellation_is_raised(writer_process, reader_process) -> None:
    """Cancelling add_items while it is in flight: CancelledError comes once the items are in the ledger."""

    async def run() -> list:
        with RolloutClient(writer_process.address, reader_process.address, retry=TEST_RETRY) as client:
            ledger = LedgerSession("cancelled-add", client=client)
            await ledger.add_items([{"role": "user", "content": "first"}])
            task = asyncio.ensure_future(ledger.add_items([{"role": "user", "content": "second"}]))
            await asyncio.sleep(0)  # the append is under way
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            return await ledger.get_items()

    assert asyncio.run(run()) == [{"role": "user", "content": "first"}, {"role": "user", "content": "second"}]


def test_one_object_popped_from_two_threads_never_returns_an_item_twice(client, monkeypatch) -> None:
    """One LedgerSession popped at once from two threads, a loop each (their locks are per loop; the
    kept tail is shared): when one thread's pop lands between the other's choice of an item and
    its request, that request is refused by the next seq its item was chosen at, and the pop
    chooses again, never retracting the same message twice. The interleaving is forced: the
    second thread to choose waits, before sending, until the first thread's pop has returned."""
    ledger = LedgerSession("pops-two-threads", client=client)
    asyncio.run(ledger.add_items(_items("item", 5)))
    first = asyncio.run(ledger.pop_item())  # the object now keeps the tail both threads share
    chosen = threading.Barrier(2)
    landed = threading.Event()
    calls = itertools.count()
    real_retraction = agents.Retraction

    def retraction_after_the_other_pop(*args: Any, **kwargs: Any) -> Any:
        if next(calls) < 2 and chosen.wait(timeout=120) != 0:  # both threads have chosen an item
            landed.wait(timeout=120)
        return real_retraction(*args, **kwargs)

    monkeypatch.setattr(agents, "Retraction", retraction_after_the_other_pop)
    popped: list[Any] = []

    def pop() -> None:
        popped.append(asyncio.run(ledger.pop_item()))
        landed.set()

    threads = [threading.Thread(target=pop) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=240)
    assert [first["content"]] == ["item 4"]
    assert sorted(item["content"] for item in popped) == ["item 2", "item 3"]
    assert asyncio.run(ledger.get_items()) == _items("item", 2)


def test_adds_pops_and_clears_cancelled_at_random_points_leave_a_known_history(
    writer_process, reader_process
) -> None:
    """120 adds, pops and clears of one object, each cancelled after a random number of event-loop
    steps (or left to finish), each followed by a read: a finished call is in the history; a
    cancelled one is there whole or not at all once its CancelledError is raised, and nothing
    lands after it (every later read agrees with what the earlier ones showed); a pop returns the
    last item; a fresh object reads the same history."""
    import random

    draw = random.Random(22)

    async def step(call: Any) -> tuple[bool, Any]:
        task = asyncio.ensure_future(call)
        for _ in range(draw.randrange(0, 60)):
            await asyncio.sleep(0)
        cancelled = draw.random() < 0.7 and task.cancel()
        try:
            return False, await task
        except asyncio.CancelledError:
            assert cancelled
            return True, None

    async def run(client: RolloutClient) -> tuple[list[Any], list[Any], dict[str, int]]:
        ledger = LedgerSession("cancelled-at-random", client=client)
        held: list[Any] = []
        counts: dict[str, int] = {}
        for number in range(120):
            kind = draw.choice(["add", "add", "pop", "pop", "clear"] if number % 20 == 19 else ["add", "pop"])
            if kind == "add":
                items = _items(f"item {number}", draw.randint(1, 3))
                cancelled, _ = await step(ledger.add_items(items))
                after = await ledger.get_items()
                landed = after == held + items
                assert landed or (cancelled and after == held)
                held = after
            elif kind == "pop":
                cancelled, popped = await step(ledger.pop_item())
                after = await ledger.get_items()
                landed = bool(held) and after == held[:-1]
                assert landed or after == held
                if not cancelled:
                    assert popped == (held[-1] if held else None)
                    assert landed or not held
                held = after
            else:
                cancelled, _ = await step(ledger.clear_session())
                after = await ledger.get_items()
                landed = after == []
                assert landed or (cancelled and after == held)
                held = after
            key = f"{kind} {'cancelled' if cancelled else 'finished'} {'landed' if landed else 'not written'}"
            counts[key] = counts.get(key, 0) + 1
        return held, await LedgerSession("cancelled-at-random", client=client).get_items(), counts

    with RolloutClient(writer_process.address, reader_process.address, retry=TEST_RETRY) as client:
        held, fresh, counts = asyncio.run(run(client))
    assert fresh == held
    assert counts.get("add cancelled landed", 0) > 0  # cancellations met calls under way
