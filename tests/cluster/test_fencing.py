"""What a writer of a cluster answers the committer, from memory (writer_service.cluster_ownership):
the lease deadline fences writes and acknowledgements, and the share each writer aims at."""

from __future__ import annotations

import time
from dataclasses import dataclass

import pytest
from click.testing import CliRunner

from rollout_cli.main import cli
from writer_service.cluster_ownership import ClusterSettings, EtcdOwnership, shard_share
from writer_service.coordination import LeaseState


@dataclass
class StubLease:
    """The two things the answers read of a lease: its deadline and its state."""

    until: float
    state: LeaseState = LeaseState.ALIVE

    def deadline(self) -> float:
        return self.until


def ownership_holding(lease: StubLease, **shards: int) -> EtcdOwnership:
    """An ownership (never started) that holds ``shard_<n>=epoch`` under ``lease``."""
    ownership = EtcdOwnership(ClusterSettings("127.0.0.1:1", "test", advertise="10.0.0.7:50051"), 8)
    ownership._owned = {int(name.removeprefix("shard_")): (epoch, lease) for name, epoch in shards.items()}  # type: ignore[misc]
    return ownership


def test_owns_answers_the_epoch_until_the_lease_deadline_and_none_after():
    """Before the deadline: the epoch; at or past it: None (nothing more is written), without any
    word from etcd."""
    lease = StubLease(time.monotonic() + 60)
    ownership = ownership_holding(lease, shard_3=41)
    assert ownership.owns(3) == 41
    assert ownership.owns(4) is None
    lease.until = time.monotonic()
    assert ownership.owns(3) is None
    assert ownership.owned_shards == []


def test_may_acknowledge_only_what_was_durable_before_the_deadline():
    """A batch durable before the deadline, at the held epoch, may be acknowledged; one durable at
    or after it, at another epoch, of a shard not held, or under a lease etcd ended, may not."""
    now = time.monotonic()
    lease = StubLease(now + 10)
    ownership = ownership_holding(lease, shard_2=17)
    assert ownership.may_acknowledge(2, 17, now + 9.99)
    assert not ownership.may_acknowledge(2, 17, now + 10)
    assert not ownership.may_acknowledge(2, 17, now + 11)
    assert not ownership.may_acknowledge(2, 16, now)
    assert not ownership.may_acknowledge(5, 17, now)
    lease.state = LeaseState.GONE
    assert not ownership.may_acknowledge(2, 17, now)


def test_a_shard_being_released_acknowledges_its_in_flight_batches_but_takes_no_new_write():
    """While a shard is released its in-flight batches may still be acknowledged (under the deadline),
    but owns() answers None: nothing new is written."""
    now = time.monotonic()
    lease = StubLease(now + 10)
    ownership = ownership_holding(lease)
    ownership._releasing = {6: (23, lease)}  # type: ignore[assignment]
    assert ownership.owns(6) is None
    assert ownership.may_acknowledge(6, 23, now)
    assert not ownership.may_acknowledge(6, 23, now + 10)


def test_owner_of_answers_this_writer_for_its_shards_and_etcd_s_view_for_the_others():
    """owner_of: (advertised address, epoch) for an owned shard; the owner last read from etcd
    for another; None when nobody is known."""
    ownership = ownership_holding(StubLease(time.monotonic() + 60), shard_1=9)
    ownership._owners = {4: ("10.0.0.8:50051", 12)}
    assert ownership.owner_of(1) == ("10.0.0.7:50051", 9)
    assert ownership.owner_of(4) == ("10.0.0.8:50051", 12)
    assert ownership.owner_of(5) is None


def test_owners_follow_the_watch_and_a_read_never_takes_them_back_to_an_older_revision():
    """Other writers' shards are known from watched changes as they come (a dead writer's keys
    deleted, another's put); a read of the owners made at an older revision than a change
    already watched does not bring the older owner back."""
    ownership = ownership_holding(StubLease(time.monotonic() + 60))
    ownership._learn_owners(10, {1: ("10.0.0.8:50051", 5), 2: ("10.0.0.8:50051", 6)})
    assert ownership.owner_of(1) == ("10.0.0.8:50051", 5)
    ownership._learn_owners(12, {1: None})  # the dead writer's key deleted (watched)
    ownership._learn_owners(11, {1: ("10.0.0.8:50051", 5), 2: None})  # a read begun before it
    assert ownership.owner_of(1) is None
    assert ownership.owner_of(2) is None
    ownership._learn_owners(13, {1: ("10.0.0.9:50051", 13)})
    assert ownership.owner_of(1) == ("10.0.0.9:50051", 13)


@pytest.mark.parametrize(
    ("shards", "held", "share"),
    [
        (8, {"a": 0}, 8),  # alone: everything
        (8, {"a": 4, "b": 4}, 4),
        (8, {"a": 4, "b": 4, "c": 0}, 2),  # c joined: a and b give up to floor(8/3) = 2
        (8, {"a": 2, "b": 3, "c": 3}, 3),  # nobody below floor: ceil(8/3) = 3
        (4, {"a": 2, "b": 2, "c": 0}, 1),  # 4 over 3 writers: c must get one
        (256, {"a": 128, "b": 128}, 128),
    ],
)
def test_a_writer_aims_at_ceil_of_its_share_or_floor_while_another_is_short(shards, held, share):
    """shard_share: ceil(N / writers), or floor(N / writers) while another writer holds fewer than
    floor (a joining writer gets shards handed over)."""
    assert shard_share(shards, held, "a") == share


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--cluster", "prod"], "--cluster needs --etcd"),
        (["--advertise", "10.0.0.7:50051"], "--advertise needs --etcd"),
        (["--etcd", "127.0.0.1:2379"], "--etcd needs --cluster NAME"),
        (["--etcd", "127.0.0.1:2379", "--cluster", "no/slash"], "cluster name 'no/slash' must be"),
        (
            ["--etcd", "127.0.0.1:2379", "--cluster", "prod", "--static-shard-map", "{map}"],
            "--etcd and --static-shard-map do not go together",
        ),
    ],
)
def test_serve_writer_refuses_cluster_options_that_do_not_go_together(tmp_path, arguments, message):
    """Usage errors (exit 2) name the option, before anything is created or contacted."""
    shard_map = tmp_path / "shards.json"
    shard_map.write_text('{"shards": 256, "owners": []}')
    arguments = [str(shard_map) if argument == "{map}" else argument for argument in arguments]
    result = CliRunner().invoke(cli, ["serve-writer", "--data-dir", str(tmp_path / "data"), *arguments])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not (tmp_path / "data").exists()
