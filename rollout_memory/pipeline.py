"""The memory pipeline (``rollout memory run``): a client of the reader, beside the writer.

One :meth:`MemoryPipeline.run` (docs/memory.md "The pipeline"):

1. **Select**: list the tenant's sessions (ListSessions); a session whose stop record's
   seq is above its watermark (memory_store.store) is a job ``(session, stop seq)``.
2. **Phase 1, per session**: take the session's lease (rollout_memory.leases; a session
   leased by another worker is left for it), read its records up to the stop through the
   reader (WatchSession, the stored lines), ask the extractor, check every result against
   the records (shared.memory: stamped provenance, cited seqs that exist, supersession with
   evidence), read the records again and check the stamped sources once more (a source
   changed since is refused), and commit the job's artifacts as one fenced line.
   Extractor failures are retried with exponential backoff; a result with refusals is
   asked again, and the last attempt's result is committed with its refusals recorded.
   A fork's copied lines (up to its ``forked_from`` seq) are its source's: only what
   follows them is distilled.
3. **Phase 2, per scope touched**: the scope's current memories go to the extractor to be
   consolidated; a merged memory's sources are the union of its inputs' (never re-stamped),
   and it supersedes each input with that input's last citation as evidence.
4. **Staleness sweep** (rollout_memory.staleness): deleted, changed, compacted, resumed
   over damage or forked sources mark the artifacts citing them.

Tenancy: the pipeline serves one tenant (its credentials' with authentication); it lists
that tenant's sessions only, refuses a session whose session_meta names another, and writes
under that tenant's folder only.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from memory_store.store import MemoryStore, ScopeState
from rollout_client import NotFoundError, RolloutClient
from rollout_memory.extractors import (
    CONSOLIDATE_PROMPT_VERSION,
    EXTRACT_PROMPT_VERSION,
    Extractor,
    ExtractorError,
)
from rollout_memory.leases import Lease, acquire, held, release
from rollout_memory.sources import read_source_records
from rollout_memory.staleness import sweep
from shared.errors import clip
from shared.memory import (
    BAD_RESULT,
    Artifact,
    ArtifactKind,
    Generator,
    ProvenanceError,
    Scope,
    SourceRecord,
    Supersession,
    check_source,
    check_supersession,
    merge_sources,
    new_artifact_id,
    scope_of,
    stamp_source,
)
from shared.records import now_timestamp, parse_timestamp

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PipelineConfig:
    """``worker_id`` names the worker (a restarted worker with the same id takes its leases
    back); ``lease_seconds`` how long a lease holds; ``attempts`` extractor calls per job;
    backoff doubles from ``backoff_seconds`` up to ``max_backoff_seconds``."""

    worker_id: str
    lease_seconds: float = 600.0
    attempts: int = 3
    backoff_seconds: float = 1.0
    max_backoff_seconds: float = 60.0


def _sort_time(stamp: str) -> str:
    """An RFC 3339 time as a string that sorts as the time does (microseconds, UTC); "" first."""
    try:
        return parse_timestamp(stamp).strftime("%Y-%m-%dT%H:%M:%S.%f")
    except ValueError:
        return ""


@dataclass(frozen=True, slots=True)
class Job:
    """Distill ``session_id`` up to its stop record ``stop_seq``, after its watermark."""

    session_id: str
    stop_seq: int
    watermark: int


@dataclass
class RunReport:
    """What one run did: sessions committed, left to another worker's lease, found committed
    by another worker (the fence), failed (with the last error); scopes consolidated; results
    refused (reason, message); staleness marks added (artifact id, mark)."""

    distilled: list[str] = field(default_factory=list)
    leased_elsewhere: list[str] = field(default_factory=list)
    committed_elsewhere: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    consolidated: list[str] = field(default_factory=list)
    refused: list[dict[str, Any]] = field(default_factory=list)
    marked: list[tuple[str, str]] = field(default_factory=list)


def _refusal(reason: str, message: str, text: object) -> dict[str, Any]:
    return {"reason": reason, "message": message, "text": clip(text, 200)}


def _seqs(value: object) -> list[int]:
    if not isinstance(value, list) or not all(type(seq) is int for seq in value):
        raise ProvenanceError(BAD_RESULT, f"cites must be a list of integer seqs, not {clip(value, 60)}")
    return list(value)


class MemoryPipeline:
    """The pipeline of one tenant over one reader and one artifact store (see the module doc).
    ``sleep`` and ``clock`` (POSIX seconds) are parameters so that tests own time."""

    def __init__(
        self,
        client: RolloutClient,
        store: MemoryStore,
        extractor: Extractor,
        *,
        tenant: str,
        config: PipelineConfig,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.store = store
        self.extractor = extractor
        self.tenant = tenant
        self.config = config
        self._sleep = sleep
        self._clock = clock

    # -- reading sources ----------------------------------------------------------------------

    def read_records(self, session_id: str, upto_seq: int) -> list[SourceRecord]:
        """The session's records with seq <= ``upto_seq`` as stored (WatchSession), checked to
        be the tenant's. Raises NotFoundError (also for another tenant's session)."""
        return read_source_records(self.client, session_id, upto_seq, tenant=self.tenant)

    # -- the run ------------------------------------------------------------------------------

    def run(self) -> RunReport:
        """One pass: select, phase 1 per session, phase 2 per scope touched, staleness sweep."""
        report = RunReport()
        listed, jobs = self.select()
        touched: dict[str, Scope] = {}
        for job in jobs:
            scope = self.distill(job, report)
            if scope is not None:
                touched[scope.key()] = scope
        for scope in touched.values():
            self.consolidate(scope, report)
        self.sweep(listed, report)
        return report

    def select(self) -> tuple[list[str], list[Job]]:
        """The tenant's listed session ids, and the jobs: sessions whose stop is above their
        watermark, oldest last record first, so that newer evidence is distilled after what it
        may supersede (docs/memory.md §4.2)."""
        watermarks = self.store.watermarks(self.tenant)
        listed: list[str] = []
        dated: list[tuple[str, str, Job]] = []
        for page in self.client.list_sessions(tenant=self.tenant):
            for summary in page.sessions:
                listed.append(summary.session_id)
                facts = summary.stop_facts
                mark = watermarks.get(summary.session_id, -1)
                if facts.found and facts.has_stop_record and facts.stop_seq > mark:
                    job = Job(summary.session_id, facts.stop_seq, mark)
                    dated.append(
                        (_sort_time(summary.updated_at or summary.created_at), summary.session_id, job)
                    )
        dated.sort(key=lambda entry: entry[:2])
        return listed, [job for _, _, job in dated]

    def _backoff(self, attempt: int) -> None:
        self._sleep(min(self.config.max_backoff_seconds, self.config.backoff_seconds * 2**attempt))

    def _ask(
        self, request: Mapping[str, Any], check: Callable[[dict[str, Any]], tuple[Any, list[dict[str, Any]]]]
    ) -> tuple[Any, list[dict[str, Any]]]:
        """Ask the extractor with retries: an error or a result with refusals is asked again
        after a backoff; the last attempt's checked result is returned. Raises ExtractorError
        when every attempt failed."""
        error: ExtractorError | None = None
        checked: tuple[Any, list[dict[str, Any]]] | None = None
        for attempt in range(self.config.attempts):
            if attempt:
                self._backoff(attempt - 1)
            try:
                result = self.extractor.run(request)
            except ExtractorError as exc:
                log.warning("extractor attempt %d failed: %s", attempt + 1, exc)
                error = exc
                continue
            checked = check(result)
            if not checked[1]:
                return checked
        if checked is not None:
            return checked
        assert error is not None
        raise error

    def distill(self, job: Job, report: RunReport) -> Scope | None:
        """Phase 1 for one job; the scope committed to, or None when nothing was committed."""
        lease = acquire(
            self.store.leases_folder(self.tenant),
            job.session_id,
            self.config.worker_id,
            self.config.lease_seconds,
            self._clock,
        )
        if lease is None:
            report.leased_elsewhere.append(job.session_id)
            return None
        try:
            return self._distill_leased(job, lease, report)
        finally:
            release(lease)

    def _distill_leased(self, job: Job, lease: Lease, report: RunReport) -> Scope | None:
        if self.store.watermarks(self.tenant).get(job.session_id, -1) >= job.stop_seq:
            report.committed_elsewhere.append(job.session_id)
            return None
        try:
            records = self.read_records(job.session_id, job.stop_seq)
        except NotFoundError as exc:
            report.failed[job.session_id] = str(exc)
            return None
        first = job.watermark + 1
        forked = records[0].payload.get("forked_from")
        if isinstance(forked, dict) and type(forked.get("seq")) is int:
            first = max(first, forked["seq"] + 1)  # the copied lines are the source's
        scope = scope_of(records)
        state = self.store.read_scope(self.tenant, scope.key())
        request = {
            "task": "extract",
            "prompt_version": EXTRACT_PROMPT_VERSION,
            "session_id": job.session_id,
            "scope": scope.to_json(),
            "messages": [
                {"seq": r.seq, "role": r.payload.get("role", ""), "text": r.payload.get("content", "")}
                for r in records
                if r.type == "message" and first <= r.seq <= job.stop_seq
            ],
            "memories": [
                {"artifact_id": a.artifact_id, "text": a.text}
                for a in state.live()
                if a.kind == ArtifactKind.MEMORY
            ],
        }
        try:
            artifacts, refused = self._ask(
                request, lambda result: self.check_extraction(job, records, scope, state, result)
            )
        except ExtractorError as exc:
            report.failed[job.session_id] = str(exc)
            return None
        artifacts, late = self._recheck(artifacts)
        refused += late
        if not held(lease):
            log.warning("the lease on session %s passed during its job; the commit is fenced", job.session_id)
        if not self.store.commit_job(self.tenant, scope, job.session_id, job.stop_seq, artifacts, refused):
            report.committed_elsewhere.append(job.session_id)
            return None
        report.distilled.append(job.session_id)
        report.refused += refused
        return scope

    def _recheck(self, artifacts: Sequence[Artifact]) -> tuple[list[Artifact], list[dict[str, Any]]]:
        """Check every artifact's sources against their sessions read again: a source changed
        since it was stamped (or read) refuses the artifact."""
        cache: dict[tuple[str, int], list[SourceRecord] | ProvenanceError] = {}
        kept: list[Artifact] = []
        refused: list[dict[str, Any]] = []
        for artifact in artifacts:
            try:
                for source in artifact.sources:
                    key = (source.session_id, source.last_seq)
                    if key not in cache:
                        try:
                            cache[key] = self.read_records(source.session_id, source.last_seq)
                        except NotFoundError as exc:
                            cache[key] = ProvenanceError(
                                "source_changed", f"session {source.session_id} cannot be read: {exc}"
                            )
                    records = cache[key]
                    if isinstance(records, ProvenanceError):
                        raise records
                    check_source(source, records)
            except ProvenanceError as exc:
                refused.append(_refusal(exc.reason, str(exc), artifact.text))
                continue
            kept.append(artifact)
        return kept, refused

    def check_extraction(
        self,
        job: Job,
        records: Sequence[SourceRecord],
        scope: Scope,
        state: ScopeState,
        result: Mapping[str, Any],
    ) -> tuple[list[Artifact], list[dict[str, Any]]]:
        """The artifacts a phase-1 result makes, provenance stamped from ``records``, and the
        refusals (reason, message, text) of every item that fails a check."""
        generator = Generator(self.extractor.model, EXTRACT_PROMPT_VERSION)
        now = now_timestamp()
        live = {a.artifact_id: a for a in state.live()}
        artifacts: list[Artifact] = []
        refused: list[dict[str, Any]] = []
        items: list[tuple[ArtifactKind, Any]] = []
        summary = result.get("summary")
        if summary is not None:
            items.append((ArtifactKind.ROLLOUT_SUMMARY, summary))
        memories = result.get("memories", [])
        items += [
            (ArtifactKind.MEMORY, item) for item in (memories if isinstance(memories, list) else [memories])
        ]
        for kind, item in items:
            try:
                if not isinstance(item, dict) or not isinstance(item.get("text"), str) or not item["text"]:
                    raise ProvenanceError(BAD_RESULT, "an item needs a non-empty text")
                source = stamp_source(job.session_id, records, _seqs(item.get("cites")))
                supersedes: list[Supersession] = []
                for entry in item.get("supersedes", []) if kind == ArtifactKind.MEMORY else []:
                    if not isinstance(entry, dict) or type(entry.get("evidence_seq")) is not int:
                        raise ProvenanceError(
                            BAD_RESULT, "a supersession names artifact_id and an integer evidence_seq"
                        )
                    supersession = Supersession(
                        str(entry.get("artifact_id")), job.session_id, entry["evidence_seq"]
                    )
                    check_supersession(supersession, [source], live)
                    supersedes.append(supersession)
            except ProvenanceError as exc:
                refused.append(
                    _refusal(exc.reason, str(exc), item.get("text") if isinstance(item, dict) else item)
                )
                continue
            artifacts.append(
                Artifact(
                    artifact_id=new_artifact_id(),
                    kind=kind,
                    text=item["text"],
                    tenant=self.tenant,
                    scope=scope,
                    created_at=now,
                    generator=generator,
                    sources=(source,),
                    supersedes=tuple(supersedes),
                    stop_seq=job.stop_seq if kind == ArtifactKind.ROLLOUT_SUMMARY else -1,
                )
            )
        return artifacts, refused

    # -- phase 2 ------------------------------------------------------------------------------

    def consolidate(self, scope: Scope, report: RunReport) -> None:
        """Phase 2 for one scope (leased as ``scope-<key>``); nothing when it has fewer than two
        current memories."""
        key = scope.key()
        lease = acquire(
            self.store.leases_folder(self.tenant),
            f"scope-{key}",
            self.config.worker_id,
            self.config.lease_seconds,
            self._clock,
        )
        if lease is None:
            return
        try:
            state = self.store.read_scope(self.tenant, key)
            live = {a.artifact_id: a for a in state.live() if a.kind == ArtifactKind.MEMORY}
            if len(live) < 2:
                return
            request = {
                "task": "consolidate",
                "prompt_version": CONSOLIDATE_PROMPT_VERSION,
                "scope": scope.to_json(),
                "memories": [{"artifact_id": i, "text": a.text} for i, a in live.items()],
            }
            try:
                artifacts, refused = self._ask(
                    request, lambda result: self.check_consolidation(scope, live, result)
                )
            except ExtractorError as exc:
                report.failed[f"scope-{key}"] = str(exc)
                return
            artifacts, late = self._recheck(artifacts)
            refused += late
            if not artifacts:
                report.refused += refused
                return
            inputs = [i for artifact in artifacts for i in artifact.derived_from]
            if self.store.commit_consolidation(self.tenant, scope, inputs, artifacts, refused):
                report.consolidated.append(key)
                report.refused += refused
        finally:
            release(lease)

    def check_consolidation(
        self, scope: Scope, live: Mapping[str, Artifact], result: Mapping[str, Any]
    ) -> tuple[list[Artifact], list[dict[str, Any]]]:
        """The merged memories of a phase-2 result, with their inputs' sources, and the refusals."""
        generator = Generator(self.extractor.model, CONSOLIDATE_PROMPT_VERSION)
        now = now_timestamp()
        used: set[str] = set()
        artifacts: list[Artifact] = []
        refused: list[dict[str, Any]] = []
        memories = result.get("memories", [])
        for item in memories if isinstance(memories, list) else [memories]:
            try:
                if not isinstance(item, dict) or not isinstance(item.get("text"), str) or not item["text"]:
                    raise ProvenanceError(BAD_RESULT, "a merged memory needs a non-empty text")
                inputs = item.get("from")
                if not isinstance(inputs, list) or not inputs or not all(isinstance(i, str) for i in inputs):
                    raise ProvenanceError(
                        BAD_RESULT, "a merged memory names the artifact ids it merges in 'from'"
                    )
                for artifact_id in inputs:
                    if artifact_id not in live:
                        raise ProvenanceError(
                            "unknown_artifact",
                            f"merges {clip(artifact_id, 60)}, not a current memory of the scope",
                        )
                    if artifact_id in used:
                        raise ProvenanceError(BAD_RESULT, f"{artifact_id} is merged into two memories")
                merged = [live[i] for i in dict.fromkeys(inputs)]
                sources = merge_sources(merged)
                supersedes = tuple(_merge_supersession(artifact) for artifact in merged)
                for entry in supersedes:
                    check_supersession(entry, sources, live)
            except ProvenanceError as exc:
                refused.append(
                    _refusal(exc.reason, str(exc), item.get("text") if isinstance(item, dict) else item)
                )
                continue
            used.update(inputs)
            artifacts.append(
                Artifact(
                    artifact_id=new_artifact_id(),
                    kind=ArtifactKind.MEMORY,
                    text=item["text"],
                    tenant=self.tenant,
                    scope=scope,
                    created_at=now,
                    generator=generator,
                    sources=sources,
                    supersedes=supersedes,
                    derived_from=tuple(a.artifact_id for a in merged),
                )
            )
        return artifacts, refused

    def sweep(self, listed: Sequence[str], report: RunReport) -> None:
        """Mark the artifacts whose sources went stale (rollout_memory.staleness)."""
        report.marked += sweep(self.client, self.store, tenant=self.tenant, listed=listed)


def _merge_supersession(artifact: Artifact) -> Supersession:
    """A merged input's supersession: its evidence is the input's own last citation."""
    source = artifact.sources[-1]
    return Supersession(artifact.artifact_id, source.session_id, source.citations[-1].seq)
