"""Waiting on conditions (never on sleeps of fixed length), with generous limits."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

#: Seconds a condition may take before the test fails (generous: the suite runs under load).
LIMIT = 60.0


async def wait_until(
    condition: Callable[[], bool | Awaitable[bool]], what: str, limit: float = LIMIT
) -> None:
    """Poll ``condition`` (a function, or a coroutine function) every 20 ms until it is true;
    AssertionError naming ``what`` after ``limit`` seconds."""
    give_up = time.monotonic() + limit
    while True:
        result = condition()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if time.monotonic() > give_up:
            raise AssertionError(f"{what}: not within {limit:g} s")
        await asyncio.sleep(0.02)
