"""The reader's default memory and reply limits (bytes), defined once for its config and its CLI.

A light module on purpose: the ``rollout`` command line shows these defaults in its help
without loading the reader (gRPC servers, the rebuild) for every command.

* :data:`DEFAULT_MAX_REPLY_BYTES`: the largest unary reply (GetReplay, GetMemoryView); a
  larger answer is refused with RESOURCE_EXHAUSTED (ErrorInfo ``REPLY_TOO_LARGE``) and
  streams instead (docs/spec.md §5 Replay: "large sessions stream"). 64 MiB: gRPC holds the
  reader's event loop about 1 ms per MB while it sends one reply (bench/replay_memory.py).
* :data:`DEFAULT_REPLAY_CACHE_BYTES`: what the replay cache may hold (docs/spec.md §5 derived state).
* :data:`DEFAULT_READ_BUDGET_BYTES`: what heavy reads in flight may hold together.
"""

from __future__ import annotations

MiB = 1024 * 1024

DEFAULT_MAX_REPLY_BYTES = 64 * MiB
DEFAULT_REPLAY_CACHE_BYTES = 256 * MiB
DEFAULT_READ_BUDGET_BYTES = 512 * MiB
