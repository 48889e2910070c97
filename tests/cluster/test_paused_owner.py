"""Fencing acceptance (issue 23, docs/cluster.md §3.1): an owner stopped between a batch's write and
its fsync, past its lease's TTL, acknowledges nothing once resumed; the writer that took its
shard meanwhile answers the retried request once; every acknowledged record is in the session
once and the session verifies (the round: tests/cluster/paused_owner.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.cluster.etcd import EtcdCluster
from tests.cluster.paused_owner import MARKER, paused_owner_round


@pytest.mark.parametrize("round_number", [1, 2])
def test_a_paused_owner_acknowledges_nothing_after_its_deadline(
    etcd1: EtcdCluster, tmp_path: Path, round_number: int
):
    """The resumed owner answers UNAVAILABLE NOT_OWNER naming its epoch (the record may have
    landed); the retry at the new owner is answered with the seq the record landed at; the
    records acknowledged before, after the takeover and after the retry are each there once."""
    result = asyncio.run(paused_owner_round(etcd1.endpoints, tmp_path, f"paused-{round_number}"))
    assert result.old_owner_answer == "UNAVAILABLE", result
    assert result.not_owner_epoch != "", result
    assert result.marked_seq == 3, result
    assert result.retry_seq == result.marked_seq, result
    assert set(result.acknowledged) == {"before 1", "before 2", "after takeover", MARKER, "last"}
    assert not result.lost, result
    assert not result.duplicated, result
    assert not result.misplaced, result
    assert result.verifies, result.findings
    assert result.sound
