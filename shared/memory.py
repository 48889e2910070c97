"""Memory artifacts: their format and the provenance rules (docs/memory.md).

A memory artifact is what a later session may learn from earlier ones, kept apart from
the rollouts (shared.layout ``memories/``, never read by replay). Two kinds
(:class:`ArtifactKind`): ``rollout_summary`` (one per session and distilled stop) and
``memory`` (one fact or note). One artifact, as stored (compact JSON, orjson)::

    {"artifact_id": "mem_0193…", "kind": "memory", "text": "The Pro plan costs $25.",
     "tenant": "acme", "scope": {"cwd": "/src/app", "repository": "", "branch": "", "agent": "director"},
     "created_at": "2026-12-02T18:00:00.000000Z",
     "generator": {"model": "gpt-x", "prompt_version": "memory-extract/v1"},
     "sources": [{"session_id": "0193…", "first_seq": 3, "last_seq": 5,
                  "lines_digest": "sha256:lines:v1:…",
                  "citations": [{"seq": 3, "kind": "user", "role": "user", "ts": "…"},
                                {"seq": 5, "kind": "tool_output", "role": "tool", "ts": "…"}]}],
     "supersedes": [{"artifact_id": "mem_0192…", "evidence": {"session_id": "0193…", "seq": 5}}],
     "derived_from": [], "stop_seq": -1}

**Provenance is the ledger's, never the model's.** The extractor names seqs only; each
source (:class:`Source`) is stamped by :func:`stamp_source` from the session's records
as read through the reader: every cited seq must be a ``message`` record of the session
(:class:`ProvenanceError` otherwise), its kind (:class:`SourceKind`) comes from the
record's role (or ``imported`` for a session an importer wrote), its time from the
record's ``ts``, and ``lines_digest`` pins every line from the first to the last cited
seq: shared.digest's lines digest (:class:`shared.digest.LinesDigest`) over those lines'
checks (a line's ``crc32c``, or the CRC32C of its bytes when it has none). Whatever the
model says about who said what is dropped. :func:`check_source` recomputes a stored
source against the records read again: a seq gone, or a changed line in the range,
refuses it with the reason.

**Supersession is explicit**: an artifact lists what it supersedes, each with its
evidence (a session and seq among the artifact's own citations, :func:`check_supersession`);
a superseded artifact stays stored and readable with its provenance, and is left out of
reads only unless asked for.

Consolidation (phase 2) never stamps anything new: a consolidated memory's sources are
the union of its inputs' sources (:func:`merge_sources`), so a tool output stays a tool
output through any number of consolidations.
"""

from __future__ import annotations

import enum
import hashlib
import uuid
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, assert_never

import crc32c
import orjson

from shared.digest import LINE_CHECKS_TYPECODE, LinesDigest
from shared.records import LINE_CHECK_KEY, RESUMED_EVENT, RecordType, line_check, record_of_line

#: The most artifacts one GetMemories answer holds (docs/memory.md §6.1); 0 asks for 20.
MAX_MEMORIES_LIMIT = 1000

#: Version of the artifact line format.
ARTIFACT_VERSION = 1
#: Originators the importers give the sessions they write (rollout_cli.importers): their
#: messages are ``imported`` whatever their role.
IMPORTED_ORIGINATORS = frozenset({"codex", "claude-code"})


class ArtifactKind(enum.StrEnum):
    """What an artifact is: a session's summary at one stop, or one fact or note."""

    ROLLOUT_SUMMARY = "rollout_summary"
    MEMORY = "memory"


class SourceKind(enum.StrEnum):
    """Who a cited message comes from, as its record says (never as the model says)."""

    USER = "user"
    ASSISTANT = "assistant"
    TOOL_OUTPUT = "tool_output"
    #: A system or developer message: the instructions of the source session.
    INSTRUCTION = "instruction"
    #: A message of a session an importer wrote from another agent's files.
    IMPORTED = "imported"


class StaleMark(enum.StrEnum):
    """Why an artifact's source may no longer say what it said (docs/memory.md Staleness)."""

    FORKED = "forked"
    COMPACTED = "compacted"
    RESUMED_OVER_DAMAGE = "resumed_over_damage"
    DELETED = "deleted"
    CHANGED = "changed"


class ProvenanceError(ValueError):
    """A result refused against its sources; ``reason`` is a word of :data:`REFUSAL_REASONS`,
    the message says which seq or artifact and why. Raised by the pipeline's checks, never
    mapped to a gRPC status (no RPC serves it)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason


#: The reasons a result is refused.
NO_SUCH_SEQ = "no_such_seq"
NOT_A_MESSAGE = "not_a_message"
SOURCE_CHANGED = "source_changed"
NO_CITATION = "no_citation"
BAD_SUPERSESSION = "bad_supersession"
UNKNOWN_ARTIFACT = "unknown_artifact"
#: The result is not of the extractor's shape (rollout_memory.extractors).
BAD_RESULT = "bad_result"
REFUSAL_REASONS = frozenset(
    {NO_SUCH_SEQ, NOT_A_MESSAGE, SOURCE_CHANGED, NO_CITATION, BAD_SUPERSESSION, UNKNOWN_ARTIFACT, BAD_RESULT}
)


@dataclass(frozen=True, slots=True)
class SourceRecord:
    """One record of a source session as read through the reader (WatchSession): its seq,
    type, ts, payload and stored line (bytes, no ``\\n``)."""

    seq: int
    type: str
    ts: str
    payload: Mapping[str, Any]
    line: bytes


@dataclass(frozen=True, slots=True)
class Scope:
    """Where an artifact applies: the source session's cwd, repository, branch and agent
    (from its session_meta and turn contexts, never from the model)."""

    cwd: str = ""
    repository: str = ""
    branch: str = ""
    agent: str = ""

    def to_json(self) -> dict[str, str]:
        return {"cwd": self.cwd, "repository": self.repository, "branch": self.branch, "agent": self.agent}

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> Scope:
        return cls(*(str(value.get(name, "")) for name in ("cwd", "repository", "branch", "agent")))

    def key(self) -> str:
        """The scope's stable file-name key: 32 hex digits of BLAKE2b-128 over its canonical JSON."""
        canonical = orjson.dumps(self.to_json(), option=orjson.OPT_SORT_KEYS)
        return hashlib.blake2b(b"rollout-ledger/memory-scope/v1\x00" + canonical, digest_size=16).hexdigest()


@dataclass(frozen=True, slots=True)
class Generator:
    """What produced an artifact's text: the extractor's model and prompt version."""

    model: str
    prompt_version: str


@dataclass(frozen=True, slots=True)
class Citation:
    """One cited message: its seq, kind, role and time, from its record."""

    seq: int
    kind: SourceKind
    role: str
    ts: str


@dataclass(frozen=True, slots=True)
class Source:
    """The cited messages of one session and the lines digest of the range they span
    (``first_seq`` .. ``last_seq``, inclusive)."""

    session_id: str
    first_seq: int
    last_seq: int
    lines_digest: str
    citations: tuple[Citation, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "first_seq": self.first_seq,
            "last_seq": self.last_seq,
            "lines_digest": self.lines_digest,
            "citations": [
                {"seq": c.seq, "kind": c.kind.value, "role": c.role, "ts": c.ts} for c in self.citations
            ],
        }

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> Source:
        return cls(
            str(value["session_id"]),
            int(value["first_seq"]),
            int(value["last_seq"]),
            str(value["lines_digest"]),
            tuple(
                Citation(int(c["seq"]), SourceKind(c["kind"]), str(c["role"]), str(c["ts"]))
                for c in value["citations"]
            ),
        )


@dataclass(frozen=True, slots=True)
class Supersession:
    """An artifact superseded, and the evidence: a session and seq cited by the superseding one."""

    artifact_id: str
    evidence_session_id: str
    evidence_seq: int

    def to_json(self) -> dict[str, Any]:
        return {
            "artifact_id": self.artifact_id,
            "evidence": {"session_id": self.evidence_session_id, "seq": self.evidence_seq},
        }

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> Supersession:
        evidence = value["evidence"]
        return cls(str(value["artifact_id"]), str(evidence["session_id"]), int(evidence["seq"]))


@dataclass(frozen=True, slots=True)
class Artifact:
    """One memory artifact (see the module doc for its JSON). ``stop_seq`` is the distilled
    stop's seq for a ``rollout_summary`` (-1 for a memory); ``derived_from`` the artifacts a
    consolidated memory was made from."""

    artifact_id: str
    kind: ArtifactKind
    text: str
    tenant: str
    scope: Scope
    created_at: str
    generator: Generator
    sources: tuple[Source, ...]
    supersedes: tuple[Supersession, ...] = ()
    derived_from: tuple[str, ...] = ()
    stop_seq: int = -1

    def to_json(self) -> dict[str, Any]:
        return {
            "artifact_id": self.artifact_id,
            "kind": self.kind.value,
            "text": self.text,
            "tenant": self.tenant,
            "scope": self.scope.to_json(),
            "created_at": self.created_at,
            "generator": {"model": self.generator.model, "prompt_version": self.generator.prompt_version},
            "sources": [source.to_json() for source in self.sources],
            "supersedes": [entry.to_json() for entry in self.supersedes],
            "derived_from": list(self.derived_from),
            "stop_seq": self.stop_seq,
        }

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> Artifact:
        """Raises KeyError, ValueError or TypeError for an object that is not an artifact."""
        generator = value["generator"]
        return cls(
            artifact_id=str(value["artifact_id"]),
            kind=ArtifactKind(value["kind"]),
            text=str(value["text"]),
            tenant=str(value["tenant"]),
            scope=Scope.from_json(value["scope"]),
            created_at=str(value["created_at"]),
            generator=Generator(str(generator["model"]), str(generator["prompt_version"])),
            sources=tuple(Source.from_json(source) for source in value["sources"]),
            supersedes=tuple(Supersession.from_json(entry) for entry in value.get("supersedes", ())),
            derived_from=tuple(str(item) for item in value.get("derived_from", ())),
            stop_seq=int(value.get("stop_seq", -1)),
        )

    def cited(self) -> Iterable[tuple[str, int]]:
        """Every (session id, seq) the artifact cites."""
        for source in self.sources:
            for citation in source.citations:
                yield source.session_id, citation.seq


def new_artifact_id() -> str:
    """A fresh artifact id: ``mem_`` + 32 hex digits of a random UUID."""
    return "mem_" + uuid.uuid4().hex


def source_kind(role: str, imported: bool) -> SourceKind:
    """The kind of a cited ``message`` record with ``role``, in a session an importer wrote or not.

    Raises ProvenanceError (``not_a_message``) for a role no message has.
    """
    if imported:
        return SourceKind.IMPORTED
    match role:
        case "user":
            return SourceKind.USER
        case "assistant":
            return SourceKind.ASSISTANT
        case "tool":
            return SourceKind.TOOL_OUTPUT
        case "system" | "developer":
            return SourceKind.INSTRUCTION
    raise ProvenanceError(NOT_A_MESSAGE, f"a message of role {role!r} cannot be cited")


def is_imported(records: Sequence[SourceRecord]) -> bool:
    """Whether the session was written by an importer (its session_meta's originator)."""
    return bool(records) and records[0].payload.get("originator") in IMPORTED_ORIGINATORS


def line_check_value(record: SourceRecord, seq: int) -> int:
    """A line's check as the lines digest takes it: its ``crc32c`` when it has one, the CRC32C
    of its whole bytes otherwise (shared.digest). Raises ProvenanceError (``source_changed``)
    when the line fails its check (shared.records.line_check): its bytes changed."""
    parsed = record_of_line(record.line)
    if parsed is None or line_check(record.line.lstrip(b"\x00"), parsed) is False:
        raise ProvenanceError(SOURCE_CHANGED, f"the line of seq {seq} fails its check: its bytes changed")
    stored = parsed.get(LINE_CHECK_KEY)
    return stored if type(stored) is int else crc32c.crc32c(record.line)


def range_digest(by_seq: Mapping[int, SourceRecord], first: int, last: int) -> str:
    """The lines digest of the records ``first`` .. ``last`` (inclusive); raises ProvenanceError
    (``no_such_seq``) when one of them is missing."""
    checks = array(LINE_CHECKS_TYPECODE)
    for seq in range(first, last + 1):
        record = by_seq.get(seq)
        if record is None:
            raise ProvenanceError(NO_SUCH_SEQ, f"seq {seq} of the cited range is not in the session")
        checks.append(line_check_value(record, seq))
    lines = LinesDigest()
    lines.add(checks)
    return lines.result()


def stamp_source(session_id: str, records: Sequence[SourceRecord], cited: Iterable[int]) -> Source:
    """The provenance of ``cited`` seqs of session ``session_id``, stamped from its ``records``.

    Raises ProvenanceError: ``no_citation`` (nothing cited), ``no_such_seq`` (a seq the
    session does not hold), ``not_a_message`` (a seq that is not a message record).
    """
    seqs = sorted(set(cited))
    if not seqs:
        raise ProvenanceError(NO_CITATION, "a result must cite at least one message of its session")
    by_seq = {record.seq: record for record in records}
    imported = is_imported(records)
    citations: list[Citation] = []
    for seq in seqs:
        record = by_seq.get(seq)
        if record is None:
            raise ProvenanceError(NO_SUCH_SEQ, f"seq {seq} is not a record of session {session_id}")
        if record.type != RecordType.MESSAGE:
            raise ProvenanceError(
                NOT_A_MESSAGE, f"seq {seq} of session {session_id} is a {record.type} record"
            )
        citations.append(
            Citation(
                seq,
                source_kind(str(record.payload.get("role", "")), imported),
                str(record.payload.get("role", "")),
                record.ts,
            )
        )
    return Source(session_id, seqs[0], seqs[-1], range_digest(by_seq, seqs[0], seqs[-1]), tuple(citations))


def check_source(source: Source, records: Sequence[SourceRecord]) -> None:
    """Check a stored source against its session's records read again.

    Raises ProvenanceError: ``no_such_seq`` when a cited seq is gone, ``source_changed``
    when a line of the cited range or a cited message's kind differs from what was stamped.
    """
    by_seq = {record.seq: record for record in records}
    if range_digest(by_seq, source.first_seq, source.last_seq) != source.lines_digest:
        raise ProvenanceError(
            SOURCE_CHANGED,
            f"session {source.session_id} seqs {source.first_seq}..{source.last_seq} changed since they were cited",
        )
    again = stamp_source(source.session_id, records, (citation.seq for citation in source.citations))
    if again.citations != source.citations:
        raise ProvenanceError(SOURCE_CHANGED, f"the cited messages of session {source.session_id} changed")


def merge_sources(artifacts: Iterable[Artifact]) -> tuple[Source, ...]:
    """The sources of a consolidated memory: every source of its inputs, once each, in order
    (never re-stamped, so every citation keeps its kind)."""
    merged: list[Source] = []
    for artifact in artifacts:
        for source in artifact.sources:
            if source not in merged:
                merged.append(source)
    return tuple(merged)


def check_supersession(entry: Supersession, sources: Sequence[Source], known: Mapping[str, Artifact]) -> None:
    """Check that ``entry`` names a stored artifact and evidence the superseding artifact cites.

    Raises ProvenanceError: ``unknown_artifact`` or ``bad_supersession``.
    """
    if entry.artifact_id not in known:
        raise ProvenanceError(
            UNKNOWN_ARTIFACT, f"supersedes {entry.artifact_id!r}, which the scope does not hold"
        )
    for source in sources:
        if source.session_id == entry.evidence_session_id and any(
            citation.seq == entry.evidence_seq for citation in source.citations
        ):
            return
    raise ProvenanceError(
        BAD_SUPERSESSION,
        f"the evidence of superseding {entry.artifact_id} (session {entry.evidence_session_id} seq"
        f" {entry.evidence_seq}) is not among the superseding artifact's citations",
    )


def scope_of(records: Sequence[SourceRecord]) -> Scope:
    """A session's scope from its records: cwd and agent from its session_meta, repository and
    branch from its last turn_context that names them (``repository`` / ``branch``, or Codex's
    ``git.repository_url`` / ``git.branch``), the cwd of a later turn_context winning."""
    meta = records[0].payload if records and records[0].type == RecordType.SESSION_META else {}
    cwd = str(meta.get("cwd", ""))
    repository = branch = ""
    for record in records:
        if record.type != RecordType.TURN_CONTEXT:
            continue
        context = record.payload
        git = context.get("git")
        git = git if isinstance(git, dict) else {}
        cwd = str(context.get("cwd") or cwd)
        repository = str(context.get("repository") or git.get("repository_url") or repository)
        branch = str(context.get("branch") or git.get("branch") or branch)
    return Scope(cwd=cwd, repository=repository, branch=branch, agent=str(meta.get("agent_name", "")))


def stale_mark_of(record: SourceRecord, after_seq: int) -> StaleMark | None:
    """The mark a record read after an artifact's last cited seq (``after_seq``) puts on it:
    a compaction, or a Resume forced over damage; None for any other record."""
    if record.seq <= after_seq:
        return None
    try:
        kind: RecordType | None = RecordType(record.type)
    except ValueError:  # a newer writer's type: no mark
        kind = None
    match kind:
        case RecordType.COMPACTED:
            return StaleMark.COMPACTED
        case RecordType.EVENT:
            body = record.payload.get("body")
            if (
                record.payload.get("kind") == RESUMED_EVENT
                and isinstance(body, dict)
                and body.get("forced")
                and body.get("damage")
            ):
                return StaleMark.RESUMED_OVER_DAMAGE
            return None
        case (
            RecordType.SESSION_META
            | RecordType.MESSAGE
            | RecordType.REASONING
            | RecordType.TURN_CONTEXT
            | RecordType.AGENT_CHECKPOINT
            | RecordType.STOP
            | RecordType.RETRACTION
            | None
        ):
            return None
        case _ as unreachable:
            assert_never(unreachable)


@dataclass(frozen=True, slots=True)
class MemoryView:
    """One artifact as a read returns it: the artifact, its age in seconds at the time asked
    about, the supersession that replaced it (None while current) and its staleness marks."""

    artifact: Artifact
    age_seconds: float
    superseded_by: str | None = None
    superseded_evidence: Supersession | None = None
    marks: tuple[StaleMark, ...] = ()

    @property
    def superseded(self) -> bool:
        return self.superseded_by is not None


@dataclass(frozen=True, slots=True)
class ResolvedMessage:
    """One cited message as its source session holds it now: session, seq, the kind stamped
    when it was cited, the record's payload and its stored line (bytes, no ``\\n``)."""

    session_id: str
    seq: int
    kind: SourceKind
    payload: dict[str, Any]
    line: bytes


@dataclass(frozen=True, slots=True)
class ResolvedProvenance:
    """An artifact's cited messages, and whether each source still says what was cited
    (``problems``: the reasons it does not, empty when every source verifies)."""

    artifact_id: str
    messages: tuple[ResolvedMessage, ...]
    problems: tuple[str, ...]


def source_record_of_line(line: bytes) -> SourceRecord | None:
    """The :class:`SourceRecord` a stored line (no ``\\n``) holds, or None for a line that holds
    no record (damage: shared.records.record_of_line), which can never be cited."""
    record = record_of_line(line)
    if record is None:
        return None
    ts = record.get("ts")
    return SourceRecord(
        record["seq"], record["type"], ts if isinstance(ts, str) else "", record["payload"], line
    )


def holds_tenants_session(records: Sequence[SourceRecord], tenant: str) -> bool:
    """Whether ``records`` (a session's, from seq 0) are those of a session of ``tenant``: its
    session_meta names that tenant. Every reader of source records checks it (a session of
    another tenant is read as one that does not exist)."""
    return bool(records) and records[0].seq == 0 and records[0].payload.get("tenant") == tenant
