"""Memory artifacts served by the reader: GetMemories and ResolveProvenance (docs/memory.md §6).

Read only. The artifacts are files of the data root (``memories/``, written by the memory
pipeline and ``rollout memory forget``); the reads are :mod:`memory_store.reading`'s
functions, called with the tenant of the caller's credentials (:func:`memory_tenant`), and
ResolveProvenance reads each source session from its file through the listing index, so
a session of another tenant is not found exactly as on every other reader RPC. The
conversions to the wire are :mod:`shared.memory_wire`'s, which the SDK reverses.
"""

from __future__ import annotations

import os
from functools import partial

from memory_store.reading import MAX_LIMIT, get_memories, resolve_provenance
from memory_store.store import MemoryStore
from reader_service.listing_index import ListingIndex
from reader_service.watch import read_lines
from rollout.v1 import reader_pb2
from serving.tenancy import memory_tenant
from shared.errors import ArtifactNotFoundError, InvalidArgumentError, SessionNotFoundError
from shared.layout import open_session_file
from shared.memory import (
    ArtifactKind,
    MemoryView,
    SourceRecord,
    holds_tenants_session,
    source_record_of_line,
)
from shared.memory_wire import memory_kinds, resolved_to_proto, scope_from_proto, view_to_proto

#: What a limit of 0 means.
DEFAULT_LIMIT = 20
#: Longest artifact id a request may name (an id is ``mem_`` + 32 hex digits).
MAX_ARTIFACT_ID_CHARS = 100


def read_memories(
    store: MemoryStore, request: reader_pb2.GetMemoriesRequest
) -> reader_pb2.GetMemoriesResponse:
    """GetMemories: :func:`memory_store.reading.get_memories` of the caller's tenant.

    Raises InvalidArgumentError (``limit``, ``as_of``, ``kinds``), PermissionDeniedError
    (``tenant``), OSError when the store cannot be read."""
    if not 0 <= request.limit <= MAX_LIMIT:
        raise InvalidArgumentError(
            "limit", f"must be 0..{MAX_LIMIT} (0 means {DEFAULT_LIMIT}), not {request.limit}"
        )
    tenant = memory_tenant(request.tenant)
    scope = scope_from_proto(request.scope) if request.HasField("scope") else None
    damaged: dict[str, list[int]] = {}
    views = get_memories(
        store,
        tenant=tenant,
        scope=scope,
        query=request.query or None,
        limit=request.limit or DEFAULT_LIMIT,
        as_of=request.as_of or None,
        include_superseded=request.include_superseded,
        kinds=memory_kinds(request.kinds),
        artifact_ids=frozenset(request.artifact_ids) or None,
        damaged=damaged,
    )
    return reader_pb2.GetMemoriesResponse(
        memories=[view_to_proto(view) for view in views],
        damaged=[reader_pb2.DamagedScope(scope_key=key, lines=lines) for key, lines in damaged.items()],
    )


def artifact_view(store: MemoryStore, artifact_id: str, tenant: str) -> MemoryView:
    """The view of one of ``tenant``'s artifacts, superseded or not, of any kind.

    Raises InvalidArgumentError (``artifact_id`` empty or too long), ArtifactNotFoundError
    (none of that id in the tenant's store: another tenant's is answered the same)."""
    if not artifact_id or len(artifact_id) > MAX_ARTIFACT_ID_CHARS:
        raise InvalidArgumentError(
            "artifact_id",
            f"give the id of an artifact (mem_ + 32 hex digits; at most {MAX_ARTIFACT_ID_CHARS})",
        )
    held = store.find_artifact(tenant, artifact_id)  # reads the scope files up to the one holding it
    if held is None:
        raise ArtifactNotFoundError(artifact_id)
    key, state = held
    scope = state.artifacts[artifact_id].scope
    found = get_memories(
        store,
        tenant=tenant,
        scope=scope if scope.key() == key else None,  # what supersedes it is in its scope's file
        limit=1,
        include_superseded=True,
        kinds=tuple(ArtifactKind),
        artifact_ids=(artifact_id,),
    )
    if not found:
        raise ArtifactNotFoundError(artifact_id)
    return found[0]


def session_source_records(
    index: ListingIndex, session_id: str, upto_seq: int, tenant: str
) -> list[SourceRecord]:
    """The records of ``session_id`` with seq <= ``upto_seq`` as its file holds them (complete
    lines, damaged ones left out): what WatchSession from seq 0 sends, read here directly.

    Raises SessionNotFoundError (no such session, one the caller does not see, or one whose
    session_meta names another tenant than ``tenant``), OSError when the file cannot be read."""
    _, path = index.locate(session_id)
    records: list[SourceRecord] = []
    fd = open_session_file(path)
    try:
        end, offset, done = os.fstat(fd).st_size, 0, False
        while not done and offset < end:
            lines, after = read_lines(fd, offset, end)
            if after == offset:
                break  # only a line still being written is left
            offset = after
            for line in lines:
                record = source_record_of_line(line.line) if line.seq >= 0 else None
                if record is not None:
                    records.append(record)
                if line.seq >= upto_seq:
                    done = True
                    break
    finally:
        os.close(fd)
    if not holds_tenants_session(records, tenant):
        raise SessionNotFoundError(session_id)
    return records


def resolve(index: ListingIndex, view: MemoryView, tenant: str) -> reader_pb2.ResolveProvenanceResponse:
    """ResolveProvenance of an artifact found by :func:`artifact_view`:
    :func:`memory_store.reading.resolve_provenance` over the session files."""
    resolved = resolve_provenance(
        partial(session_source_records, index), tenant=tenant, artifact=view.artifact
    )
    return resolved_to_proto(view, resolved)
