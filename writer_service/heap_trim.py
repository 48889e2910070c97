"""Giving memory freed after large work back to the OS (docs/spec.md §2.10: bounded memory per request).

glibc keeps what a thread frees in that thread's malloc arena, for reuse: after a
60 MB request was received (gRPC's receive buffers are many slices, not one block),
or a 500 MB session rebuilt on an I/O thread, the writer's RSS would stay hundreds
of MB above idle although Python holds none of it. Two measures:

* :func:`keep_large_blocks_mapped` fixes glibc's mmap threshold at
  :data:`MMAP_THRESHOLD_BYTES` (``mallopt(M_MMAP_THRESHOLD)``). By default the
  threshold is dynamic: once a large block (a 20 MB request's bytes, its decoded
  string) is freed, glibc raises it to that size, so the next large blocks come from
  the arenas, among small blocks that live on; their pages then stay pinned, and no
  trim returns them. A fixed threshold keeps every block of 1 MiB or more in a
  mapping of its own, returned to the OS when freed (measured: 20 MB fields refused
  in CreateSession, Stop and Append left the writer 76-133 MiB above idle, then
  0-1 MiB; the cost is an ``mmap`` and its page faults per large block, small beside
  writing and syncing that many bytes).
* :class:`HeapTrimmer` calls glibc's ``malloc_trim(0)`` (every arena: free pages
  are returned with ``madvise``) once, shortly after large work, on an I/O thread,
  for what smaller blocks leave free. Work below :data:`LARGE_WORK_BYTES` never
  triggers it, so the append path pays nothing; a burst of large work is trimmed
  once (the calls coalesce).

Where the C library has neither (musl, macOS) nothing is done.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
from collections.abc import Callable
from concurrent.futures import Executor

log = logging.getLogger(__name__)

#: Work over this many bytes (a request, a session file rebuilt or forked) is followed by a trim.
LARGE_WORK_BYTES = 8 * 1024 * 1024
#: Seconds between the last large work of a burst and its trim: the buffers of the work are
#: freed by then, and a burst of large requests is trimmed once.
TRIM_DELAY_SECONDS = 0.2
#: Longest a trim is postponed by more large work arriving (seconds since the first).
TRIM_MAX_WAIT_SECONDS = 1.0
#: Blocks of this many bytes or more get a mapping of their own (see the module doc).
MMAP_THRESHOLD_BYTES = 1024 * 1024
#: mallopt's parameter number for the mmap threshold (glibc's malloc.h).
_M_MMAP_THRESHOLD = -3


def _find_malloc_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        trim = libc.malloc_trim
    except (OSError, AttributeError, TypeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


_malloc_trim = _find_malloc_trim()


def keep_large_blocks_mapped(threshold: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Fix the process's mmap threshold at ``threshold`` bytes (glibc ``mallopt``), so that every
    block that large is its own mapping, returned to the OS when freed; False where the C library
    cannot (no ``mallopt``, or it refused)."""
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c")).mallopt
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, threshold))


def trim_heap() -> bool:
    """Return the free memory of every malloc arena to the OS; False when the C library cannot."""
    if _malloc_trim is None:
        return False
    _malloc_trim(0)
    return True


class HeapTrimmer:
    """Schedules one :func:`trim_heap` on ``executor`` after large work (event loop only).

    The trim follows the *last* of a burst of large work by :data:`TRIM_DELAY_SECONDS`
    (each new piece of work postpones it), but never more than :data:`TRIM_MAX_WAIT_SECONDS`
    after the first: a steady stream of large requests is trimmed about once a second.
    """

    def __init__(self, executor: Executor) -> None:
        self._executor = executor
        self._first = 0.0  # loop time of the first large work since the last trim (0: none pending)
        self._last = 0.0  # loop time of the latest
        self.trims = 0

    def after(self, size: int) -> None:
        """Note work over ``size`` bytes just done (or about to be freed): a trim follows
        when ``size`` is at least :data:`LARGE_WORK_BYTES`."""
        if size < LARGE_WORK_BYTES or _malloc_trim is None:
            return
        loop = asyncio.get_running_loop()
        self._last = loop.time()
        if not self._first:
            self._first = self._last
            loop.call_later(TRIM_DELAY_SECONDS, self._due)

    def _due(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        wait = self._last + TRIM_DELAY_SECONDS - now
        if wait > 0 and now - self._first < TRIM_MAX_WAIT_SECONDS:
            loop.call_later(wait, self._due)
            return
        self._first = 0.0
        self.trims += 1
        try:
            self._executor.submit(trim_heap)
        except RuntimeError:  # the executor is shut down: the process is ending
            log.debug("heap trim skipped: the I/O threads are stopped")
