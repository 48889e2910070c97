"""rollout_memory.leases: one holder at a time, expiry, a restarted worker taking its lease back."""

from __future__ import annotations

from rollout_memory.leases import acquire, held, release


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_one_holder_at_a_time_until_release(tmp_path):
    """A held lease is refused to another worker, and free again once released."""
    clock = Clock()
    lease = acquire(tmp_path, "s", "w1", 60, clock)
    assert lease is not None
    assert held(lease)
    assert acquire(tmp_path, "s", "w2", 60, clock) is None
    release(lease)
    assert not held(lease)
    assert acquire(tmp_path, "s", "w2", 60, clock) is not None


def test_an_expired_lease_is_taken_over_and_its_old_holder_knows(tmp_path):
    """Past its time a lease goes to the next worker; the old holder's lease is no longer held and its release leaves the new one."""
    clock = Clock()
    old = acquire(tmp_path, "s", "w1", 60, clock)
    clock.now += 59
    assert acquire(tmp_path, "s", "w2", 60, clock) is None
    clock.now += 2
    new = acquire(tmp_path, "s", "w2", 60, clock)
    assert new is not None
    assert not held(old)
    release(old)
    assert held(new)


def test_a_worker_restarted_under_its_id_takes_its_lease_back(tmp_path):
    """A worker that died holding a lease gets it back at once when restarted with the same id."""
    clock = Clock()
    before = acquire(tmp_path, "s", "w1", 600, clock)
    after = acquire(tmp_path, "s", "w1", 600, clock)
    assert after is not None
    assert after.token != before.token
    assert acquire(tmp_path, "s", "w2", 600, clock) is None


def test_a_lease_file_being_written_counts_as_held(tmp_path):
    """An empty lease file (its creator has not written it yet) is held until its mtime plus the lease time."""
    (tmp_path / "s.lease").write_bytes(b"")
    assert acquire(tmp_path, "s", "w2", 600, Clock()) is None
