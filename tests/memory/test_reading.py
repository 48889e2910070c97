"""GetMemories over the store: newest first, superseded on request, a query, as_of, the limit."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memory_store.store import MemoryStore
from rollout_memory import get_memories
from shared.errors import InvalidArgumentError
from shared.memory import Artifact, ArtifactKind, Generator, Scope, Supersession, stamp_source
from tests.memory.test_provenance import SESSION, session_records

SCOPE = Scope(cwd="/src")


def artifact(artifact_id: str, text: str, created_at: str, supersedes=()) -> Artifact:
    source = stamp_source(SESSION, session_records(), [1, 3])
    return Artifact(
        artifact_id,
        ArtifactKind.MEMORY,
        text,
        "acme",
        SCOPE,
        created_at,
        Generator("m", "v1"),
        (source,),
        tuple(supersedes),
    )


@pytest.fixture
def store(tmp_path) -> MemoryStore:
    store = MemoryStore(tmp_path / "memories")
    store.commit_job(
        "acme", SCOPE, SESSION, 1, [artifact("mem_a", "Plan costs $20", "2026-12-01T10:00:00.000000Z")]
    )
    store.commit_job(
        "acme",
        SCOPE,
        SESSION,
        2,
        [
            artifact(
                "mem_b", "Plan costs $25", "2026-12-02T10:00:00.000000Z", [Supersession("mem_a", SESSION, 3)]
            ),
            artifact("mem_c", "Deploys on Fridays", "2026-12-02T11:00:00.000000Z"),
        ],
    )
    return store


NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def ids(views):
    return [view.artifact.artifact_id for view in views]


def test_newest_first_with_age_and_superseded_only_on_request(store):
    """Current artifacts newest first with their age; the superseded one only when asked, naming its successor."""
    views = get_memories(store, tenant="acme", scope=SCOPE, now=NOW)
    assert ids(views) == ["mem_c", "mem_b"]
    assert views[0].age_seconds == 3600
    everything = get_memories(store, tenant="acme", scope=SCOPE, include_superseded=True, now=NOW)
    assert ids(everything) == ["mem_c", "mem_b", "mem_a"]
    assert everything[2].superseded_by == "mem_b"


def test_as_of_reads_the_store_as_it_stood(store):
    """As of a time before the supersession, the older artifact is current and the later ones absent."""
    views = get_memories(store, tenant="acme", scope=SCOPE, as_of="2026-12-01T12:00:00Z")
    assert ids(views) == ["mem_a"]
    assert views[0].superseded_by is None
    assert views[0].age_seconds == 7200


def test_a_query_and_a_limit(store):
    """Every word of the query must occur; the limit cuts the newest-first list; bad arguments are refused."""
    assert ids(get_memories(store, tenant="acme", scope=SCOPE, query="plan COSTS")) == ["mem_b"]
    assert ids(get_memories(store, tenant="acme", scope=SCOPE, limit=1)) == ["mem_c"]
    with pytest.raises(InvalidArgumentError):
        get_memories(store, tenant="acme", scope=SCOPE, limit=0)
    with pytest.raises(InvalidArgumentError):
        get_memories(store, tenant="acme", scope=SCOPE, as_of="yesterday")


def test_another_scope_or_tenant_reads_nothing(store):
    """Another scope of the tenant, or the same scope of another tenant, holds nothing."""
    assert get_memories(store, tenant="acme", scope=Scope(cwd="/elsewhere"), include_superseded=True) == []
    assert get_memories(store, tenant="globex", scope=SCOPE, include_superseded=True) == []
    assert ids(get_memories(store, tenant="acme", scope=None)) == ["mem_c", "mem_b"]
