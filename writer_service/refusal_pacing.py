"""Pacing of a client that keeps naming sessions that do not exist (docs/spec.md §2.10).

An Append to an unknown id is refused from memory, yet every call still costs the
writer a gRPC round of its own (~0.3 ms of CPU on this machine kind, most of it in
gRPC itself). A client stuck in a loop of such calls (a stale id after a data
root was wiped, a hostile caller) would take that CPU from every other agent. So
each peer (one gRPC connection, ``context.peer()``) has a token bucket of
refusals: ``burst`` at once, then ``rate`` per second. Past it, a refusal is
answered late, by the time the bucket would hold a token again (never more than
``max_delay_s``): the refusal is the same NOT_FOUND, only slower, so a client in
a loop runs at ``rate`` calls per second and the event loop never waits (the
delay is an ``asyncio.sleep``). A client that names a few unknown ids now and then
never notices. ``rate`` 0 turns pacing off (``rollout serve-writer
--unknown-id-rate 0``).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

#: Refusals per second per peer once its burst is spent; 0: no pacing.
DEFAULT_RATE = 100.0
#: Refusals a peer may receive at once before pacing begins.
DEFAULT_BURST = 200
#: The longest one refusal is held back (seconds).
MAX_DELAY_S = 1.0
#: Peers tracked at once; the least recently refused are forgotten first.
MAX_PEERS = 4096


class RefusalPacer:
    """Token buckets of unknown-id refusals, one per peer (see the module docstring)."""

    def __init__(
        self,
        rate: float = DEFAULT_RATE,
        burst: int = DEFAULT_BURST,
        max_delay_s: float = MAX_DELAY_S,
        max_peers: int = MAX_PEERS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rate = rate
        self.burst = burst
        self.max_delay_s = max_delay_s
        self.max_peers = max_peers
        self._clock = clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # peer -> (tokens, when)

    def delay(self, peer: str) -> float:
        """Seconds to hold back this refusal to ``peer`` (0.0: answer now); takes one token.

        The bucket may go into debt (down to ``-rate * max_delay_s``), so a peer
        that keeps calling is answered at ``rate`` per second on average.
        """
        if self.rate <= 0:
            return 0.0
        now = self._clock()
        tokens, when = self._buckets.pop(peer, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - when) * self.rate) - 1.0
        floor = -self.rate * self.max_delay_s
        tokens = max(tokens, floor)
        self._buckets[peer] = (tokens, now)
        if len(self._buckets) > self.max_peers:
            self._buckets.popitem(last=False)
        return 0.0 if tokens >= 0 else min(self.max_delay_s, -tokens / self.rate)

    @property
    def peers(self) -> int:
        """Peers currently tracked (at most ``max_peers``)."""
        return len(self._buckets)
