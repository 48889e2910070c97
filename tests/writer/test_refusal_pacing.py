"""A peer that keeps naming unknown sessions is answered at a paced rate; others never notice (docs/spec.md §2.10)."""

from __future__ import annotations

import pytest

from writer_service.refusal_pacing import RefusalPacer


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_is_answered_at_once_and_what_follows_is_paced_to_the_rate() -> None:
    """The first `burst` refusals are immediate; after that each one waits for a token at `rate` per second."""
    clock = Clock()
    pacer = RefusalPacer(rate=100, burst=5, clock=clock)
    assert [pacer.delay("a") for _ in range(5)] == [0.0] * 5
    assert pacer.delay("a") == pytest.approx(0.01)
    assert pacer.delay("a") == pytest.approx(0.02)  # a closed loop keeps adding debt: ~rate calls per second
    clock.now += 0.035  # the debt is paid and a token refilled
    assert pacer.delay("a") == 0.0


def test_each_peer_has_its_own_bucket_and_a_quiet_peer_never_waits() -> None:
    """Another peer's refusals are never delayed by a noisy peer's."""
    clock = Clock()
    pacer = RefusalPacer(rate=10, burst=2, clock=clock)
    for _ in range(50):
        pacer.delay("noisy")
    assert pacer.delay("noisy") > 0
    assert pacer.delay("quiet") == 0.0


def test_a_single_refusal_is_never_held_longer_than_the_cap() -> None:
    """However long a peer has looped, one refusal waits at most max_delay_s."""
    clock = Clock()
    pacer = RefusalPacer(rate=10, burst=1, max_delay_s=0.5, clock=clock)
    delays = [pacer.delay("a") for _ in range(1000)]
    assert max(delays) == pytest.approx(0.5)


def test_rate_zero_turns_pacing_off() -> None:
    """With rate 0 no refusal is ever delayed."""
    pacer = RefusalPacer(rate=0, burst=0)
    assert {pacer.delay("a") for _ in range(1000)} == {0.0}


def test_the_peers_tracked_are_bounded() -> None:
    """At most max_peers buckets are kept; the least recently refused peer is forgotten."""
    pacer = RefusalPacer(rate=1, burst=1, max_peers=3, clock=Clock())
    for peer in "abcd":
        pacer.delay(peer)
    assert pacer.peers == 3
    assert pacer.delay("a") == 0.0  # "a" was forgotten: a fresh bucket
