"""What the ledger answers, as plain frozen dataclasses (reader.proto / writer.proto responses).

Digest statuses are the strings ``verified``, ``mismatch`` and ``no_checkpoint``
(docs/spec.md §5); stop kinds the raw strings the ledger stores (``paused``, ...).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from rollout.v1 import reader_pb2, records_pb2, writer_pb2
from rollout_client._records import MessageRef, message_to_dict
from shared.memory import MemoryView
from shared.memory_wire import view_from_proto
from shared.rounds import Round
from shared.wire import round_from_proto

_DIGEST_STATUS: dict[int, str] = {
    reader_pb2.DIGEST_STATUS_VERIFIED: "verified",
    reader_pb2.DIGEST_STATUS_MISMATCH: "mismatch",
    reader_pb2.DIGEST_STATUS_NO_CHECKPOINT: "no_checkpoint",
}


def digest_status_name(value: int) -> str:
    """``verified`` / ``mismatch`` / ``no_checkpoint`` ("" when unspecified)."""
    return _DIGEST_STATUS.get(value, "")


@dataclass(frozen=True)
class DegradedEntry:
    """A place where replay is not an exact restoration: ``kind`` (e.g. ``compacted_rebuild``),
    1-based ``line`` and byte ``offset`` in the session file (0 when not tied to a line)."""

    kind: str
    line: int
    offset: int
    detail: str

    @classmethod
    def from_proto(cls, entry: records_pb2.DegradedEntry) -> DegradedEntry:
        return cls(entry.kind, entry.line, entry.offset, entry.detail)


@dataclass(frozen=True)
class Checkpoint:
    """An ``agent_checkpoint``: digest, message count, the last seq it covers, its own seq."""

    digest: str
    message_count: int
    covers_seq: int
    stop_kind: str
    seq: int

    @classmethod
    def from_proto(cls, checkpoint: records_pb2.AgentCheckpoint) -> Checkpoint:
        return cls(
            checkpoint.digest,
            checkpoint.message_count,
            checkpoint.covers_seq,
            checkpoint.stop_kind,
            checkpoint.seq,
        )


def _checkpoint(message: Any, name: str) -> Checkpoint | None:
    return Checkpoint.from_proto(getattr(message, name)) if message.HasField(name) else None


@dataclass(frozen=True)
class TooLarge:
    """The replay is over the caller's budget (REPLAY_TOO_LARGE); the messages are still there."""

    estimated_tokens: int
    token_budget: int


@dataclass(frozen=True)
class ReplaySummary:
    """Everything of a replay but its messages: degraded ledger, superseded outputs, last
    checkpoint, digest status and recomputed digest, token estimate (``ceil(bytes / 4)`` per
    message), ``too_large`` when over the budget, and the message count."""

    degraded: tuple[DegradedEntry, ...]
    superseded_outputs: int
    last_checkpoint: Checkpoint | None
    digest_status: str
    computed_digest: str
    estimated_tokens: int
    too_large: TooLarge | None
    message_count: int

    @property
    def is_degraded(self) -> bool:
        """True when the replay lists any place it is not an exact restoration."""
        return bool(self.degraded)

    @classmethod
    def from_proto(cls, summary: Any, message_count: int) -> ReplaySummary:
        """From a ReplayResponse or a ReplaySummary (the last StreamReplay chunk)."""
        too_large = summary.too_large if summary.HasField("too_large") else None
        return cls(
            degraded=tuple(DegradedEntry.from_proto(entry) for entry in summary.degraded),
            superseded_outputs=summary.superseded_outputs,
            last_checkpoint=_checkpoint(summary, "last_checkpoint"),
            digest_status=digest_status_name(summary.digest_status),
            computed_digest=summary.computed_digest,
            estimated_tokens=summary.estimated_tokens,
            too_large=TooLarge(too_large.estimated_tokens, too_large.token_budget) if too_large else None,
            message_count=message_count,
        )


@dataclass(frozen=True)
class Replay:
    """The exact rebuilt message sequence of a session (message dicts, reasoning attached)
    and its :class:`ReplaySummary` (docs/spec.md §5 Replay)."""

    session_id: str
    messages: list[dict[str, Any]]
    summary: ReplaySummary

    @property
    def degraded(self) -> tuple[DegradedEntry, ...]:
        return self.summary.degraded

    @property
    def digest_status(self) -> str:
        return self.summary.digest_status

    @property
    def too_large(self) -> TooLarge | None:
        return self.summary.too_large

    @classmethod
    def from_proto(cls, response: reader_pb2.ReplayResponse) -> Replay:
        messages = [message_to_dict(message) for message in response.messages]
        return cls(response.session_id, messages, ReplaySummary.from_proto(response, len(messages)))


@dataclass(frozen=True)
class RecentMessages:
    """The last messages of a session's rebuilt view (:meth:`Session.recent_messages`): message
    dicts oldest first, each one's origin (what a :class:`Retraction` names), how many
    messages the whole view has, and the next seq as read (pass it as ``expected_next_seq``
    to apply a change to exactly this view). ``message_count_at_least``: a limited read
    answered from the file's tail counted only the messages the tail held, so
    ``message_count`` is a lower bound (greater than the messages returned), not the view's
    size (reader.proto RecentMessagesResponse; docs/spec.md §5.1)."""

    session_id: str
    messages: list[dict[str, Any]]
    origins: list[MessageRef]
    message_count: int
    next_seq: int
    message_count_at_least: bool = False

    @classmethod
    def from_proto(cls, reply: reader_pb2.RecentMessagesResponse) -> RecentMessages:
        messages = (
            [orjson.loads(message) for message in reply.canonical_messages]
            if reply.canonical_messages
            else [message_to_dict(message) for message in reply.messages]
        )
        return cls(
            reply.session_id,
            messages,
            [
                MessageRef(seq, index if index >= 0 else None)
                for seq, index in zip(reply.origin_seqs, reply.origin_history_indexes, strict=True)
            ],
            reply.message_count,
            reply.next_seq,
            reply.message_count_at_least,
        )


@dataclass(frozen=True)
class AppendResult:
    """Seq of each appended record (a message's own seq, after its reasoning blocks) and the
    session's next seq."""

    seqs: tuple[int, ...]
    next_seq: int

    @classmethod
    def from_proto(cls, response: writer_pb2.AppendResponse) -> AppendResult:
        return cls(tuple(response.seqs), response.next_seq)


@dataclass(frozen=True)
class ForkOrigin:
    """Where a fork came from (its session_meta ``forked_from``): the source session, the seq of
    the last source record kept, and the digest of the source's sequence up to there."""

    session_id: str
    seq: int
    digest: str


@dataclass(frozen=True)
class StopResult:
    """What Stop wrote: checkpoint and stop record seqs, the digest, the message count."""

    checkpoint_seq: int
    stop_seq: int
    digest: str
    message_count: int

    @classmethod
    def from_proto(cls, response: writer_pb2.StopResponse) -> StopResult:
        return cls(response.checkpoint_seq, response.stop_seq, response.digest, response.message_count)


@dataclass(frozen=True)
class DeleteResult:
    """A deleted session: ``deleted_at`` (RFC 3339, UTC) and ``already_deleted`` (an earlier
    call had deleted it: the time is that call's)."""

    session_id: str
    deleted_at: str
    already_deleted: bool

    @classmethod
    def from_proto(cls, response: writer_pb2.DeleteSessionResponse) -> DeleteResult:
        return cls(response.session_id, response.deleted_at, response.already_deleted)


@dataclass(frozen=True)
class ResumeResult:
    """Tool call ids closed with a synthetic output, the stop kind the session had ("" when it
    was open), the next seq, and the round a crash had left pending that the Resume recorded
    interrupted ("" when none: shared.rounds)."""

    closed_call_ids: tuple[str, ...]
    previous_stop_kind: str
    next_seq: int
    interrupted_round_id: str = ""

    @classmethod
    def from_proto(cls, response: writer_pb2.ResumeResponse) -> ResumeResult:
        return cls(
            tuple(response.closed_call_ids),
            response.previous_stop_kind,
            response.next_seq,
            response.interrupted_round_id,
        )


@dataclass(frozen=True)
class PendingRound:
    """A round a crash left pending (reader.proto ListPendingRounds): its session, the round
    (:class:`shared.rounds.Round`, file offsets 0) and when the session was last appended to
    (RFC 3339 UTC)."""

    session_id: str
    round: Round
    last_append_at: str

    @classmethod
    def from_proto(cls, message: reader_pb2.PendingRound) -> PendingRound:
        return cls(message.session_id, round_from_proto(message.round), message.last_append_at)


@dataclass(frozen=True)
class StopFacts:
    """Why and where a session stopped, from the file's tail (docs/spec.md §5 Stop facts).
    ``found=False`` means unknown (running, or killed before any Stop), never "cannot continue".
    ``replayable`` and ``resume_reason`` are the default-deny resume eligibility.
    ``tail_bytes_read``: what the reader read to answer; ``next_seq``: the seq after the last
    record written (0 when unknown; from ``Session.stop_facts()`` only, not in listings);
    ``damage``: tail records whose line check fails."""

    session_id: str
    found: bool
    stop_kind: str
    reason: str
    error: dict[str, str] | None
    checkpoint: Checkpoint | None
    has_stop_record: bool
    stop_seq: int
    replayable: bool
    resume_reason: str
    tail_bytes_read: int = 0
    next_seq: int = 0
    #: Records of the tail whose line check fails: the facts above come from changed bytes.
    damage: tuple[DegradedEntry, ...] = ()

    @classmethod
    def from_proto(cls, facts: reader_pb2.StopFacts) -> StopFacts:
        error = (
            {"message": facts.error.message, "category": facts.error.category}
            if facts.HasField("error")
            else None
        )
        return cls(
            session_id=facts.session_id,
            found=facts.found,
            stop_kind=facts.stop_kind,
            reason=facts.reason,
            error=error,
            checkpoint=_checkpoint(facts, "checkpoint"),
            has_stop_record=facts.has_stop_record,
            stop_seq=facts.stop_seq,
            replayable=facts.resume.replayable,
            resume_reason=facts.resume.reason,
            tail_bytes_read=facts.tail_bytes_read,
            next_seq=facts.next_seq,
            damage=tuple(DegradedEntry.from_proto(entry) for entry in facts.damage),
        )


@dataclass(frozen=True)
class VerifyReport:
    """A full integrity check (docs/spec.md §5 Verify): ``ok`` unless the file is damaged or the last
    checkpoint does not verify; findings are sentences a person can read."""

    session_id: str
    ok: bool
    records: int
    last_seq: int
    committed_bytes: int
    message_count: int
    last_checkpoint: Checkpoint | None
    digest_status: str
    computed_digest: str
    degraded: tuple[DegradedEntry, ...]
    findings: tuple[str, ...]

    @classmethod
    def from_proto(cls, report: reader_pb2.VerifyReport) -> VerifyReport:
        return cls(
            session_id=report.session_id,
            ok=report.ok,
            records=report.records,
            last_seq=report.last_seq,
            committed_bytes=report.committed_bytes,
            message_count=report.message_count,
            last_checkpoint=_checkpoint(report, "last_checkpoint"),
            digest_status=digest_status_name(report.digest_status),
            computed_digest=report.computed_digest,
            degraded=tuple(DegradedEntry.from_proto(entry) for entry in report.degraded),
            findings=tuple(report.findings),
        )


@dataclass(frozen=True)
class SessionSummary:
    """One listed session: id, agent, creation time, tenant, delegation coordinates, stop facts;
    ``preview`` (its first user prompt, at most 200 characters), ``updated_at`` (the time of
    its last record), ``message_count`` (message records), ``cwd``, ``model``, ``size_bytes``
    (its file), ``title`` (the last title record's) and ``branch`` (the last git branch
    recorded), as reader.proto SessionSummary says."""

    session_id: str
    agent_name: str
    created_at: str
    tenant: str
    parent_session_id: str
    delegation_id: str
    stop_facts: StopFacts
    preview: str = ""
    updated_at: str = ""
    message_count: int = 0
    cwd: str = ""
    model: str = ""
    size_bytes: int = 0
    title: str = ""
    branch: str = ""

    @classmethod
    def from_proto(cls, summary: reader_pb2.SessionSummary) -> SessionSummary:
        return cls(
            summary.session_id,
            summary.agent_name,
            summary.created_at,
            summary.tenant,
            summary.parent_session_id,
            summary.delegation_id,
            StopFacts.from_proto(summary.stop_facts),
            summary.preview,
            summary.updated_at,
            summary.message_count,
            summary.cwd,
            summary.model,
            summary.size_bytes,
            summary.title,
            summary.branch,
        )


@dataclass(frozen=True)
class SessionPage:
    """One page of a listing (newest first): its sessions, how many the reader examined,
    whether the scan cap ended it early, and the token of the next page ("" on the last)."""

    sessions: tuple[SessionSummary, ...]
    scanned: int
    scan_capped: bool
    next_page_token: str

    @classmethod
    def from_proto(cls, response: reader_pb2.ListSessionsResponse) -> SessionPage:
        return cls(
            tuple(SessionSummary.from_proto(s) for s in response.sessions),
            response.scanned,
            response.scan_capped,
            response.next_page_token,
        )


@dataclass(frozen=True)
class SearchMatch:
    """A record of a session that matched a search: its seq, its kind (``message``,
    ``tool_call``, ``tool_output``, ``reasoning``, ``title``) and the words around the match
    (matched words between « and »)."""

    seq: int
    kind: str
    snippet: str


@dataclass(frozen=True)
class SessionHit:
    """A session found by a search (SearchSessions): where and when it ran, its title, whether
    the title matched, its best matching records and its score (higher is better)."""

    session_id: str
    tenant: str
    agent_name: str
    cwd: str
    branch: str
    created_at: str
    updated_at: str
    title: str
    title_match: bool
    match_count: int
    score: float
    matches: tuple[SearchMatch, ...]

    @classmethod
    def from_proto(cls, hit: reader_pb2.SessionHit) -> SessionHit:
        return cls(
            hit.session_id,
            hit.tenant,
            hit.agent_name,
            hit.cwd,
            hit.branch,
            hit.created_at,
            hit.updated_at,
            hit.title,
            hit.title_match,
            hit.match_count,
            hit.score,
            tuple(SearchMatch(match.seq, match.kind, match.snippet) for match in hit.matches),
        )


@dataclass(frozen=True)
class SearchPage:
    """One page of search hits (best first), how many sessions the reader has not indexed up to
    their size yet (``pending``), the token of the next page ("" on the last), and whether only
    the most recently indexed sessions were ranked (``capped``: the words are everywhere)."""

    hits: tuple[SessionHit, ...]
    pending: int
    next_page_token: str
    capped: bool = False

    @classmethod
    def from_proto(cls, response: reader_pb2.SearchSessionsResponse) -> SearchPage:
        return cls(
            tuple(SessionHit.from_proto(hit) for hit in response.hits),
            response.pending,
            response.next_page_token,
            response.capped,
        )


@dataclass(frozen=True)
class Delegation:
    """A delegation link: parent session, the parent's tool call id, the child session, the
    child's agent name, creation time and stop facts. An empty ``parent_session_id`` means
    "no coordinates" (a child whose parent is not known), never a root."""

    parent_session_id: str
    delegation_id: str
    child_session_id: str
    agent_name: str
    created_at: str
    stop_facts: StopFacts

    @classmethod
    def from_proto(cls, link: reader_pb2.Delegation) -> Delegation:
        return cls(
            link.parent_session_id,
            link.delegation_id,
            link.child_session_id,
            link.agent_name,
            link.created_at,
            StopFacts.from_proto(link.stop_facts),
        )


@dataclass(frozen=True)
class WatchedRecord:
    """One record of a followed session (reader.proto WatchSession), as stored: ``seq``,
    ``type`` (``message``, ``event``, ``stop``, ...), ``ts`` (RFC 3339, UTC) and ``payload``
    (the record's JSON object, see ``shared/records.py``), with ``line`` the stored JSONL
    line byte for byte (no ``\\n``). A damaged line (not a record) has seq -1, type "" and
    payload None, and is delivered in its place rather than skipped."""

    seq: int
    type: str
    ts: str
    payload: dict[str, Any] | None
    line: bytes

    @classmethod
    def from_proto(cls, record: reader_pb2.WatchedRecord) -> WatchedRecord:
        payload = None
        if record.seq >= 0:
            try:
                parsed = orjson.loads(record.line.lstrip(b"\x00"))
            except orjson.JSONDecodeError:
                parsed = None
            if isinstance(parsed, dict) and isinstance(parsed.get("payload"), dict):
                payload = parsed["payload"]
        return cls(record.seq, record.type, record.ts, payload, record.line)


@dataclass(frozen=True)
class RoundRecords:
    """One round as GetRound answers it (reader.proto): the round (:class:`shared.rounds.Round`,
    file offsets 0), its records in seq order, how many sessions the caller sees hold it (the
    one that wrote its trigger and each fork that copied it), and the session it was read from."""

    round: Round
    records: tuple[WatchedRecord, ...]
    held_by: int
    session_id: str

    @classmethod
    def from_proto(cls, reply: reader_pb2.GetRoundResponse) -> RoundRecords:
        return cls(
            round_from_proto(reply.round),
            tuple(WatchedRecord.from_proto(record) for record in reply.records),
            reply.held_by,
            reply.session_id,
        )


class Memories(list[MemoryView]):
    """What :meth:`rollout_client.AsyncRolloutClient.memories` returns (reader.proto
    GetMemories): the artifacts as :class:`shared.memory.MemoryView`, newest first (a list, so
    ``rollout_client.memories.render_memory_block(found)`` renders it), and ``damaged``: the
    lines (numbers from 1) of the tenant's scope files that hold no readable entry, by scope
    key (skipped by the reader; empty when every file is whole)."""

    damaged: dict[str, tuple[int, ...]]

    def __init__(
        self, views: Iterable[MemoryView] = (), damaged: dict[str, tuple[int, ...]] | None = None
    ) -> None:
        super().__init__(views)
        self.damaged = damaged or {}

    @classmethod
    def from_proto(cls, reply: reader_pb2.GetMemoriesResponse) -> Memories:
        return cls(
            (view_from_proto(view) for view in reply.memories),
            {scope.scope_key: tuple(scope.lines) for scope in reply.damaged},
        )
