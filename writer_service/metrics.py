"""Prometheus metrics of the writer (exported by ``rollout serve-writer --metrics-port``).

* ``rollout_appended_records_total``: records made durable.
* ``rollout_batch_records``: records per group-commit batch.
* ``rollout_round_sessions``: sessions made durable together per durability round.
* ``rollout_flush_seconds``: write + sync time per durability round (slow ones are also logged).
* ``rollout_write_errors_total``: failed batches (write or fsync errors).
* ``rollout_storage_healthy``: 1 after a good batch, 0 after a failed one.
* ``rollout_append_seconds``: per request, from being queued to being durable (queue + write
  + sync: an acknowledgement follows within an event-loop turn).
* ``rollout_queued_records``: records queued and not yet taken into a round (queue depth).
* ``rollout_open_sessions``: session files the writer holds open; ``rollout_sessions``: sessions
  in its index.

Per-RPC counts, latencies and status codes (``grpc_server_*``) are shared.rpc_observer's.
* ``rollout_repair_failures_total``: torn-tail repairs (or reads of a session file) that failed.
* ``rollout_sessions_awaiting_repair``: sessions refused until their repair succeeds.
* ``rollout_deleted_sessions_total{cause}``: sessions deleted, by cause: ``request``
  (DeleteSession) or ``retention`` (``--retain-stopped-days``; writer_service.retention).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, Protocol

from prometheus_client import Counter, Gauge, Histogram

APPENDED_RECORDS = Counter("rollout_appended_records", "Records made durable by the writer.")
BATCH_RECORDS = Histogram(
    "rollout_batch_records",
    "Records per group-commit batch.",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 512),
)
ROUND_SESSIONS = Histogram(
    "rollout_round_sessions",
    "Sessions made durable together by one durability round.",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 1024),
)
FLUSH_SECONDS = Histogram(
    "rollout_flush_seconds",
    "Seconds to write and sync one durability round.",
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1.0),
)
WRITE_ERRORS = Counter("rollout_write_errors", "Durability rounds whose write or sync failed.")
STORAGE_HEALTHY = Gauge("rollout_storage_healthy", "1 when the last batch was written, 0 after a failure.")
STORAGE_HEALTHY.set(1)
APPEND_SECONDS = Histogram(
    "rollout_append_seconds",
    "Seconds from an append request being queued to its records being durable (queue + write + sync).",
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)
QUEUED_RECORDS = Gauge("rollout_queued_records", "Records queued for the writer's next durability rounds.")
OPEN_SESSIONS = Gauge("rollout_open_sessions", "Session files the writer holds open.")
SESSIONS = Gauge("rollout_sessions", "Sessions in the writer's index.")


class _Queue(Protocol):
    @property
    def queued_records(self) -> int: ...


def _weakly(target: Any, read: Callable[[Any], int]) -> Callable[[], float]:
    """A gauge function reading ``target`` without keeping it alive (0 once it is gone)."""
    reference = weakref.ref(target)

    def value() -> float:
        current = reference()
        return float(read(current)) if current is not None else 0.0

    return value


def watch_queue(committer: _Queue) -> None:
    """Export the queue depth of the process's group committer."""
    QUEUED_RECORDS.set_function(_weakly(committer, lambda c: c.queued_records))


def watch_sessions(ledger: Any) -> None:
    """Export the open sessions and the index size of the process's ledger."""
    OPEN_SESSIONS.set_function(_weakly(ledger, lambda current: current.open_sessions))
    SESSIONS.set_function(_weakly(ledger, lambda current: len(current.index)))


REPAIR_FAILURES = Counter(
    "rollout_repair_failures", "Torn-tail repairs or session file reads that failed (retried later)."
)
SESSIONS_AWAITING_REPAIR = Gauge(
    "rollout_sessions_awaiting_repair", "Sessions refused (UNAVAILABLE) until their file is repaired."
)
DELETED_SESSIONS = Counter(
    "rollout_deleted_sessions", "Sessions deleted, by cause (request, retention).", labelnames=["cause"]
)
