"""The crash harness at CI size: 30 kill -9 points, no acknowledged record lost (docs/spec.md §2.10)."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from tests.conftest import REPO

_spec = importlib.util.spec_from_file_location("crash_harness", REPO / "scripts" / "crash_harness.py")
assert _spec is not None
assert _spec.loader is not None
crash_harness = importlib.util.module_from_spec(_spec)
sys.modules["crash_harness"] = crash_harness
_spec.loader.exec_module(crash_harness)


# 30 writer restarts: 133 s measured with other jobs loading both cores (the suite's per-test
# limit of 300 s is meant for a test of ordinary size).
@pytest.mark.timeout(1200)
def test_thirty_kill_points_lose_no_acknowledged_record(data_dir) -> None:
    """kill -9 at 30 random moments (some during Stop, some during deletes): every acknowledged
    record survives exactly once, every deleted session is whole or gone (gone once acknowledged)."""
    report = crash_harness.run_harness(data_dir, kills=30, clients=3, seed=7)
    assert report.acked_records > 100, "the clients got work acknowledged between kills"
    assert report.stops > 0, "some kills had Stop/Resume rounds around them"
    assert report.deletes > 0, "the deleting client got deletes acknowledged between kills"
    assert report.violations == []
