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


def test_a_default_worker_whose_process_is_gone_loses_its_lease_at_once(tmp_path):
    """A worker of the default id ``<host>:<pid>`` killed and run again (a new pid): the lease of
    the dead pid on this host is taken at once; one of a live process, or of another host, is not."""
    import os
    import socket

    clock = Clock()
    dead = f"{socket.gethostname()}:{_pid_of_exited()}"
    assert acquire(tmp_path, "dead", dead, 600, clock) is not None
    assert acquire(tmp_path, "dead", f"{socket.gethostname()}:{os.getpid()}-new", 600, clock) is not None
    alive = f"{socket.gethostname()}:{os.getpid()}"
    assert acquire(tmp_path, "alive", alive, 600, clock) is not None
    assert acquire(tmp_path, "alive", "other-worker", 600, clock) is None
    elsewhere = f"another-host-{socket.gethostname()}:1"
    assert acquire(tmp_path, "elsewhere", elsewhere, 600, clock) is not None
    assert acquire(tmp_path, "elsewhere", "other-worker", 600, clock) is None


def _pid_of_exited() -> int:
    """The pid of a process that has exited and been reaped."""
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid
