"""The cyclic collector's pause around a rebuild (shared.rebuild.collector_paused)."""

from __future__ import annotations

import gc
import importlib
import threading
import time
import weakref
from collections.abc import Iterator

import pytest

from shared.rebuild import collector_paused, rebuild
from shared.records import encode_line

# shared/__init__ binds the name ``rebuild`` to the function, hiding the module.
rebuild_module = importlib.import_module("shared.rebuild")
TS = "2026-11-30T10:15:30.123456Z"


@pytest.fixture(autouse=True)
def collector_enabled() -> Iterator[None]:
    """Each test starts with the collector on and leaves it as it found it."""
    was_enabled = gc.isenabled()
    gc.enable()
    yield
    if was_enabled:
        gc.enable()
    else:
        gc.disable()


def test_the_collector_is_paused_inside_and_back_after() -> None:
    """Inside the pause the collector is off; after it, on again."""
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_overlapping_pauses_of_two_threads_resume_the_collector_only_at_the_last() -> None:
    """Thread A pauses, thread B pauses, A ends: still paused; B ends: the collector is back."""
    b_entered, a_left, b_may_leave = threading.Event(), threading.Event(), threading.Event()
    seen: dict[str, bool] = {}

    def thread_b() -> None:
        with collector_paused():
            b_entered.set()
            b_may_leave.wait(10)
            seen["b before leaving"] = gc.isenabled()

    with collector_paused():
        other = threading.Thread(target=thread_b)
        other.start()
        assert b_entered.wait(10)
    a_left.set()
    seen["after a left"] = gc.isenabled()
    b_may_leave.set()
    other.join(10)
    assert seen == {"after a left": False, "b before leaving": False}
    assert gc.isenabled()


def test_a_collector_disabled_beforehand_stays_disabled() -> None:
    """The pause restores the state it found: a process that turned the collector off keeps it off."""
    gc.disable()
    with collector_paused():
        pass
    assert not gc.isenabled()


class _Node:
    """An object that can point at itself."""

    link: _Node | None = None


def _unreachable_cycle() -> weakref.ref[_Node]:
    """A weak reference to an object kept alive only by a reference cycle (only the collector frees it)."""
    node = _Node()
    node.link = node
    return weakref.ref(node)


def test_a_pause_held_too_long_still_lets_reference_cycles_be_collected(monkeypatch) -> None:
    """One pause held past MAX_COLLECTOR_PAUSE_S: the watchdog collects a reference cycle made
    meanwhile, while the pause is still held (and the collector stays paused)."""
    monkeypatch.setattr(rebuild_module, "MAX_COLLECTOR_PAUSE_S", 0.2)

    with collector_paused():
        alive = _unreachable_cycle()
        deadline = time.monotonic() + 10
        while alive() is not None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert alive() is None, "the cycle outlived the pause's bound"
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_short_pause_leaves_reference_cycles_to_the_collector_afterwards() -> None:
    """Under the bound, the watchdog does nothing: a cycle made in a short pause is still there
    when the pause ends (the bound test above is not passing by accident)."""

    with collector_paused():
        alive = _unreachable_cycle()
        time.sleep(1.2)  # more than two watchdog looks
        assert alive() is not None
    gc.collect()
    assert alive() is None


def test_rebuild_parses_under_the_pause(monkeypatch) -> None:
    """rebuild() holds the pause while it parses (checked from inside its pass)."""
    seen: list[bool] = []
    finish = rebuild_module.Rebuilder.finish

    def spying_finish(self: rebuild_module.Rebuilder, max_messages: int) -> rebuild_module.Rebuild:
        seen.append(gc.isenabled())
        return finish(self, max_messages)

    monkeypatch.setattr(rebuild_module.Rebuilder, "finish", spying_finish)
    meta = {"session_id": "01a22c15-89a6-7d3d-b5b7-165622bd350c", "tenant": "t", "created_at": TS}
    found = rebuild(encode_line(0, TS, "session_meta", meta))
    assert found.records == 1
    assert seen == [False]
    assert gc.isenabled()
