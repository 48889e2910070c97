"""The artifact store: ``<data root>/memories/``, beside the shards, never read by replay.

Layout (shared.layout ``MEMORIES_DIR``)::

    memories/<tenant key>/              one folder per tenant: "t_" + 32 hex of BLAKE2b-128(tenant)
      scopes/<scope key>.jsonl          one file per scope (shared.memory.Scope.key)
      leases/<session id>.lease         pipeline leases (rollout_memory.leases)
      store.lock                        held (filelock) while an entry is appended or a file rewritten

A scope file holds **entries**, one compact JSON object per ``\\n``-terminated line,
appended and fsynced (the file and, when created, its folder) before a write returns::

    {"v":1,"entry":"commit","at":"…","tenant":"…","job":{"session_id":"…","stop_seq":12},
     "artifacts":[<artifact>…],"refused":[{"reason":"no_such_seq","message":"…","text":"…"}]}
    {"v":1,"entry":"commit","at":"…","tenant":"…","job":{"consolidation":"<scope key>"},"artifacts":[…],"refused":[]}
    {"v":1,"entry":"marked","at":"…","tenant":"…","artifact_id":"mem_…","mark":"forked","evidence":{…}}
    {"v":1,"entry":"forgotten","at":"…","tenant":"…","what":{"session_id":"…"},"by":"…",
     "artifact_ids":["mem_…"],"watermarks":{"<session id>":12}}

One job's artifacts are one line, so a job is committed whole or not at all: a line
torn by a crash is not an entry (readers skip a last line without ``\\n``, the next
append cuts it off first). A session's **watermark** is the highest ``stop_seq`` of its
commits and of the ``watermarks`` a ``forgotten`` entry keeps (a forgotten session is not
distilled again). :meth:`MemoryStore.commit_job` appends a job's line only while the
session's watermark in the job's scope file is below the job's stop, under the store lock:
the fence that keeps a session from being distilled twice whatever happened to leases
(every worker distilling one stop reads the same records, so commits to the same scope).

A line that is not a JSON object, or not an entry of the shape above (damage), is reported
in :attr:`ScopeState.damaged` by its line number and otherwise skipped, never a crash; a
``forget`` rewrite leaves damaged lines out.

``forget`` is the one rewrite: the scope file is written again without the forgotten
artifacts (and their marks) to a temporary file, fsynced, renamed over the old one, the
folder fsynced; the ``forgotten`` entry then records what went, by id, without its text.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from filelock import FileLock

from shared.layout import PRIVATE_FILE_MODE, make_private_dirs
from shared.memory import Artifact, Scope, StaleMark, Supersession
from shared.records import now_timestamp

ENTRY_VERSION = 1
SCOPES_DIR = "scopes"
LEASES_DIR = "leases"
STORE_LOCK = "store.lock"


def tenant_key(tenant: str) -> str:
    """The folder name of a tenant's artifacts: ``t_`` + 32 hex digits of BLAKE2b-128 of the tenant."""
    return (
        "t_"
        + hashlib.blake2b(
            b"rollout-ledger/memory-tenant/v1\x00" + tenant.encode(), digest_size=16
        ).hexdigest()
    )


@dataclass
class ScopeState:
    """What one scope file holds, read in order: artifacts by id (commit order), the
    supersession of each superseded one (by the superseding artifact's id), staleness marks,
    session watermarks, refusals, forgotten entries (as stored) and damaged lines."""

    artifacts: dict[str, Artifact] = field(default_factory=dict)
    superseded_by: dict[str, tuple[str, Supersession]] = field(default_factory=dict)
    marks: dict[str, list[StaleMark]] = field(default_factory=dict)
    watermarks: dict[str, int] = field(default_factory=dict)
    refused: list[dict[str, Any]] = field(default_factory=list)
    forgotten: list[dict[str, Any]] = field(default_factory=list)
    #: Line numbers (from 1) that hold no readable entry: damage, reported, never a crash.
    damaged: list[int] = field(default_factory=list)

    def live(self) -> list[Artifact]:
        """Artifacts no other supersedes, in commit order."""
        return [a for a in self.artifacts.values() if a.artifact_id not in self.superseded_by]

    def apply(self, entry: Mapping[str, Any]) -> None:
        """Take one entry into the state, whole or not at all: KeyError, TypeError or ValueError
        (nothing taken) for an entry not of its kind's shape. Unknown kinds are left out."""
        kind = entry.get("entry")
        if kind == "commit":
            job = entry["job"]
            session = str(job["session_id"]) if "session_id" in job else None
            stop_seq = int(job["stop_seq"]) if session is not None else -1
            artifacts = [Artifact.from_json(value) for value in entry.get("artifacts", ())]
            refused = [dict(item) for item in entry.get("refused", ())]
            if session is not None:
                self.watermarks[session] = max(self.watermarks.get(session, -1), stop_seq)
            for artifact in artifacts:
                self.artifacts[artifact.artifact_id] = artifact
                for superseded in artifact.supersedes:
                    self.superseded_by.setdefault(superseded.artifact_id, (artifact.artifact_id, superseded))
            self.refused += refused
        elif kind == "marked":
            artifact_id, mark = str(entry["artifact_id"]), StaleMark(entry["mark"])
            marks = self.marks.setdefault(artifact_id, [])
            if mark not in marks:
                marks.append(mark)
        elif kind == "forgotten":
            watermarks = {str(session): int(seq) for session, seq in entry.get("watermarks", {}).items()}
            self.forgotten.append(dict(entry))
            for session, stop_seq in watermarks.items():
                self.watermarks[session] = max(self.watermarks.get(session, -1), stop_seq)


def _lines(path: Path) -> Iterator[tuple[int, dict[str, Any] | None]]:
    """(line number from 1, entry) of each complete line of a scope file, in order; the entry
    is None for a line that is not a JSON object (damage). A last line without ``\n`` (torn
    by a crash) is not a line."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return
    for number, line in enumerate(data.split(b"\n")[:-1], 1):
        try:
            entry = orjson.loads(line)
        except orjson.JSONDecodeError:
            entry = None
        yield number, entry if isinstance(entry, dict) else None


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class MemoryStore:
    """The artifact store of one data root (see the module doc). Every method takes the
    tenant: a tenant's calls read and write its own folder only. Thread- and process-safe
    for writes (the store lock); reads take no lock (complete lines only)."""

    def __init__(self, memories_folder: Path) -> None:
        self.folder = Path(memories_folder)

    # -- paths ----------------------------------------------------------------------------

    def tenant_folder(self, tenant: str) -> Path:
        return self.folder / tenant_key(tenant)

    def scope_path(self, tenant: str, scope_key: str) -> Path:
        return self.tenant_folder(tenant) / SCOPES_DIR / f"{scope_key}.jsonl"

    def leases_folder(self, tenant: str) -> Path:
        return self.tenant_folder(tenant) / LEASES_DIR

    def _lock(self, tenant: str) -> FileLock:
        folder = self.tenant_folder(tenant)
        make_private_dirs(folder / SCOPES_DIR)
        return FileLock(folder / STORE_LOCK, mode=PRIVATE_FILE_MODE)

    # -- reading ----------------------------------------------------------------------------

    def scope_keys(self, tenant: str) -> list[str]:
        """The keys of the tenant's scopes that have a file, sorted."""
        try:
            names = os.listdir(self.tenant_folder(tenant) / SCOPES_DIR)
        except FileNotFoundError:
            return []
        return sorted(name.removesuffix(".jsonl") for name in names if name.endswith(".jsonl"))

    def read_scope(self, tenant: str, scope_key: str) -> ScopeState:
        """The state of one scope file of the tenant (empty when it has none). Entries of
        another tenant (a file copied by hand) are left out."""
        state = ScopeState()
        for number, entry in _lines(self.scope_path(tenant, scope_key)):
            if entry is None:
                state.damaged.append(number)
            elif entry.get("tenant") == tenant:
                try:
                    state.apply(entry)
                except (KeyError, TypeError, ValueError):
                    state.damaged.append(number)
        return state

    def watermarks(self, tenant: str) -> dict[str, int]:
        """Each session's watermark over every scope of the tenant (see the module doc)."""
        found: dict[str, int] = {}
        for key in self.scope_keys(tenant):
            for session, stop_seq in self.read_scope(tenant, key).watermarks.items():
                found[session] = max(found.get(session, -1), stop_seq)
        return found

    def find_artifact(self, tenant: str, artifact_id: str) -> tuple[str, ScopeState] | None:
        """The scope key and state holding ``artifact_id`` in the tenant's store, or None."""
        for key in self.scope_keys(tenant):
            state = self.read_scope(tenant, key)
            if artifact_id in state.artifacts:
                return key, state
        return None

    # -- writing ----------------------------------------------------------------------------

    def _append(self, tenant: str, scope_key: str, entries: Iterable[Mapping[str, Any]]) -> None:
        """Append entries to a scope file and fsync it (the caller holds the store lock)."""
        path = self.scope_path(tenant, scope_key)
        data = b"".join(
            orjson.dumps({"v": ENTRY_VERSION, **entry, "tenant": tenant}) + b"\n" for entry in entries
        )
        created = not path.exists()
        fd = os.open(
            path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW, PRIVATE_FILE_MODE
        )
        try:
            size = os.fstat(fd).st_size
            if size:
                # A line torn by a crash is no entry: cut it off before appending after it.
                tail = os.pread(fd, min(size, 1 << 20), max(0, size - (1 << 20)))
                if not tail.endswith(b"\n"):
                    cut = tail.rfind(b"\n")
                    os.ftruncate(fd, size - len(tail) + cut + 1 if cut >= 0 else 0)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        if created:
            _fsync_dir(path.parent)

    def commit_job(
        self,
        tenant: str,
        scope: Scope,
        session_id: str,
        stop_seq: int,
        artifacts: Iterable[Artifact],
        refused: Iterable[Mapping[str, Any]] = (),
    ) -> bool:
        """Commit one session's distillation up to ``stop_seq``: one line, fsynced. False (and
        nothing written) when the session's watermark has reached ``stop_seq`` already: another
        worker committed it (the fence; see the module doc)."""
        with self._lock(tenant):
            # Every worker distilling (session, stop) reads the same records, so the same scope:
            # that scope's file alone holds any commit of this job.
            if self.read_scope(tenant, scope.key()).watermarks.get(session_id, -1) >= stop_seq:
                return False
            self._append(
                tenant,
                scope.key(),
                [
                    {
                        "entry": "commit",
                        "at": now_timestamp(),
                        "job": {"session_id": session_id, "stop_seq": stop_seq},
                        "artifacts": [artifact.to_json() for artifact in artifacts],
                        "refused": list(refused),
                    }
                ],
            )
            return True

    def commit_consolidation(
        self,
        tenant: str,
        scope: Scope,
        inputs: Iterable[str],
        artifacts: Iterable[Artifact],
        refused: Iterable[Mapping[str, Any]] = (),
    ) -> bool:
        """Commit a consolidation of ``inputs`` (artifact ids). False (nothing written) when one
        of them is no longer live in the scope: consolidated or forgotten since it was read."""
        key = scope.key()
        with self._lock(tenant):
            state = self.read_scope(tenant, key)
            if any(i not in state.artifacts or i in state.superseded_by for i in inputs):
                return False
            self._append(
                tenant,
                key,
                [
                    {
                        "entry": "commit",
                        "at": now_timestamp(),
                        "job": {"consolidation": key},
                        "artifacts": [artifact.to_json() for artifact in artifacts],
                        "refused": list(refused),
                    }
                ],
            )
            return True

    def mark(
        self, tenant: str, scope_key: str, artifact_id: str, mark: StaleMark, evidence: Mapping[str, Any]
    ) -> bool:
        """Mark an artifact stale (once per mark); False when it had the mark already."""
        with self._lock(tenant):
            state = self.read_scope(tenant, scope_key)
            if artifact_id not in state.artifacts or mark in state.marks.get(artifact_id, ()):
                return False
            self._append(
                tenant,
                scope_key,
                [
                    {
                        "entry": "marked",
                        "at": now_timestamp(),
                        "artifact_id": artifact_id,
                        "mark": mark.value,
                        "evidence": dict(evidence),
                    }
                ],
            )
            return True

    def forget(
        self, tenant: str, *, session_id: str | None = None, scope_key: str | None = None, by: str = ""
    ) -> list[str]:
        """Remove the artifacts of a session (any citing it) or of a whole scope, and record it.

        Returns the ids removed. The scope files are rewritten without them (their text is
        gone from the store); a ``forgotten`` entry in each scope file touched says what
        went, by id, and keeps the watermarks so that nothing is distilled again. Raises
        ValueError unless exactly one of ``session_id`` and ``scope_key`` is given.
        """
        if (session_id is None) == (scope_key is None):
            raise ValueError("forget takes a session id or a scope key, not both and not neither")
        removed: list[str] = []
        with self._lock(tenant):
            keys = [scope_key] if scope_key is not None else self.scope_keys(tenant)
            for key in keys:
                assert key is not None
                state = self.read_scope(tenant, key)
                gone = {
                    artifact.artifact_id
                    for artifact in state.artifacts.values()
                    if session_id is None
                    or any(source.session_id == session_id for source in artifact.sources)
                }
                if not gone and session_id is not None:
                    continue
                kept = [
                    entry
                    for _, entry in _lines(self.scope_path(tenant, key))
                    if entry is not None and entry.get("tenant") == tenant
                ]
                rewritten: list[dict[str, Any]] = []
                for entry in kept:
                    if entry.get("entry") == "commit":
                        entry["artifacts"] = [
                            a for a in entry.get("artifacts", ()) if a["artifact_id"] not in gone
                        ]
                        if session_id is None or entry.get("job", {}).get("session_id") == session_id:
                            entry["refused"] = []  # refusals quote the model's text
                        if not entry["artifacts"] and not entry["refused"]:
                            continue  # an emptied commit goes; the forgotten entry keeps its watermark
                    elif entry.get("entry") == "marked" and entry.get("artifact_id") in gone:
                        continue
                    rewritten.append(entry)
                if session_id is None:
                    watermarks = dict(state.watermarks)
                else:
                    known = state.watermarks.get(session_id)
                    watermarks = {} if known is None else {session_id: known}
                rewritten.append(
                    {
                        "v": ENTRY_VERSION,
                        "entry": "forgotten",
                        "at": now_timestamp(),
                        "tenant": tenant,
                        "what": {"session_id": session_id} if session_id is not None else {"scope": key},
                        "by": by,
                        "artifact_ids": sorted(gone),
                        "watermarks": watermarks,
                    }
                )
                self._rewrite(tenant, key, rewritten)
                removed += sorted(gone)
        return removed

    def _rewrite(self, tenant: str, scope_key: str, entries: list[dict[str, Any]]) -> None:
        path = self.scope_path(tenant, scope_key)
        temporary = path.with_name(f".{path.name}.rewrite-{os.getpid()}")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, PRIVATE_FILE_MODE)
        try:
            data = b"".join(orjson.dumps(entry) + b"\n" for entry in entries)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)
        _fsync_dir(path.parent)
