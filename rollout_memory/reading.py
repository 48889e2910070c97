"""Reading memory artifacts: GetMemories and ResolveProvenance (docs/memory.md "Reading").

:func:`get_memories` reads the tenant's store (no service is needed: the artifacts are
files of the data root) and :func:`resolve_provenance` reads the cited messages through
the reader, with the caller's credentials: a session another tenant owns is NOT_FOUND
there as on every reader RPC, and its session_meta's tenant is checked here again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from rollout_client import RolloutClient
from rollout_memory.sources import read_source_records
from rollout_memory.store import MemoryStore
from shared.errors import InvalidArgumentError
from shared.memory import (
    Artifact,
    ArtifactKind,
    MemoryView,
    ProvenanceError,
    Scope,
    SourceKind,
    Supersession,
    check_source,
)
from shared.records import parse_timestamp

#: Most artifacts one read returns.
MAX_LIMIT = 1000


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
    now: datetime | None = None,
) -> list[MemoryView]:
    """The tenant's artifacts of ``scope`` (None: of every scope), newest first, each with its
    age and staleness marks.

    ``query``: every whitespace-separated word must occur in the text (case-insensitive).
    ``as_of`` (RFC 3339): the store as it stood then (later artifacts and supersessions left
    out; ages counted from it). Superseded artifacts only with ``include_superseded``, each
    naming what superseded it and the evidence. Raises InvalidArgumentError for a limit
    outside 1..1000 or an ``as_of`` that is not RFC 3339.
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


@dataclass(frozen=True, slots=True)
class ResolvedMessage:
    """One cited message as the source session holds it now: session, seq, kind stamped, the
    record's payload and stored line."""

    session_id: str
    seq: int
    kind: SourceKind
    payload: dict[str, object]
    line: bytes


@dataclass(frozen=True, slots=True)
class ResolvedProvenance:
    """An artifact's cited messages, and whether each source still says what was cited
    (``problems``: the reasons it does not, empty when every source verifies)."""

    artifact_id: str
    messages: tuple[ResolvedMessage, ...]
    problems: tuple[str, ...]


def resolve_provenance(client: RolloutClient, *, tenant: str, artifact: Artifact) -> ResolvedProvenance:
    """The exact cited messages of ``artifact``, read through the reader (WatchSession).

    Raises InvalidArgumentError when the artifact is not the tenant's; NotFoundError (the
    client's) when a source session is not the caller's or no longer exists.
    """
    if artifact.tenant != tenant:
        raise InvalidArgumentError(
            "artifact", f"{artifact.artifact_id} is not an artifact of tenant {tenant!r}"
        )
    messages: list[ResolvedMessage] = []
    problems: list[str] = []
    for source in artifact.sources:
        records = read_source_records(client, source.session_id, source.last_seq, tenant=tenant)
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
