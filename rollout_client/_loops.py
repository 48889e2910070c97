"""Values kept per event loop: a client's channels and a session's append lock.

grpc.aio channels and asyncio locks belong to the event loop they are first used on, while one
client or session object may be used from several loops (``asyncio.run`` per call, threads each
running a loop of their own). :class:`PerLoop` holds one value per loop, made on first use
there; a loop that has closed drops its value (nothing can run on it again).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class PerLoop(Generic[T]):
    """One value per event loop, made by ``make()`` on first use in the running loop.

    Safe to use from several threads, each with its own loop: a loop's value is made and read in
    that loop's thread only, and the table is changed by single dict operations.
    """

    def __init__(self, make: Callable[[], T]) -> None:
        self._make = make
        self._values: dict[asyncio.AbstractEventLoop, T] = {}

    def get(self) -> T:
        """The running loop's value (made now if it has none). RuntimeError outside a running loop."""
        loop = asyncio.get_running_loop()
        value = self._values.get(loop)
        if value is None:
            self.drop_closed()
            value = self._values[loop] = self._make()
        return value

    def current(self) -> T | None:
        """The running loop's value if it has one (None outside a running loop too); makes none."""
        try:
            return self._values.get(asyncio.get_running_loop())
        except RuntimeError:
            return None

    def values(self) -> list[T]:
        """Every loop's value, closed loops' dropped first."""
        self.drop_closed()
        return list(self._values.values())

    def drop_closed(self) -> list[T]:
        """Forget the values of loops that have closed; returns them."""
        closed = [loop for loop in list(self._values) if loop.is_closed()]
        return [value for loop in closed if (value := self._values.pop(loop, None)) is not None]

    def take_all(self) -> list[tuple[asyncio.AbstractEventLoop, T]]:
        """Every (loop, value), forgotten here (the next :meth:`get` makes a new value)."""
        taken: list[tuple[asyncio.AbstractEventLoop, T]] = []
        for loop in list(self._values):
            value = self._values.pop(loop, None)
            if value is not None:
                taken.append((loop, value))
        return taken
