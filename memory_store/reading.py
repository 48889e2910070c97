"""Reading memory artifacts: GetMemories and ResolveProvenance (docs/memory.md "Reading").

These functions are the body of the reader's GetMemories and ResolveProvenance RPCs
(reader_service.memories, with the tenant of the caller's credentials) and of the local
reads of ``rollout memory ls | show`` on the data root's host. :func:`get_memories` reads
the tenant's store; :func:`resolve_provenance` reads the cited messages of each source
session with a :data:`SourceReader`: a session another tenant owns is not found there as
on every reader RPC, and its session_meta's tenant is checked again.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from datetime import UTC, datetime

from memory_store.store import MemoryStore
from shared.errors import InvalidArgumentError
from shared.memory import (
    MAX_MEMORIES_LIMIT,
    Artifact,
    ArtifactKind,
    MemoryView,
    ProvenanceError,
    ResolvedMessage,
    ResolvedProvenance,
    Scope,
    SourceRecord,
    Supersession,
    check_source,
)
from shared.records import parse_timestamp

#: Most artifacts one read returns.
MAX_LIMIT = MAX_MEMORIES_LIMIT


def get_memories(
    store: MemoryStore,
    *,
    tenant: str,
    scope: Scope | None,
    query: str | None = None,
    limit: int = 20,
    as_of: str | None = None,
    include_superseded: bool = False,
    kinds: Sequence[ArtifactKind] = (ArtifactKind.MEMORY,),
    artifact_ids: Collection[str] | None = None,
    now: datetime | None = None,
    damaged: dict[str, list[int]] | None = None,
) -> list[MemoryView]:
    """The tenant's artifacts of ``scope`` (None: of every scope), newest first, each with its
    age and staleness marks.

    ``query``: every whitespace-separated word must occur in the text (case-insensitive).
    ``as_of`` (RFC 3339): the store as it stood then (later artifacts and supersessions left
    out; ages counted from it). Superseded artifacts only with ``include_superseded``, each
    naming what superseded it and the evidence. ``artifact_ids``: only these (None: any).
    ``damaged``, when given, receives the lines (numbers from 1) of the scope files read that
    hold no readable entry, by scope key (read once, with the artifacts).
    Raises InvalidArgumentError for a limit outside 1..1000 or an ``as_of`` that is not
    RFC 3339.
    """
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidArgumentError("limit", f"must be 1..{MAX_LIMIT}, not {limit}")
    try:
        cutoff = parse_timestamp(as_of) if as_of else None
    except ValueError as exc:
        raise InvalidArgumentError("as_of", f"must be an RFC 3339 time: {exc}") from exc
    moment = cutoff or now or datetime.now(UTC)
    keys = [scope.key()] if scope is not None else store.scope_keys(tenant)
    states = [store.read_scope(tenant, key) for key in keys]
    if damaged is not None:
        damaged.update((key, state.damaged) for key, state in zip(keys, states, strict=True) if state.damaged)
    marks = {i: m for state in states for i, m in state.marks.items()}
    present = [
        a
        for state in states
        for a in state.artifacts.values()
        if cutoff is None or parse_timestamp(a.created_at) <= cutoff
    ]
    superseded: dict[str, tuple[str, Supersession]] = {}
    for artifact in present:
        for entry in artifact.supersedes:
            superseded.setdefault(entry.artifact_id, (artifact.artifact_id, entry))
    words = query.lower().split() if query else []
    views: list[tuple[int, MemoryView]] = []
    for order, artifact in enumerate(present):
        if artifact.kind not in kinds or artifact.tenant != tenant:
            continue
        if artifact_ids is not None and artifact.artifact_id not in artifact_ids:
            continue
        if words and not all(word in artifact.text.lower() for word in words):
            continue
        by = superseded.get(artifact.artifact_id)
        if by is not None and not include_superseded:
            continue
        age = (moment - parse_timestamp(artifact.created_at)).total_seconds()
        views.append(
            (
                order,
                MemoryView(
                    artifact,
                    age,
                    by[0] if by else None,
                    by[1] if by else None,
                    tuple(marks.get(artifact.artifact_id, ())),
                ),
            )
        )
    views.sort(key=lambda item: (item[1].artifact.created_at, item[0]), reverse=True)
    return [view for _, view in views[:limit]]


#: How :func:`resolve_provenance` reads a source: ``(session id, up to seq, tenant)`` -> the
#: session's records from seq 0 as stored (damaged lines left out), raising the not-found
#: error of its side (the client's NotFoundError; the reader's SessionNotFoundError) for a
#: session that is gone or not the tenant's (shared.memory.holds_tenants_session).
SourceReader = Callable[[str, int, str], Sequence[SourceRecord]]


def resolve_provenance(read_records: SourceReader, *, tenant: str, artifact: Artifact) -> ResolvedProvenance:
    """The exact cited messages of ``artifact``, each source session read with ``read_records``
    (through the reader's WatchSession with the caller's credentials:
    rollout_memory.sources.client_source_reader; or, inside the reader, from the session file).

    Raises InvalidArgumentError when the artifact is not the tenant's; what ``read_records``
    raises when a source session is not the caller's or no longer exists.
    """
    if artifact.tenant != tenant:
        raise InvalidArgumentError(
            "artifact", f"{artifact.artifact_id} is not an artifact of tenant {tenant!r}"
        )
    messages: list[ResolvedMessage] = []
    problems: list[str] = []
    for source in artifact.sources:
        records = read_records(source.session_id, source.last_seq, tenant)
        try:
            check_source(source, records)
        except ProvenanceError as exc:
            problems.append(str(exc))
        by_seq = {record.seq: record for record in records}
        for citation in source.citations:
            cited = by_seq.get(citation.seq)
            if cited is not None:
                messages.append(
                    ResolvedMessage(
                        source.session_id, citation.seq, citation.kind, dict(cited.payload), cited.line
                    )
                )
    return ResolvedProvenance(artifact.artifact_id, tuple(messages), tuple(problems))
