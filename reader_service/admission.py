"""Admission of heavy reads within a memory budget (docs/spec.md §5: heavy calls are admitted within a
memory budget so that cheap calls keep their latency).

A heavy call (a replay, a memory view, a verification) states what it may hold
at its peak, in bytes (:func:`unary_reply_cost`, :func:`bounded_read_cost`), and
waits in line until that much of the budget is free; calls are admitted in
arrival order, so a big one is never passed over forever by small ones. A call
that costs more than the whole budget is admitted alone, once nothing else
holds any of it. Waiting holds no thread: the I/O threads stay free for cheap
calls (stop facts, a listing page), which run on a pool of their own and are
never queued here. A unary call returns its charge when the RPC is done (the
reply sent), not when the handler returns, because gRPC still holds the reply
bytes until then.
"""

from __future__ import annotations

import asyncio
from collections import deque

#: What a message costs beside its bytes while a rendered reply is built (objects, list slots).
_BUILD_FACTOR = 3
#: Bytes a bounded-memory read holds per byte of file: its per-message offsets (shared.rebuild_index).
_HANDLES_PER_FILE_BYTE = 8


def unary_reply_cost(file_bytes: int, max_reply_bytes: int) -> int:
    """Peak bytes of a unary replay or memory view of a file of ``file_bytes``: the rendered
    messages, their join into one reply, and gRPC's copy of it while it is sent (a reply
    never exceeds ``max_reply_bytes``, and holds about the file's message bytes)."""
    return _BUILD_FACTOR * min(file_bytes, max_reply_bytes)


def bounded_read_cost(file_bytes: int, chunk_bytes: int) -> int:
    """Peak bytes of a streamed replay or a verification: offsets per message plus two chunks."""
    return file_bytes // _HANDLES_PER_FILE_BYTE + 2 * chunk_bytes


class ReadBudget:
    """A byte budget shared by heavy calls, granted in arrival order (one event loop only)."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self._free = budget_bytes
        self._waiting: deque[tuple[int, asyncio.Future[None]]] = deque()

    @property
    def free_bytes(self) -> int:
        return self._free

    @property
    def waiting(self) -> int:
        """Calls waiting for admission now."""
        return len(self._waiting)

    async def acquire(self, cost: int) -> int:
        """Wait until ``cost`` bytes (at most the whole budget) are free, take them; returns the charge.

        Cancelling the wait (the client went away) leaves the budget as it was.
        """
        charge = min(max(cost, 0), self.budget_bytes)
        if not self._waiting and self._free >= charge:
            self._free -= charge
            return charge
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((charge, granted))
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():
                self.release(charge)  # granted just as the caller gave up
            else:
                self._waiting.remove((charge, granted))
                self._grant()
            raise
        return charge

    def release(self, charge: int) -> None:
        """Give back what :meth:`acquire` returned, and admit whoever now fits, in order."""
        self._free += charge
        self._grant()

    def _grant(self) -> None:
        while self._waiting:
            charge, granted = self._waiting[0]
            if self._free < charge:
                return
            self._waiting.popleft()
            self._free -= charge
            granted.set_result(None)
