"""Memory artifacts on the wire: shared.memory's views <-> the rollout.v1 messages of the
reader's GetMemories and ResolveProvenance (docs/memory.md §6).

The reader converts what :func:`memory_store.reading.get_memories` and
:func:`memory_store.reading.resolve_provenance` return with the ``*_to_proto``
functions; the SDK converts the replies back with the ``*_from_proto`` ones, so a view
read over the wire equals the function's (tests/memory/test_memory_rpcs.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from rollout.v1 import reader_pb2
from shared.errors import InvalidArgumentError
from shared.memory import (
    Artifact,
    ArtifactKind,
    Citation,
    Generator,
    MemoryView,
    ResolvedMessage,
    ResolvedProvenance,
    Scope,
    Source,
    SourceKind,
    StaleMark,
    Supersession,
)
from shared.records import record_of_line


def scope_to_proto(scope: Scope) -> reader_pb2.MemoryScope:
    return reader_pb2.MemoryScope(
        cwd=scope.cwd, repository=scope.repository, branch=scope.branch, agent=scope.agent
    )


def scope_from_proto(message: reader_pb2.MemoryScope) -> Scope:
    return Scope(message.cwd, message.repository, message.branch, message.agent)


def _supersession_to_proto(entry: Supersession) -> reader_pb2.MemorySupersession:
    return reader_pb2.MemorySupersession(
        artifact_id=entry.artifact_id,
        evidence_session_id=entry.evidence_session_id,
        evidence_seq=entry.evidence_seq,
    )


def _supersession_from_proto(message: reader_pb2.MemorySupersession) -> Supersession:
    return Supersession(message.artifact_id, message.evidence_session_id, message.evidence_seq)


def artifact_to_proto(artifact: Artifact) -> reader_pb2.MemoryArtifact:
    return reader_pb2.MemoryArtifact(
        artifact_id=artifact.artifact_id,
        kind=artifact.kind.value,
        text=artifact.text,
        tenant=artifact.tenant,
        scope=scope_to_proto(artifact.scope),
        created_at=artifact.created_at,
        generator_model=artifact.generator.model,
        generator_prompt_version=artifact.generator.prompt_version,
        sources=[
            reader_pb2.MemorySource(
                session_id=source.session_id,
                first_seq=source.first_seq,
                last_seq=source.last_seq,
                lines_digest=source.lines_digest,
                citations=[
                    reader_pb2.MemoryCitation(seq=c.seq, kind=c.kind.value, role=c.role, ts=c.ts)
                    for c in source.citations
                ],
            )
            for source in artifact.sources
        ],
        supersedes=[_supersession_to_proto(entry) for entry in artifact.supersedes],
        derived_from=list(artifact.derived_from),
        stop_seq=artifact.stop_seq,
    )


def artifact_from_proto(message: reader_pb2.MemoryArtifact) -> Artifact:
    """Raises ValueError for a kind this side does not know (a newer reader's)."""
    return Artifact(
        artifact_id=message.artifact_id,
        kind=ArtifactKind(message.kind),
        text=message.text,
        tenant=message.tenant,
        scope=scope_from_proto(message.scope),
        created_at=message.created_at,
        generator=Generator(message.generator_model, message.generator_prompt_version),
        sources=tuple(
            Source(
                source.session_id,
                source.first_seq,
                source.last_seq,
                source.lines_digest,
                tuple(Citation(c.seq, SourceKind(c.kind), c.role, c.ts) for c in source.citations),
            )
            for source in message.sources
        ),
        supersedes=tuple(_supersession_from_proto(entry) for entry in message.supersedes),
        derived_from=tuple(message.derived_from),
        stop_seq=message.stop_seq,
    )


def view_to_proto(view: MemoryView) -> reader_pb2.MemoryView:
    message = reader_pb2.MemoryView(
        artifact=artifact_to_proto(view.artifact),
        age_seconds=view.age_seconds,
        superseded_by=view.superseded_by or "",
        marks=[mark.value for mark in view.marks],
    )
    if view.superseded_evidence is not None:
        message.superseded_evidence.CopyFrom(_supersession_to_proto(view.superseded_evidence))
    return message


def view_from_proto(message: reader_pb2.MemoryView) -> MemoryView:
    """Raises ValueError for a kind or mark this side does not know (a newer reader's)."""
    return MemoryView(
        artifact_from_proto(message.artifact),
        message.age_seconds,
        message.superseded_by or None,
        _supersession_from_proto(message.superseded_evidence)
        if message.HasField("superseded_evidence")
        else None,
        tuple(StaleMark(mark) for mark in message.marks),
    )


def resolved_to_proto(view: MemoryView, resolved: ResolvedProvenance) -> reader_pb2.ResolveProvenanceResponse:
    return reader_pb2.ResolveProvenanceResponse(
        memory=view_to_proto(view),
        messages=[
            reader_pb2.ResolvedMessage(session_id=m.session_id, seq=m.seq, kind=m.kind.value, line=m.line)
            for m in resolved.messages
        ],
        problems=list(resolved.problems),
    )


def resolved_from_proto(message: reader_pb2.ResolveProvenanceResponse) -> ResolvedProvenance:
    """The resolution a ResolveProvenance reply holds (each payload read from its stored line,
    as the reader read it: shared.records.record_of_line). Raises ValueError for a line that
    holds no record or a kind this side does not know."""
    messages: list[ResolvedMessage] = []
    for resolved in message.messages:
        record = record_of_line(resolved.line)
        if record is None:
            raise ValueError(f"the line of session {resolved.session_id} seq {resolved.seq} holds no record")
        messages.append(
            ResolvedMessage(
                resolved.session_id, resolved.seq, SourceKind(resolved.kind), record["payload"], resolved.line
            )
        )
    return ResolvedProvenance(message.memory.artifact.artifact_id, tuple(messages), tuple(message.problems))


def memory_kinds(names: Sequence[str], field: str = "kinds") -> tuple[ArtifactKind, ...]:
    """The artifact kinds a request names (empty: memories only). Raises InvalidArgumentError
    (``field``) for a name that is not a kind."""
    if not names:
        return (ArtifactKind.MEMORY,)
    kinds: list[ArtifactKind] = []
    for name in names:
        try:
            kinds.append(ArtifactKind(name))
        except ValueError:
            known = ", ".join(kind.value for kind in ArtifactKind)
            raise InvalidArgumentError(field, f"{name[:100]!r} is not an artifact kind ({known})") from None
    return tuple(kinds)
