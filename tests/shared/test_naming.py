"""Session file names: the builder and the parser are mirrors (docs/spec.md §2.9)."""

from __future__ import annotations

import string
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.errors import FileNameError
from shared.naming import SessionFileName, build_file_name, parse_file_name

SESSION_ID = "01a22c15-89a6-7d3d-b5b7-165622bd350c"
MOMENT = datetime(2026, 11, 30, 10, 15, 30, tzinfo=UTC)

_moments = st.datetimes(
    min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59), timezones=st.just(UTC)
).map(lambda moment: moment.replace(microsecond=0))
_session_ids = st.uuids().map(str)
_agent_names = st.just("") | st.from_regex(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}", fullmatch=True).filter(
    lambda name: ".." not in name
)


@given(moment=_moments, session_id=_session_ids, agent_name=_agent_names)
def test_build_and_parse_round_trip(moment, session_id, agent_name):
    """Parsing a built file name gives back its UTC second, lowercase session id and agent name."""
    name = build_file_name(moment, session_id, agent_name)
    assert parse_file_name(name) == SessionFileName(moment, session_id, agent_name)


@given(
    session_id=_session_ids, agent_name=st.from_regex(r"[a-z0-9]{1,10}(_[a-z0-9]{1,10}){1,3}", fullmatch=True)
)
def test_agent_names_with_underscores_round_trip(session_id, agent_name):
    """An agent name holding underscores survives the round trip whole."""
    assert parse_file_name(build_file_name(MOMENT, session_id, agent_name)).agent_name == agent_name


def test_file_name_has_the_documented_shape():
    """A file name reads <YYYY-MM-DD>_<HHMMSS>_<session_id>[_<agent_name>].jsonl."""
    assert build_file_name(MOMENT, SESSION_ID) == f"2026-11-30_101530_{SESSION_ID}.jsonl"
    assert build_file_name(MOMENT, SESSION_ID, "code_reviewer") == (
        f"2026-11-30_101530_{SESSION_ID}_code_reviewer.jsonl"
    )


def test_build_converts_to_utc_whole_seconds():
    """A moment in another offset is named by its UTC time, cut to whole seconds."""
    local = datetime(2026, 11, 30, 12, 15, 30, 999999, tzinfo=timezone(timedelta(hours=2)))
    assert parse_file_name(build_file_name(local, SESSION_ID)).created_at == MOMENT


@pytest.mark.parametrize(
    "agent_name",
    ["a/b", "..", "x..y", "a\x00b", "tab\there", "new\nline", "del\x7f", "a" * 65, ".hidden", "a b", "é"],
)
def test_invalid_agent_names_are_rejected(agent_name):
    """An agent name that could be a path, holds control characters or is too long raises FileNameError."""
    with pytest.raises(FileNameError):
        build_file_name(MOMENT, SESSION_ID, agent_name)
    with pytest.raises(FileNameError):
        parse_file_name(f"2026-11-30_101530_{SESSION_ID}_{agent_name}.jsonl")


def test_agent_name_of_64_characters_is_accepted():
    """An agent name of exactly 64 characters is the longest allowed."""
    name = "a" * 64
    assert parse_file_name(build_file_name(MOMENT, SESSION_ID, name)).agent_name == name


@pytest.mark.parametrize(
    "session_id",
    [SESSION_ID.upper(), "01A22C15-89a6-7d3d-b5b7-165622bd350c", "not-a-uuid", SESSION_ID[:-1], ""],
)
def test_bad_session_ids_are_rejected(session_id):
    """A session id that is not a lowercase UUID (uppercase included) raises FileNameError."""
    with pytest.raises(FileNameError):
        build_file_name(MOMENT, session_id)
    with pytest.raises(FileNameError):
        parse_file_name(f"2026-11-30_101530_{session_id}.jsonl")


@pytest.mark.parametrize(
    "name",
    [
        f"2026-11-30_101530_{SESSION_ID}.json",
        f"2026-11-30_101530_{SESSION_ID}.jsonl.torn-1",
        f"2026-13-30_101530_{SESSION_ID}.jsonl",
        f"2026-11-30_256130_{SESSION_ID}.jsonl",
        f"20261130_101530_{SESSION_ID}.jsonl",
        f"2026-11-30_101530_{SESSION_ID}_.jsonl",
    ],
)
def test_names_not_of_the_shape_are_rejected(name):
    """A name that is not of the session file shape (sidecars included) raises FileNameError."""
    with pytest.raises(FileNameError):
        parse_file_name(name)


@given(agent_name=st.text(alphabet=string.printable + "\x00\x1f\x7f/", min_size=1, max_size=70))
def test_accepted_agent_names_are_never_paths(agent_name):
    """Any agent name the builder accepts has no "/", no "..", no control character and at most 64 characters."""
    try:
        build_file_name(MOMENT, SESSION_ID, agent_name)
    except FileNameError:
        return
    assert "/" not in agent_name
    assert ".." not in agent_name
    assert not agent_name.startswith(".")
    assert agent_name.isprintable()
    assert len(agent_name) <= 64


def test_new_session_ids_are_lowercase_time_ordered_uuid7():
    """new_session_id gives lowercase version-7 UUIDs that sort in creation order."""
    import uuid

    from shared.naming import new_session_id, validate_session_id

    ids = [new_session_id() for _ in range(50)]
    assert all(validate_session_id(value) == value for value in ids)
    assert all(uuid.UUID(value).version == 7 for value in ids)
    assert ids == sorted(ids)
