from google.protobuf import struct_pb2 as _struct_pb2
from rollout.v1 import records_pb2 as _records_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SessionRole(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SESSION_ROLE_UNSPECIFIED: _ClassVar[SessionRole]
    SESSION_ROLE_ROOT: _ClassVar[SessionRole]
    SESSION_ROLE_CHILD: _ClassVar[SessionRole]
    SESSION_ROLE_CHILD_WITHOUT_COORDINATES: _ClassVar[SessionRole]
SESSION_ROLE_UNSPECIFIED: SessionRole
SESSION_ROLE_ROOT: SessionRole
SESSION_ROLE_CHILD: SessionRole
SESSION_ROLE_CHILD_WITHOUT_COORDINATES: SessionRole

class CreateSessionRequest(_message.Message):
    __slots__ = ("session_id", "agent_name", "parent_session_id", "delegation_id", "tenant", "model", "cwd", "originator", "client_version", "created_at", "role", "session_key")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_NAME_FIELD_NUMBER: _ClassVar[int]
    PARENT_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    DELEGATION_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    ORIGINATOR_FIELD_NUMBER: _ClassVar[int]
    CLIENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    SESSION_KEY_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    agent_name: str
    parent_session_id: str
    delegation_id: str
    tenant: str
    model: str
    cwd: str
    originator: str
    client_version: str
    created_at: str
    role: SessionRole
    session_key: str
    def __init__(self, session_id: _Optional[str] = ..., agent_name: _Optional[str] = ..., parent_session_id: _Optional[str] = ..., delegation_id: _Optional[str] = ..., tenant: _Optional[str] = ..., model: _Optional[str] = ..., cwd: _Optional[str] = ..., originator: _Optional[str] = ..., client_version: _Optional[str] = ..., created_at: _Optional[str] = ..., role: _Optional[_Union[SessionRole, str]] = ..., session_key: _Optional[str] = ...) -> None: ...

class CreateSessionResponse(_message.Message):
    __slots__ = ("session_id", "created_at", "next_seq")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    NEXT_SEQ_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    created_at: str
    next_seq: int
    def __init__(self, session_id: _Optional[str] = ..., created_at: _Optional[str] = ..., next_seq: _Optional[int] = ...) -> None: ...

class AppendRecord(_message.Message):
    __slots__ = ("message", "reasoning", "compacted", "turn_context", "event", "retraction", "message_json", "ts")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REASONING_FIELD_NUMBER: _ClassVar[int]
    COMPACTED_FIELD_NUMBER: _ClassVar[int]
    TURN_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    RETRACTION_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_JSON_FIELD_NUMBER: _ClassVar[int]
    TS_FIELD_NUMBER: _ClassVar[int]
    message: _records_pb2.ChatMessage
    reasoning: _records_pb2.Reasoning
    compacted: _records_pb2.Compacted
    turn_context: _struct_pb2.Struct
    event: _records_pb2.Event
    retraction: _records_pb2.Retraction
    message_json: bytes
    ts: str
    def __init__(self, message: _Optional[_Union[_records_pb2.ChatMessage, _Mapping]] = ..., reasoning: _Optional[_Union[_records_pb2.Reasoning, _Mapping]] = ..., compacted: _Optional[_Union[_records_pb2.Compacted, _Mapping]] = ..., turn_context: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., event: _Optional[_Union[_records_pb2.Event, _Mapping]] = ..., retraction: _Optional[_Union[_records_pb2.Retraction, _Mapping]] = ..., message_json: _Optional[bytes] = ..., ts: _Optional[str] = ...) -> None: ...

class AppendRequest(_message.Message):
    __slots__ = ("session_id", "records", "expected_next_seq", "request_id", "request_since_seq")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_NEXT_SEQ_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_SINCE_SEQ_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    records: _containers.RepeatedCompositeFieldContainer[AppendRecord]
    expected_next_seq: int
    request_id: str
    request_since_seq: int
    def __init__(self, session_id: _Optional[str] = ..., records: _Optional[_Iterable[_Union[AppendRecord, _Mapping]]] = ..., expected_next_seq: _Optional[int] = ..., request_id: _Optional[str] = ..., request_since_seq: _Optional[int] = ...) -> None: ...

class AppendResponse(_message.Message):
    __slots__ = ("session_id", "seqs", "next_seq")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SEQS_FIELD_NUMBER: _ClassVar[int]
    NEXT_SEQ_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    seqs: _containers.RepeatedScalarFieldContainer[int]
    next_seq: int
    def __init__(self, session_id: _Optional[str] = ..., seqs: _Optional[_Iterable[int]] = ..., next_seq: _Optional[int] = ...) -> None: ...

class StopRequest(_message.Message):
    __slots__ = ("session_id", "stop_kind", "reason", "error", "ts")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    STOP_KIND_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    TS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    stop_kind: _records_pb2.StopKind
    reason: str
    error: _records_pb2.StopError
    ts: str
    def __init__(self, session_id: _Optional[str] = ..., stop_kind: _Optional[_Union[_records_pb2.StopKind, str]] = ..., reason: _Optional[str] = ..., error: _Optional[_Union[_records_pb2.StopError, _Mapping]] = ..., ts: _Optional[str] = ...) -> None: ...

class StopResponse(_message.Message):
    __slots__ = ("checkpoint_seq", "stop_seq", "digest", "message_count")
    CHECKPOINT_SEQ_FIELD_NUMBER: _ClassVar[int]
    STOP_SEQ_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    checkpoint_seq: int
    stop_seq: int
    digest: str
    message_count: int
    def __init__(self, checkpoint_seq: _Optional[int] = ..., stop_seq: _Optional[int] = ..., digest: _Optional[str] = ..., message_count: _Optional[int] = ...) -> None: ...

class ResumeRequest(_message.Message):
    __slots__ = ("session_id", "force")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    force: bool
    def __init__(self, session_id: _Optional[str] = ..., force: _Optional[bool] = ...) -> None: ...

class ResumeResponse(_message.Message):
    __slots__ = ("session_id", "closed_call_ids", "previous_stop_kind", "next_seq", "interrupted_round_id")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CLOSED_CALL_IDS_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_STOP_KIND_FIELD_NUMBER: _ClassVar[int]
    NEXT_SEQ_FIELD_NUMBER: _ClassVar[int]
    INTERRUPTED_ROUND_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    closed_call_ids: _containers.RepeatedScalarFieldContainer[str]
    previous_stop_kind: str
    next_seq: int
    interrupted_round_id: str
    def __init__(self, session_id: _Optional[str] = ..., closed_call_ids: _Optional[_Iterable[str]] = ..., previous_stop_kind: _Optional[str] = ..., next_seq: _Optional[int] = ..., interrupted_round_id: _Optional[str] = ...) -> None: ...

class ForkRequest(_message.Message):
    __slots__ = ("session_id", "at_seq", "before_user_message", "session_key")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    AT_SEQ_FIELD_NUMBER: _ClassVar[int]
    BEFORE_USER_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SESSION_KEY_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    at_seq: int
    before_user_message: int
    session_key: str
    def __init__(self, session_id: _Optional[str] = ..., at_seq: _Optional[int] = ..., before_user_message: _Optional[int] = ..., session_key: _Optional[str] = ...) -> None: ...

class ForkResponse(_message.Message):
    __slots__ = ("session_id", "forked_at_seq", "digest", "next_seq")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    FORKED_AT_SEQ_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    NEXT_SEQ_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    forked_at_seq: int
    digest: str
    next_seq: int
    def __init__(self, session_id: _Optional[str] = ..., forked_at_seq: _Optional[int] = ..., digest: _Optional[str] = ..., next_seq: _Optional[int] = ...) -> None: ...

class ImportRecords(_message.Message):
    __slots__ = ("records",)
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[AppendRecord]
    def __init__(self, records: _Optional[_Iterable[_Union[AppendRecord, _Mapping]]] = ...) -> None: ...

class ImportSessionsRequest(_message.Message):
    __slots__ = ("create", "records", "stop")
    CREATE_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    create: CreateSessionRequest
    records: ImportRecords
    stop: StopRequest
    def __init__(self, create: _Optional[_Union[CreateSessionRequest, _Mapping]] = ..., records: _Optional[_Union[ImportRecords, _Mapping]] = ..., stop: _Optional[_Union[StopRequest, _Mapping]] = ...) -> None: ...

class ImportedSessionResult(_message.Message):
    __slots__ = ("session_id", "already_present", "records", "message_count", "digest")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    ALREADY_PRESENT_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    already_present: bool
    records: int
    message_count: int
    digest: str
    def __init__(self, session_id: _Optional[str] = ..., already_present: _Optional[bool] = ..., records: _Optional[int] = ..., message_count: _Optional[int] = ..., digest: _Optional[str] = ...) -> None: ...

class ImportSessionsResponse(_message.Message):
    __slots__ = ("sessions",)
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    sessions: _containers.RepeatedCompositeFieldContainer[ImportedSessionResult]
    def __init__(self, sessions: _Optional[_Iterable[_Union[ImportedSessionResult, _Mapping]]] = ...) -> None: ...

class DeleteSessionRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class DeleteSessionResponse(_message.Message):
    __slots__ = ("session_id", "deleted_at", "already_deleted")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    DELETED_AT_FIELD_NUMBER: _ClassVar[int]
    ALREADY_DELETED_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    deleted_at: str
    already_deleted: bool
    def __init__(self, session_id: _Optional[str] = ..., deleted_at: _Optional[str] = ..., already_deleted: _Optional[bool] = ...) -> None: ...

class GetShardMapRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetShardMapResponse(_message.Message):
    __slots__ = ("shard_count", "hash", "owners", "address")
    SHARD_COUNT_FIELD_NUMBER: _ClassVar[int]
    HASH_FIELD_NUMBER: _ClassVar[int]
    OWNERS_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    shard_count: int
    hash: str
    owners: _containers.RepeatedCompositeFieldContainer[ShardOwner]
    address: str
    def __init__(self, shard_count: _Optional[int] = ..., hash: _Optional[str] = ..., owners: _Optional[_Iterable[_Union[ShardOwner, _Mapping]]] = ..., address: _Optional[str] = ...) -> None: ...

class ShardOwner(_message.Message):
    __slots__ = ("shard", "address", "epoch")
    SHARD_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    shard: int
    address: str
    epoch: int
    def __init__(self, shard: _Optional[int] = ..., address: _Optional[str] = ..., epoch: _Optional[int] = ...) -> None: ...

class ForgetMemoriesRequest(_message.Message):
    __slots__ = ("session_id", "scope_key", "tenant", "by")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SCOPE_KEY_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    BY_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    scope_key: str
    tenant: str
    by: str
    def __init__(self, session_id: _Optional[str] = ..., scope_key: _Optional[str] = ..., tenant: _Optional[str] = ..., by: _Optional[str] = ...) -> None: ...

class ForgetMemoriesResponse(_message.Message):
    __slots__ = ("artifact_ids",)
    ARTIFACT_IDS_FIELD_NUMBER: _ClassVar[int]
    artifact_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, artifact_ids: _Optional[_Iterable[str]] = ...) -> None: ...
