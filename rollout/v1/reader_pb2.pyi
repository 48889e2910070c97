from rollout.v1 import records_pb2 as _records_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DigestStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DIGEST_STATUS_UNSPECIFIED: _ClassVar[DigestStatus]
    DIGEST_STATUS_VERIFIED: _ClassVar[DigestStatus]
    DIGEST_STATUS_MISMATCH: _ClassVar[DigestStatus]
    DIGEST_STATUS_NO_CHECKPOINT: _ClassVar[DigestStatus]
DIGEST_STATUS_UNSPECIFIED: DigestStatus
DIGEST_STATUS_VERIFIED: DigestStatus
DIGEST_STATUS_MISMATCH: DigestStatus
DIGEST_STATUS_NO_CHECKPOINT: DigestStatus

class ReplayRequest(_message.Message):
    __slots__ = ("session_id", "token_budget", "max_messages")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_BUDGET_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    token_budget: int
    max_messages: int
    def __init__(self, session_id: _Optional[str] = ..., token_budget: _Optional[int] = ..., max_messages: _Optional[int] = ...) -> None: ...

class ReplayTooLarge(_message.Message):
    __slots__ = ("estimated_tokens", "token_budget")
    ESTIMATED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_BUDGET_FIELD_NUMBER: _ClassVar[int]
    estimated_tokens: int
    token_budget: int
    def __init__(self, estimated_tokens: _Optional[int] = ..., token_budget: _Optional[int] = ...) -> None: ...

class ReplayResponse(_message.Message):
    __slots__ = ("session_id", "messages", "degraded", "superseded_outputs", "last_checkpoint", "digest_status", "computed_digest", "estimated_tokens", "too_large")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_FIELD_NUMBER: _ClassVar[int]
    SUPERSEDED_OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    LAST_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    DIGEST_STATUS_FIELD_NUMBER: _ClassVar[int]
    COMPUTED_DIGEST_FIELD_NUMBER: _ClassVar[int]
    ESTIMATED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOO_LARGE_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    messages: _containers.RepeatedCompositeFieldContainer[_records_pb2.ChatMessage]
    degraded: _containers.RepeatedCompositeFieldContainer[_records_pb2.DegradedEntry]
    superseded_outputs: int
    last_checkpoint: _records_pb2.AgentCheckpoint
    digest_status: DigestStatus
    computed_digest: str
    estimated_tokens: int
    too_large: ReplayTooLarge
    def __init__(self, session_id: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[_records_pb2.ChatMessage, _Mapping]]] = ..., degraded: _Optional[_Iterable[_Union[_records_pb2.DegradedEntry, _Mapping]]] = ..., superseded_outputs: _Optional[int] = ..., last_checkpoint: _Optional[_Union[_records_pb2.AgentCheckpoint, _Mapping]] = ..., digest_status: _Optional[_Union[DigestStatus, str]] = ..., computed_digest: _Optional[str] = ..., estimated_tokens: _Optional[int] = ..., too_large: _Optional[_Union[ReplayTooLarge, _Mapping]] = ...) -> None: ...

class ReplaySummary(_message.Message):
    __slots__ = ("degraded", "superseded_outputs", "last_checkpoint", "digest_status", "computed_digest", "estimated_tokens", "too_large", "message_count")
    DEGRADED_FIELD_NUMBER: _ClassVar[int]
    SUPERSEDED_OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    LAST_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    DIGEST_STATUS_FIELD_NUMBER: _ClassVar[int]
    COMPUTED_DIGEST_FIELD_NUMBER: _ClassVar[int]
    ESTIMATED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOO_LARGE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    degraded: _containers.RepeatedCompositeFieldContainer[_records_pb2.DegradedEntry]
    superseded_outputs: int
    last_checkpoint: _records_pb2.AgentCheckpoint
    digest_status: DigestStatus
    computed_digest: str
    estimated_tokens: int
    too_large: ReplayTooLarge
    message_count: int
    def __init__(self, degraded: _Optional[_Iterable[_Union[_records_pb2.DegradedEntry, _Mapping]]] = ..., superseded_outputs: _Optional[int] = ..., last_checkpoint: _Optional[_Union[_records_pb2.AgentCheckpoint, _Mapping]] = ..., digest_status: _Optional[_Union[DigestStatus, str]] = ..., computed_digest: _Optional[str] = ..., estimated_tokens: _Optional[int] = ..., too_large: _Optional[_Union[ReplayTooLarge, _Mapping]] = ..., message_count: _Optional[int] = ...) -> None: ...

class ReplayChunk(_message.Message):
    __slots__ = ("session_id", "first_index", "messages", "summary")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_INDEX_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    first_index: int
    messages: _containers.RepeatedCompositeFieldContainer[_records_pb2.ChatMessage]
    summary: ReplaySummary
    def __init__(self, session_id: _Optional[str] = ..., first_index: _Optional[int] = ..., messages: _Optional[_Iterable[_Union[_records_pb2.ChatMessage, _Mapping]]] = ..., summary: _Optional[_Union[ReplaySummary, _Mapping]] = ...) -> None: ...

class RecentMessagesRequest(_message.Message):
    __slots__ = ("session_id", "limit", "canonical", "since_next_seq", "since_message_count")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    CANONICAL_FIELD_NUMBER: _ClassVar[int]
    SINCE_NEXT_SEQ_FIELD_NUMBER: _ClassVar[int]
    SINCE_MESSAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    limit: int
    canonical: bool
    since_next_seq: int
    since_message_count: int
    def __init__(self, session_id: _Optional[str] = ..., limit: _Optional[int] = ..., canonical: _Optional[bool] = ..., since_next_seq: _Optional[int] = ..., since_message_count: _Optional[int] = ...) -> None: ...

class RecentMessagesResponse(_message.Message):
    __slots__ = ("session_id", "messages", "origin_seqs", "origin_history_indexes", "message_count", "next_seq", "canonical_messages", "message_count_at_least", "continues_view")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_SEQS_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_HISTORY_INDEXES_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    NEXT_SEQ_FIELD_NUMBER: _ClassVar[int]
    CANONICAL_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_COUNT_AT_LEAST_FIELD_NUMBER: _ClassVar[int]
    CONTINUES_VIEW_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    messages: _containers.RepeatedCompositeFieldContainer[_records_pb2.ChatMessage]
    origin_seqs: _containers.RepeatedScalarFieldContainer[int]
    origin_history_indexes: _containers.RepeatedScalarFieldContainer[int]
    message_count: int
    next_seq: int
    canonical_messages: _containers.RepeatedScalarFieldContainer[bytes]
    message_count_at_least: bool
    continues_view: bool
    def __init__(self, session_id: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[_records_pb2.ChatMessage, _Mapping]]] = ..., origin_seqs: _Optional[_Iterable[int]] = ..., origin_history_indexes: _Optional[_Iterable[int]] = ..., message_count: _Optional[int] = ..., next_seq: _Optional[int] = ..., canonical_messages: _Optional[_Iterable[bytes]] = ..., message_count_at_least: _Optional[bool] = ..., continues_view: _Optional[bool] = ...) -> None: ...

class MemoryViewRequest(_message.Message):
    __slots__ = ("session_id", "max_tool_output_chars", "max_reasoning_chars")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_TOOL_OUTPUT_CHARS_FIELD_NUMBER: _ClassVar[int]
    MAX_REASONING_CHARS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    max_tool_output_chars: int
    max_reasoning_chars: int
    def __init__(self, session_id: _Optional[str] = ..., max_tool_output_chars: _Optional[int] = ..., max_reasoning_chars: _Optional[int] = ...) -> None: ...

class MemoryViewResponse(_message.Message):
    __slots__ = ("session_id", "messages", "dropped_system_messages", "truncated_tool_outputs", "shortened_reasoning")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    DROPPED_SYSTEM_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_TOOL_OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    SHORTENED_REASONING_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    messages: _containers.RepeatedCompositeFieldContainer[_records_pb2.ChatMessage]
    dropped_system_messages: int
    truncated_tool_outputs: int
    shortened_reasoning: int
    def __init__(self, session_id: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[_records_pb2.ChatMessage, _Mapping]]] = ..., dropped_system_messages: _Optional[int] = ..., truncated_tool_outputs: _Optional[int] = ..., shortened_reasoning: _Optional[int] = ...) -> None: ...

class MemoryViewSummary(_message.Message):
    __slots__ = ("dropped_system_messages", "truncated_tool_outputs", "shortened_reasoning", "message_count")
    DROPPED_SYSTEM_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_TOOL_OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    SHORTENED_REASONING_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    dropped_system_messages: int
    truncated_tool_outputs: int
    shortened_reasoning: int
    message_count: int
    def __init__(self, dropped_system_messages: _Optional[int] = ..., truncated_tool_outputs: _Optional[int] = ..., shortened_reasoning: _Optional[int] = ..., message_count: _Optional[int] = ...) -> None: ...

class MemoryViewChunk(_message.Message):
    __slots__ = ("session_id", "first_index", "messages", "summary")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_INDEX_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    first_index: int
    messages: _containers.RepeatedCompositeFieldContainer[_records_pb2.ChatMessage]
    summary: MemoryViewSummary
    def __init__(self, session_id: _Optional[str] = ..., first_index: _Optional[int] = ..., messages: _Optional[_Iterable[_Union[_records_pb2.ChatMessage, _Mapping]]] = ..., summary: _Optional[_Union[MemoryViewSummary, _Mapping]] = ...) -> None: ...

class VerifyRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class VerifyReport(_message.Message):
    __slots__ = ("session_id", "ok", "records", "last_seq", "committed_bytes", "message_count", "last_checkpoint", "digest_status", "computed_digest", "degraded", "findings")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_BYTES_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    LAST_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    DIGEST_STATUS_FIELD_NUMBER: _ClassVar[int]
    COMPUTED_DIGEST_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_FIELD_NUMBER: _ClassVar[int]
    FINDINGS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    ok: bool
    records: int
    last_seq: int
    committed_bytes: int
    message_count: int
    last_checkpoint: _records_pb2.AgentCheckpoint
    digest_status: DigestStatus
    computed_digest: str
    degraded: _containers.RepeatedCompositeFieldContainer[_records_pb2.DegradedEntry]
    findings: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, session_id: _Optional[str] = ..., ok: _Optional[bool] = ..., records: _Optional[int] = ..., last_seq: _Optional[int] = ..., committed_bytes: _Optional[int] = ..., message_count: _Optional[int] = ..., last_checkpoint: _Optional[_Union[_records_pb2.AgentCheckpoint, _Mapping]] = ..., digest_status: _Optional[_Union[DigestStatus, str]] = ..., computed_digest: _Optional[str] = ..., degraded: _Optional[_Iterable[_Union[_records_pb2.DegradedEntry, _Mapping]]] = ..., findings: _Optional[_Iterable[str]] = ...) -> None: ...

class StopFactsRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class StopFacts(_message.Message):
    __slots__ = ("session_id", "found", "stop_kind", "reason", "error", "checkpoint", "has_stop_record", "stop_seq", "tail_bytes_read", "resume", "next_seq", "damage")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    FOUND_FIELD_NUMBER: _ClassVar[int]
    STOP_KIND_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    HAS_STOP_RECORD_FIELD_NUMBER: _ClassVar[int]
    STOP_SEQ_FIELD_NUMBER: _ClassVar[int]
    TAIL_BYTES_READ_FIELD_NUMBER: _ClassVar[int]
    RESUME_FIELD_NUMBER: _ClassVar[int]
    NEXT_SEQ_FIELD_NUMBER: _ClassVar[int]
    DAMAGE_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    found: bool
    stop_kind: str
    reason: str
    error: _records_pb2.StopError
    checkpoint: _records_pb2.AgentCheckpoint
    has_stop_record: bool
    stop_seq: int
    tail_bytes_read: int
    resume: ResumeEligibility
    next_seq: int
    damage: _containers.RepeatedCompositeFieldContainer[_records_pb2.DegradedEntry]
    def __init__(self, session_id: _Optional[str] = ..., found: _Optional[bool] = ..., stop_kind: _Optional[str] = ..., reason: _Optional[str] = ..., error: _Optional[_Union[_records_pb2.StopError, _Mapping]] = ..., checkpoint: _Optional[_Union[_records_pb2.AgentCheckpoint, _Mapping]] = ..., has_stop_record: _Optional[bool] = ..., stop_seq: _Optional[int] = ..., tail_bytes_read: _Optional[int] = ..., resume: _Optional[_Union[ResumeEligibility, _Mapping]] = ..., next_seq: _Optional[int] = ..., damage: _Optional[_Iterable[_Union[_records_pb2.DegradedEntry, _Mapping]]] = ...) -> None: ...

class ResumeEligibility(_message.Message):
    __slots__ = ("replayable", "reason")
    REPLAYABLE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    replayable: bool
    reason: str
    def __init__(self, replayable: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class ListSessionsRequest(_message.Message):
    __slots__ = ("page_size", "page_token", "tenant", "agent_name", "parent_session_id", "created_after", "created_before", "stop_state", "max_scan", "cwd")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    AGENT_NAME_FIELD_NUMBER: _ClassVar[int]
    PARENT_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_AFTER_FIELD_NUMBER: _ClassVar[int]
    CREATED_BEFORE_FIELD_NUMBER: _ClassVar[int]
    STOP_STATE_FIELD_NUMBER: _ClassVar[int]
    MAX_SCAN_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    tenant: str
    agent_name: str
    parent_session_id: str
    created_after: str
    created_before: str
    stop_state: str
    max_scan: int
    cwd: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., tenant: _Optional[str] = ..., agent_name: _Optional[str] = ..., parent_session_id: _Optional[str] = ..., created_after: _Optional[str] = ..., created_before: _Optional[str] = ..., stop_state: _Optional[str] = ..., max_scan: _Optional[int] = ..., cwd: _Optional[str] = ...) -> None: ...

class SessionSummary(_message.Message):
    __slots__ = ("session_id", "agent_name", "created_at", "tenant", "parent_session_id", "delegation_id", "stop_facts", "preview", "updated_at", "message_count", "cwd", "model", "size_bytes", "title", "branch")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_NAME_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    PARENT_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    DELEGATION_ID_FIELD_NUMBER: _ClassVar[int]
    STOP_FACTS_FIELD_NUMBER: _ClassVar[int]
    PREVIEW_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    BRANCH_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    agent_name: str
    created_at: str
    tenant: str
    parent_session_id: str
    delegation_id: str
    stop_facts: StopFacts
    preview: str
    updated_at: str
    message_count: int
    cwd: str
    model: str
    size_bytes: int
    title: str
    branch: str
    def __init__(self, session_id: _Optional[str] = ..., agent_name: _Optional[str] = ..., created_at: _Optional[str] = ..., tenant: _Optional[str] = ..., parent_session_id: _Optional[str] = ..., delegation_id: _Optional[str] = ..., stop_facts: _Optional[_Union[StopFacts, _Mapping]] = ..., preview: _Optional[str] = ..., updated_at: _Optional[str] = ..., message_count: _Optional[int] = ..., cwd: _Optional[str] = ..., model: _Optional[str] = ..., size_bytes: _Optional[int] = ..., title: _Optional[str] = ..., branch: _Optional[str] = ...) -> None: ...

class ListSessionsResponse(_message.Message):
    __slots__ = ("sessions", "next_page_token", "scanned", "scan_capped")
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SCANNED_FIELD_NUMBER: _ClassVar[int]
    SCAN_CAPPED_FIELD_NUMBER: _ClassVar[int]
    sessions: _containers.RepeatedCompositeFieldContainer[SessionSummary]
    next_page_token: str
    scanned: int
    scan_capped: bool
    def __init__(self, sessions: _Optional[_Iterable[_Union[SessionSummary, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., scanned: _Optional[int] = ..., scan_capped: _Optional[bool] = ...) -> None: ...

class ResolveSessionRequest(_message.Message):
    __slots__ = ("session_key", "tenant")
    SESSION_KEY_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    session_key: str
    tenant: str
    def __init__(self, session_key: _Optional[str] = ..., tenant: _Optional[str] = ...) -> None: ...

class ResolveSessionResponse(_message.Message):
    __slots__ = ("session_id", "found")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    FOUND_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    found: bool
    def __init__(self, session_id: _Optional[str] = ..., found: _Optional[bool] = ...) -> None: ...

class FindDelegationsRequest(_message.Message):
    __slots__ = ("parent_session_id", "child_session_id", "delegation_id")
    PARENT_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CHILD_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    DELEGATION_ID_FIELD_NUMBER: _ClassVar[int]
    parent_session_id: str
    child_session_id: str
    delegation_id: str
    def __init__(self, parent_session_id: _Optional[str] = ..., child_session_id: _Optional[str] = ..., delegation_id: _Optional[str] = ...) -> None: ...

class Delegation(_message.Message):
    __slots__ = ("parent_session_id", "delegation_id", "child_session_id", "agent_name", "created_at", "stop_facts")
    PARENT_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    DELEGATION_ID_FIELD_NUMBER: _ClassVar[int]
    CHILD_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_NAME_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    STOP_FACTS_FIELD_NUMBER: _ClassVar[int]
    parent_session_id: str
    delegation_id: str
    child_session_id: str
    agent_name: str
    created_at: str
    stop_facts: StopFacts
    def __init__(self, parent_session_id: _Optional[str] = ..., delegation_id: _Optional[str] = ..., child_session_id: _Optional[str] = ..., agent_name: _Optional[str] = ..., created_at: _Optional[str] = ..., stop_facts: _Optional[_Union[StopFacts, _Mapping]] = ...) -> None: ...

class FindDelegationsResponse(_message.Message):
    __slots__ = ("delegations",)
    DELEGATIONS_FIELD_NUMBER: _ClassVar[int]
    delegations: _containers.RepeatedCompositeFieldContainer[Delegation]
    def __init__(self, delegations: _Optional[_Iterable[_Union[Delegation, _Mapping]]] = ...) -> None: ...

class WatchSessionRequest(_message.Message):
    __slots__ = ("session_id", "from_seq")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    FROM_SEQ_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    from_seq: int
    def __init__(self, session_id: _Optional[str] = ..., from_seq: _Optional[int] = ...) -> None: ...

class WatchedRecord(_message.Message):
    __slots__ = ("seq", "type", "ts", "line")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    TS_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    seq: int
    type: str
    ts: str
    line: bytes
    def __init__(self, seq: _Optional[int] = ..., type: _Optional[str] = ..., ts: _Optional[str] = ..., line: _Optional[bytes] = ...) -> None: ...

class WatchSessionResponse(_message.Message):
    __slots__ = ("records",)
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[WatchedRecord]
    def __init__(self, records: _Optional[_Iterable[_Union[WatchedRecord, _Mapping]]] = ...) -> None: ...

class ListRoundsRequest(_message.Message):
    __slots__ = ("session_id", "page_size", "page_token")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    page_size: int
    page_token: str
    def __init__(self, session_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class RoundInput(_message.Message):
    __slots__ = ("seq", "kind", "question", "options")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    QUESTION_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    seq: int
    kind: str
    question: str
    options: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, seq: _Optional[int] = ..., kind: _Optional[str] = ..., question: _Optional[str] = ..., options: _Optional[_Iterable[str]] = ...) -> None: ...

class RoundSegment(_message.Message):
    __slots__ = ("first_seq", "last_seq", "answer_seq")
    FIRST_SEQ_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    ANSWER_SEQ_FIELD_NUMBER: _ClassVar[int]
    first_seq: int
    last_seq: int
    answer_seq: int
    def __init__(self, first_seq: _Optional[int] = ..., last_seq: _Optional[int] = ..., answer_seq: _Optional[int] = ...) -> None: ...

class Round(_message.Message):
    __slots__ = ("round_id", "number", "status", "status_reason", "start_seq", "end_seq", "trigger_seqs", "question", "started_at", "ended_at", "duration_s", "tool_calls", "tool_failures", "input_tokens", "output_tokens", "tokens_estimated", "model", "effort", "inputs", "segments", "answer_seq", "message_count", "turn_id")
    ROUND_ID_FIELD_NUMBER: _ClassVar[int]
    NUMBER_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    STATUS_REASON_FIELD_NUMBER: _ClassVar[int]
    START_SEQ_FIELD_NUMBER: _ClassVar[int]
    END_SEQ_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_SEQS_FIELD_NUMBER: _ClassVar[int]
    QUESTION_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_FIELD_NUMBER: _ClassVar[int]
    DURATION_S_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_FAILURES_FIELD_NUMBER: _ClassVar[int]
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_ESTIMATED_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    EFFORT_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    ANSWER_SEQ_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    round_id: str
    number: int
    status: str
    status_reason: str
    start_seq: int
    end_seq: int
    trigger_seqs: _containers.RepeatedScalarFieldContainer[int]
    question: str
    started_at: str
    ended_at: str
    duration_s: float
    tool_calls: int
    tool_failures: int
    input_tokens: int
    output_tokens: int
    tokens_estimated: bool
    model: str
    effort: str
    inputs: _containers.RepeatedCompositeFieldContainer[RoundInput]
    segments: _containers.RepeatedCompositeFieldContainer[RoundSegment]
    answer_seq: int
    message_count: int
    turn_id: str
    def __init__(self, round_id: _Optional[str] = ..., number: _Optional[int] = ..., status: _Optional[str] = ..., status_reason: _Optional[str] = ..., start_seq: _Optional[int] = ..., end_seq: _Optional[int] = ..., trigger_seqs: _Optional[_Iterable[int]] = ..., question: _Optional[str] = ..., started_at: _Optional[str] = ..., ended_at: _Optional[str] = ..., duration_s: _Optional[float] = ..., tool_calls: _Optional[int] = ..., tool_failures: _Optional[int] = ..., input_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ..., tokens_estimated: _Optional[bool] = ..., model: _Optional[str] = ..., effort: _Optional[str] = ..., inputs: _Optional[_Iterable[_Union[RoundInput, _Mapping]]] = ..., segments: _Optional[_Iterable[_Union[RoundSegment, _Mapping]]] = ..., answer_seq: _Optional[int] = ..., message_count: _Optional[int] = ..., turn_id: _Optional[str] = ...) -> None: ...

class ListRoundsResponse(_message.Message):
    __slots__ = ("rounds", "next_page_token", "total")
    ROUNDS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    rounds: _containers.RepeatedCompositeFieldContainer[Round]
    next_page_token: str
    total: int
    def __init__(self, rounds: _Optional[_Iterable[_Union[Round, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., total: _Optional[int] = ...) -> None: ...

class ListPendingRoundsRequest(_message.Message):
    __slots__ = ("tenant", "since", "limit", "idle_seconds")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    IDLE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    since: str
    limit: int
    idle_seconds: int
    def __init__(self, tenant: _Optional[str] = ..., since: _Optional[str] = ..., limit: _Optional[int] = ..., idle_seconds: _Optional[int] = ...) -> None: ...

class PendingRound(_message.Message):
    __slots__ = ("session_id", "round", "last_append_at")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    LAST_APPEND_AT_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    round: Round
    last_append_at: str
    def __init__(self, session_id: _Optional[str] = ..., round: _Optional[_Union[Round, _Mapping]] = ..., last_append_at: _Optional[str] = ...) -> None: ...

class ListPendingRoundsResponse(_message.Message):
    __slots__ = ("rounds", "scanned")
    ROUNDS_FIELD_NUMBER: _ClassVar[int]
    SCANNED_FIELD_NUMBER: _ClassVar[int]
    rounds: _containers.RepeatedCompositeFieldContainer[PendingRound]
    scanned: int
    def __init__(self, rounds: _Optional[_Iterable[_Union[PendingRound, _Mapping]]] = ..., scanned: _Optional[int] = ...) -> None: ...

class GetRoundRequest(_message.Message):
    __slots__ = ("session_id", "round_id")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    round_id: str
    def __init__(self, session_id: _Optional[str] = ..., round_id: _Optional[str] = ...) -> None: ...

class GetRoundResponse(_message.Message):
    __slots__ = ("round", "records", "held_by", "session_id")
    ROUND_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    HELD_BY_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    round: Round
    records: _containers.RepeatedCompositeFieldContainer[WatchedRecord]
    held_by: int
    session_id: str
    def __init__(self, round: _Optional[_Union[Round, _Mapping]] = ..., records: _Optional[_Iterable[_Union[WatchedRecord, _Mapping]]] = ..., held_by: _Optional[int] = ..., session_id: _Optional[str] = ...) -> None: ...

class SearchSessionsRequest(_message.Message):
    __slots__ = ("query", "tenant", "cwd", "branch", "agent_name", "since", "page_size", "page_token")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    BRANCH_FIELD_NUMBER: _ClassVar[int]
    AGENT_NAME_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    query: str
    tenant: str
    cwd: str
    branch: str
    agent_name: str
    since: str
    page_size: int
    page_token: str
    def __init__(self, query: _Optional[str] = ..., tenant: _Optional[str] = ..., cwd: _Optional[str] = ..., branch: _Optional[str] = ..., agent_name: _Optional[str] = ..., since: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class SearchMatch(_message.Message):
    __slots__ = ("seq", "kind", "snippet")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    SNIPPET_FIELD_NUMBER: _ClassVar[int]
    seq: int
    kind: str
    snippet: str
    def __init__(self, seq: _Optional[int] = ..., kind: _Optional[str] = ..., snippet: _Optional[str] = ...) -> None: ...

class SessionHit(_message.Message):
    __slots__ = ("session_id", "tenant", "agent_name", "cwd", "branch", "created_at", "updated_at", "title", "title_match", "matches", "match_count", "score")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    AGENT_NAME_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    BRANCH_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    TITLE_MATCH_FIELD_NUMBER: _ClassVar[int]
    MATCHES_FIELD_NUMBER: _ClassVar[int]
    MATCH_COUNT_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    tenant: str
    agent_name: str
    cwd: str
    branch: str
    created_at: str
    updated_at: str
    title: str
    title_match: bool
    matches: _containers.RepeatedCompositeFieldContainer[SearchMatch]
    match_count: int
    score: float
    def __init__(self, session_id: _Optional[str] = ..., tenant: _Optional[str] = ..., agent_name: _Optional[str] = ..., cwd: _Optional[str] = ..., branch: _Optional[str] = ..., created_at: _Optional[str] = ..., updated_at: _Optional[str] = ..., title: _Optional[str] = ..., title_match: _Optional[bool] = ..., matches: _Optional[_Iterable[_Union[SearchMatch, _Mapping]]] = ..., match_count: _Optional[int] = ..., score: _Optional[float] = ...) -> None: ...

class SearchSessionsResponse(_message.Message):
    __slots__ = ("hits", "next_page_token", "pending", "capped")
    HITS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    CAPPED_FIELD_NUMBER: _ClassVar[int]
    hits: _containers.RepeatedCompositeFieldContainer[SessionHit]
    next_page_token: str
    pending: int
    capped: bool
    def __init__(self, hits: _Optional[_Iterable[_Union[SessionHit, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., pending: _Optional[int] = ..., capped: _Optional[bool] = ...) -> None: ...

class MemoryScope(_message.Message):
    __slots__ = ("cwd", "repository", "branch", "agent")
    CWD_FIELD_NUMBER: _ClassVar[int]
    REPOSITORY_FIELD_NUMBER: _ClassVar[int]
    BRANCH_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    cwd: str
    repository: str
    branch: str
    agent: str
    def __init__(self, cwd: _Optional[str] = ..., repository: _Optional[str] = ..., branch: _Optional[str] = ..., agent: _Optional[str] = ...) -> None: ...

class MemoryCitation(_message.Message):
    __slots__ = ("seq", "kind", "role", "ts")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    TS_FIELD_NUMBER: _ClassVar[int]
    seq: int
    kind: str
    role: str
    ts: str
    def __init__(self, seq: _Optional[int] = ..., kind: _Optional[str] = ..., role: _Optional[str] = ..., ts: _Optional[str] = ...) -> None: ...

class MemorySource(_message.Message):
    __slots__ = ("session_id", "first_seq", "last_seq", "lines_digest", "citations")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_SEQ_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    LINES_DIGEST_FIELD_NUMBER: _ClassVar[int]
    CITATIONS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    first_seq: int
    last_seq: int
    lines_digest: str
    citations: _containers.RepeatedCompositeFieldContainer[MemoryCitation]
    def __init__(self, session_id: _Optional[str] = ..., first_seq: _Optional[int] = ..., last_seq: _Optional[int] = ..., lines_digest: _Optional[str] = ..., citations: _Optional[_Iterable[_Union[MemoryCitation, _Mapping]]] = ...) -> None: ...

class MemorySupersession(_message.Message):
    __slots__ = ("artifact_id", "evidence_session_id", "evidence_seq")
    ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_SEQ_FIELD_NUMBER: _ClassVar[int]
    artifact_id: str
    evidence_session_id: str
    evidence_seq: int
    def __init__(self, artifact_id: _Optional[str] = ..., evidence_session_id: _Optional[str] = ..., evidence_seq: _Optional[int] = ...) -> None: ...

class MemoryArtifact(_message.Message):
    __slots__ = ("artifact_id", "kind", "text", "tenant", "scope", "created_at", "generator_model", "generator_prompt_version", "sources", "supersedes", "derived_from", "stop_seq")
    ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    GENERATOR_MODEL_FIELD_NUMBER: _ClassVar[int]
    GENERATOR_PROMPT_VERSION_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    SUPERSEDES_FIELD_NUMBER: _ClassVar[int]
    DERIVED_FROM_FIELD_NUMBER: _ClassVar[int]
    STOP_SEQ_FIELD_NUMBER: _ClassVar[int]
    artifact_id: str
    kind: str
    text: str
    tenant: str
    scope: MemoryScope
    created_at: str
    generator_model: str
    generator_prompt_version: str
    sources: _containers.RepeatedCompositeFieldContainer[MemorySource]
    supersedes: _containers.RepeatedCompositeFieldContainer[MemorySupersession]
    derived_from: _containers.RepeatedScalarFieldContainer[str]
    stop_seq: int
    def __init__(self, artifact_id: _Optional[str] = ..., kind: _Optional[str] = ..., text: _Optional[str] = ..., tenant: _Optional[str] = ..., scope: _Optional[_Union[MemoryScope, _Mapping]] = ..., created_at: _Optional[str] = ..., generator_model: _Optional[str] = ..., generator_prompt_version: _Optional[str] = ..., sources: _Optional[_Iterable[_Union[MemorySource, _Mapping]]] = ..., supersedes: _Optional[_Iterable[_Union[MemorySupersession, _Mapping]]] = ..., derived_from: _Optional[_Iterable[str]] = ..., stop_seq: _Optional[int] = ...) -> None: ...

class MemoryView(_message.Message):
    __slots__ = ("artifact", "age_seconds", "superseded_by", "superseded_evidence", "marks")
    ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    AGE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    SUPERSEDED_BY_FIELD_NUMBER: _ClassVar[int]
    SUPERSEDED_EVIDENCE_FIELD_NUMBER: _ClassVar[int]
    MARKS_FIELD_NUMBER: _ClassVar[int]
    artifact: MemoryArtifact
    age_seconds: float
    superseded_by: str
    superseded_evidence: MemorySupersession
    marks: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, artifact: _Optional[_Union[MemoryArtifact, _Mapping]] = ..., age_seconds: _Optional[float] = ..., superseded_by: _Optional[str] = ..., superseded_evidence: _Optional[_Union[MemorySupersession, _Mapping]] = ..., marks: _Optional[_Iterable[str]] = ...) -> None: ...

class GetMemoriesRequest(_message.Message):
    __slots__ = ("tenant", "scope", "query", "limit", "as_of", "include_superseded", "kinds", "artifact_ids")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    AS_OF_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_SUPERSEDED_FIELD_NUMBER: _ClassVar[int]
    KINDS_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_IDS_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    scope: MemoryScope
    query: str
    limit: int
    as_of: str
    include_superseded: bool
    kinds: _containers.RepeatedScalarFieldContainer[str]
    artifact_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, tenant: _Optional[str] = ..., scope: _Optional[_Union[MemoryScope, _Mapping]] = ..., query: _Optional[str] = ..., limit: _Optional[int] = ..., as_of: _Optional[str] = ..., include_superseded: _Optional[bool] = ..., kinds: _Optional[_Iterable[str]] = ..., artifact_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class DamagedScope(_message.Message):
    __slots__ = ("scope_key", "lines")
    SCOPE_KEY_FIELD_NUMBER: _ClassVar[int]
    LINES_FIELD_NUMBER: _ClassVar[int]
    scope_key: str
    lines: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, scope_key: _Optional[str] = ..., lines: _Optional[_Iterable[int]] = ...) -> None: ...

class GetMemoriesResponse(_message.Message):
    __slots__ = ("memories", "damaged")
    MEMORIES_FIELD_NUMBER: _ClassVar[int]
    DAMAGED_FIELD_NUMBER: _ClassVar[int]
    memories: _containers.RepeatedCompositeFieldContainer[MemoryView]
    damaged: _containers.RepeatedCompositeFieldContainer[DamagedScope]
    def __init__(self, memories: _Optional[_Iterable[_Union[MemoryView, _Mapping]]] = ..., damaged: _Optional[_Iterable[_Union[DamagedScope, _Mapping]]] = ...) -> None: ...

class ResolveProvenanceRequest(_message.Message):
    __slots__ = ("artifact_id", "tenant")
    ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    artifact_id: str
    tenant: str
    def __init__(self, artifact_id: _Optional[str] = ..., tenant: _Optional[str] = ...) -> None: ...

class ResolvedMessage(_message.Message):
    __slots__ = ("session_id", "seq", "kind", "line")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    seq: int
    kind: str
    line: bytes
    def __init__(self, session_id: _Optional[str] = ..., seq: _Optional[int] = ..., kind: _Optional[str] = ..., line: _Optional[bytes] = ...) -> None: ...

class ResolveProvenanceResponse(_message.Message):
    __slots__ = ("memory", "messages", "problems")
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    PROBLEMS_FIELD_NUMBER: _ClassVar[int]
    memory: MemoryView
    messages: _containers.RepeatedCompositeFieldContainer[ResolvedMessage]
    problems: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, memory: _Optional[_Union[MemoryView, _Mapping]] = ..., messages: _Optional[_Iterable[_Union[ResolvedMessage, _Mapping]]] = ..., problems: _Optional[_Iterable[str]] = ...) -> None: ...
