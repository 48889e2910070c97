"""The cyclic collector's pause around a rebuild (shared.rebuild.collector_paused)."""

from __future__ import annotations

import gc
import importlib
import threading
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


def test_an_overdue_pause_runs_one_full_collection(monkeypatch) -> None:
    """Overlapping pauses past MAX_COLLECTOR_PAUSE_S: the next pause to end collects reference cycles."""
    monkeypatch.setattr(rebuild_module, "MAX_COLLECTOR_PAUSE_S", 0.0)

    class Node:
        pass

    full_collections: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "stop" and info["generation"] == 2:
            full_collections.append(1)

    with collector_paused():
        cycle = Node()
        cycle.self = cycle  # type: ignore[attr-defined]
        alive = weakref.ref(cycle)
        del cycle
        gc.callbacks.append(count)
        try:
            with collector_paused():
                pass
        finally:
            gc.callbacks.remove(count)
        assert alive() is None, "the cycle is collected although another pause is still held"
        assert full_collections == [1]
        assert not gc.isenabled()


def test_rebuild_parses_under_the_pause(monkeypatch) -> None:
    """rebuild() holds the pause while it parses (checked from inside its pass)."""
    seen: list[bool] = []
    finish = rebuild_module._Rebuilder.finish

    def spying_finish(self: rebuild_module._Rebuilder, max_messages: int) -> rebuild_module.Rebuild:
        seen.append(gc.isenabled())
        return finish(self, max_messages)

    monkeypatch.setattr(rebuild_module._Rebuilder, "finish", spying_finish)
    meta = {"session_id": "01a22c15-89a6-7d3d-b5b7-165622bd350c", "tenant": "t", "created_at": TS}
    found = rebuild(encode_line(0, TS, "session_meta", meta))
    assert found.records == 1
    assert seen == [False]
    assert gc.isenabled()
