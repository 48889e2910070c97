"""Loopback ports for a service a test starts on a number it must know before the service runs.

A port taken by binding port 0 comes from the kernel's ephemeral range, the range every
outgoing connection of the host also draws its local port from: between the ask and the
service's own bind, a client connection of a parallel test may be handed the same number (the
service then fails with "address already in use"). These ports are drawn at random from below
that range instead, each checked free by a bind, so only another chooser drawing the same
number of ~12,000 at the same moment can collide. A process is never handed the same port
twice (a test that asks again while the ports it has are not bound yet gets others).
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

#: Lowest port handed out (above the registered services a host usually runs).
LOWEST_PORT = 20000
_DRAWS = random.SystemRandom()
#: Ports this process was handed.
_HANDED: set[int] = set()


def _ephemeral_start() -> int:
    """The first port of the kernel's ephemeral range (Linux; 32768 elsewhere)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_ports(count: int) -> list[int]:
    """``count`` distinct loopback ports nothing listens on now, below the ephemeral range."""
    high = max(_ephemeral_start(), LOWEST_PORT + 1000)
    if len(_HANDED) + count > (high - LOWEST_PORT) // 2:
        _HANDED.clear()  # a long-lived process: start the round again
    chosen: list[int] = []
    while len(chosen) < count:
        port = _DRAWS.randrange(LOWEST_PORT, high)
        if port in _HANDED:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        chosen.append(port)
        _HANDED.add(port)
    return chosen


def free_port() -> int:
    """One port as :func:`free_ports` gives them."""
    return free_ports(1)[0]
