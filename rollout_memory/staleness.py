"""The staleness sweep (docs/memory.md §7): marks on artifacts whose sources may no longer
say what they said. Every session an artifact cites is read again through the reader:

- gone (NOT_FOUND) marks its artifacts ``deleted``;
- cut below a cited seq (its next seq is at or below it) marks them ``changed``, without
  waiting on the session (it may be open);
- a cited range that no longer verifies (shared.memory.check_source) marks ``changed``;
- a ``compacted`` record, or a Resume forced over damage, after an artifact's last cited
  seq marks it ``compacted`` / ``resumed_over_damage`` (shared.memory.stale_mark_of);
- a listed session whose ``forked_from`` names a cited session at a seq at or after a
  cited one (the fork holds a copy of a cited message) marks ``forked``.

Each mark is written once, with its evidence (memory_store.store.MemoryStore.mark).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from memory_store.store import MemoryStore
from rollout_client import NotFoundError, RolloutClient
from rollout_memory.sources import read_source_records
from shared.memory import Artifact, ProvenanceError, Source, StaleMark, check_source, stale_mark_of

#: One use of a source: the scope key of the artifact, the artifact, the source.
Use = tuple[str, Artifact, Source]
#: A mark to write: the use it is for, the mark, its evidence.
Mark = tuple[Use, StaleMark, dict[str, Any]]


def cited_sessions(store: MemoryStore, tenant: str) -> dict[str, list[Use]]:
    """Every session the tenant's artifacts cite, with each use of it."""
    cited: dict[str, list[Use]] = {}
    for key in store.scope_keys(tenant):
        for artifact in store.read_scope(tenant, key).artifacts.values():
            for source in artifact.sources:
                cited.setdefault(source.session_id, []).append((key, artifact, source))
    return cited


def source_marks(
    client: RolloutClient, session_id: str, uses: Sequence[Use], *, tenant: str
) -> Iterator[Mark]:
    """The marks one cited session puts on its uses, from its records read again."""
    last_cited = max(source.last_seq for _, _, source in uses)
    try:
        facts = client.session(session_id).stop_facts()
        if 0 < facts.next_seq <= last_cited:
            for use in uses:
                yield use, StaleMark.CHANGED, {"session_id": session_id, "next_seq": facts.next_seq}
            return
        records = read_source_records(client, session_id, max(facts.next_seq - 1, last_cited), tenant=tenant)
    except NotFoundError:
        for use in uses:
            yield use, StaleMark.DELETED, {"session_id": session_id}
        return
    for use in uses:
        source = use[2]
        try:
            check_source(source, records)
        except ProvenanceError as exc:
            yield use, StaleMark.CHANGED, {"session_id": session_id, "reason": str(exc)}
        for record in records:
            mark = stale_mark_of(record, source.last_seq)
            if mark is not None:
                yield use, mark, {"session_id": session_id, "seq": record.seq}


def fork_marks(client: RolloutClient, listed: Sequence[str], cited: dict[str, list[Use]]) -> Iterator[Mark]:
    """``forked`` marks from the listed sessions' ``forked_from`` (each session's first record)."""
    for session_id in listed:
        watch = client.session(session_id).watch(0)
        try:
            first = next(iter(watch), None)
        finally:
            watch.close()
        forked = first.payload.get("forked_from") if first is not None and first.payload else None
        if not isinstance(forked, dict) or forked.get("session_id") not in cited:
            continue
        fork_seq = forked.get("seq")
        if type(fork_seq) is not int:
            continue
        for use in cited[str(forked["session_id"])]:
            if any(citation.seq <= fork_seq for citation in use[2].citations):
                yield use, StaleMark.FORKED, {"fork_session_id": session_id, "seq": fork_seq}


def sweep(
    client: RolloutClient, store: MemoryStore, *, tenant: str, listed: Sequence[str]
) -> list[tuple[str, str]]:
    """Mark the tenant's stale artifacts; returns the marks added as (artifact id, mark)."""
    cited = cited_sessions(store, tenant)
    added: list[tuple[str, str]] = []
    marks: list[Iterator[Mark]] = [source_marks(client, s, uses, tenant=tenant) for s, uses in cited.items()]
    marks.append(fork_marks(client, listed, cited))
    for found in marks:
        for (key, artifact, _), mark, evidence in found:
            if store.mark(tenant, key, artifact.artifact_id, mark, evidence):
                added.append((artifact.artifact_id, mark.value))
    return added
