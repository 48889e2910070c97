"""Prometheus metrics of the writer (exported by ``rollout serve-writer --metrics-port``).

* ``rollout_appended_records_total``: records made durable.
* ``rollout_batch_records``: records per group-commit batch.
* ``rollout_round_sessions``: sessions made durable together per durability round.
* ``rollout_flush_seconds``: write + sync time per durability round (slow ones are also logged).
* ``rollout_write_errors_total``: failed batches (write or fsync errors).
* ``rollout_storage_healthy``: 1 after a good batch, 0 after a failed one.
* ``rollout_repair_failures_total``: torn-tail repairs (or reads of a session file) that failed.
* ``rollout_sessions_awaiting_repair``: sessions refused until their repair succeeds.
"""

from __future__ import annotations

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
REPAIR_FAILURES = Counter(
    "rollout_repair_failures", "Torn-tail repairs or session file reads that failed (retried later)."
)
SESSIONS_AWAITING_REPAIR = Gauge(
    "rollout_sessions_awaiting_repair", "Sessions refused (UNAVAILABLE) until their file is repaired."
)
