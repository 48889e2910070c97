"""The stop-kind vocabulary and default-deny resume eligibility (docs/spec.md §5)."""

from __future__ import annotations

import pytest

from shared.stop_kinds import StopKind, classify_resume

REPLAYABLE = {StopKind.PAUSED, StopKind.CANCELLED}


@pytest.mark.parametrize("kind", list(StopKind), ids=str)
def test_every_declared_kind_has_an_explicit_answer(kind):
    """Each StopKind member gets its own answer naming the kind; only paused and cancelled are replayable."""
    eligibility = classify_resume(kind.value)
    assert eligibility.stop_kind is kind
    assert eligibility.replayable is (kind in REPLAYABLE)
    assert eligibility.reason.strip()
    assert kind.value in eligibility.reason


def test_declared_kinds_have_distinct_reasons():
    """No two declared kinds share a reason, so none falls through a common default."""
    reasons = [classify_resume(kind.value).reason for kind in StopKind]
    assert len(set(reasons)) == len(reasons)


@pytest.mark.parametrize("raw", ["x", "PAUSED", " paused", "done", "stop_kind_paused"])
def test_unrecognized_kind_is_not_replayable(raw):
    """A kind outside the vocabulary is refused with "unrecognized stop kind '<raw>'"."""
    eligibility = classify_resume(raw)
    assert eligibility.replayable is False
    assert eligibility.stop_kind is None
    assert f"unrecognized stop kind {raw!r}" in eligibility.reason


def test_unrecognized_reason_quotes_the_kind():
    """The refusal of an unknown kind reads exactly "unrecognized stop kind 'x'"."""
    assert "unrecognized stop kind 'x'" in classify_resume("x").reason


@pytest.mark.parametrize("raw", [None, ""])
def test_legacy_stop_without_kind_counts_as_cancelled(raw):
    """A legacy stop record without a kind is replayable and counted as cancelled."""
    eligibility = classify_resume(raw)
    assert eligibility.replayable is True
    assert eligibility.stop_kind is StopKind.CANCELLED
    assert "cancelled" in eligibility.reason


@pytest.mark.parametrize(
    ("delegation_id", "parent_session_id"),
    [("", "01a22c15-89a6-7d3d-b5b7-165622bd350c"), ("call_1", ""), ("", "")],
)
@pytest.mark.parametrize("raw", ["paused", "cancelled", None])
def test_child_without_delegation_coordinates_is_not_replayable(raw, delegation_id, parent_session_id):
    """A child session missing delegation_id or parent_session_id is refused for "no delegation coordinates"."""
    eligibility = classify_resume(
        raw, is_child=True, delegation_id=delegation_id, parent_session_id=parent_session_id
    )
    assert eligibility.replayable is False
    assert "no delegation coordinates" in eligibility.reason


def test_child_with_both_coordinates_is_classified_by_its_kind():
    """A child session with both coordinates is judged by its stop kind like any session."""
    coordinates = {"delegation_id": "call_1", "parent_session_id": "01a22c15-89a6-7d3d-b5b7-165622bd350c"}
    assert classify_resume("paused", is_child=True, **coordinates).replayable is True
    assert classify_resume("completed", is_child=True, **coordinates).replayable is False


def test_root_session_needs_no_coordinates():
    """A root session (not a child) with empty coordinates is judged by its stop kind alone."""
    assert classify_resume("paused").replayable is True


@pytest.mark.parametrize(
    ("meta", "replayable"),
    [
        ({}, True),
        ({"agent_name": "coder"}, False),
        ({"delegation_id": "call_1"}, False),
        ({"agent_name": "coder", "delegation_id": "call_1", "parent_session_id": "p"}, True),
    ],
)
def test_classify_session_takes_any_agent_or_delegation_field_for_a_child(meta, replayable):
    """A session naming an agent or a delegation field needs both coordinates; a root needs none."""
    from shared.stop_kinds import classify_session

    eligibility = classify_session("paused", meta)
    assert eligibility.replayable is replayable
    if not replayable:
        assert "no delegation coordinates" in eligibility.reason


def test_writer_resume_and_reader_stop_facts_share_one_classification():
    """The writer's Resume and the reader's eligibility call the same shared function."""
    import reader_service.stop_facts
    import shared.stop_kinds
    import writer_service.resume_fork

    assert writer_service.resume_fork.classify_session is shared.stop_kinds.classify_session
    assert reader_service.stop_facts.classify_session is shared.stop_kinds.classify_session
