from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StopKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STOP_KIND_UNSPECIFIED: _ClassVar[StopKind]
    STOP_KIND_COMPLETED: _ClassVar[StopKind]
    STOP_KIND_PAUSED: _ClassVar[StopKind]
    STOP_KIND_CANCELLED: _ClassVar[StopKind]
    STOP_KIND_FAILED: _ClassVar[StopKind]
    STOP_KIND_BUDGET_EXCEEDED: _ClassVar[StopKind]
    STOP_KIND_INTERRUPTED: _ClassVar[StopKind]
STOP_KIND_UNSPECIFIED: StopKind
STOP_KIND_COMPLETED: StopKind
STOP_KIND_PAUSED: StopKind
STOP_KIND_CANCELLED: StopKind
STOP_KIND_FAILED: StopKind
STOP_KIND_BUDGET_EXCEEDED: StopKind
STOP_KIND_INTERRUPTED: StopKind

class ToolCall(_message.Message):
    __slots__ = ("id", "type", "function")
    ID_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_FIELD_NUMBER: _ClassVar[int]
    id: str
    type: str
    function: FunctionCall
    def __init__(self, id: _Optional[str] = ..., type: _Optional[str] = ..., function: _Optional[_Union[FunctionCall, _Mapping]] = ...) -> None: ...

class FunctionCall(_message.Message):
    __slots__ = ("name", "arguments")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    name: str
    arguments: str
    def __init__(self, name: _Optional[str] = ..., arguments: _Optional[str] = ...) -> None: ...

class Reasoning(_message.Message):
    __slots__ = ("content", "signature", "encrypted")
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    ENCRYPTED_FIELD_NUMBER: _ClassVar[int]
    content: str
    signature: str
    encrypted: str
    def __init__(self, content: _Optional[str] = ..., signature: _Optional[str] = ..., encrypted: _Optional[str] = ...) -> None: ...

class ChatMessage(_message.Message):
    __slots__ = ("role", "text", "parts", "name", "tool_calls", "tool_call_id", "is_anchored", "truncation_marker", "reasoning", "synthetic", "reasoning_blocks", "is_error", "input_kind")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    PARTS_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    IS_ANCHORED_FIELD_NUMBER: _ClassVar[int]
    TRUNCATION_MARKER_FIELD_NUMBER: _ClassVar[int]
    REASONING_FIELD_NUMBER: _ClassVar[int]
    SYNTHETIC_FIELD_NUMBER: _ClassVar[int]
    REASONING_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    IS_ERROR_FIELD_NUMBER: _ClassVar[int]
    INPUT_KIND_FIELD_NUMBER: _ClassVar[int]
    role: str
    text: str
    parts: _struct_pb2.ListValue
    name: str
    tool_calls: _containers.RepeatedCompositeFieldContainer[ToolCall]
    tool_call_id: str
    is_anchored: bool
    truncation_marker: str
    reasoning: Reasoning
    synthetic: bool
    reasoning_blocks: _containers.RepeatedCompositeFieldContainer[Reasoning]
    is_error: bool
    input_kind: str
    def __init__(self, role: _Optional[str] = ..., text: _Optional[str] = ..., parts: _Optional[_Union[_struct_pb2.ListValue, _Mapping]] = ..., name: _Optional[str] = ..., tool_calls: _Optional[_Iterable[_Union[ToolCall, _Mapping]]] = ..., tool_call_id: _Optional[str] = ..., is_anchored: _Optional[bool] = ..., truncation_marker: _Optional[str] = ..., reasoning: _Optional[_Union[Reasoning, _Mapping]] = ..., synthetic: _Optional[bool] = ..., reasoning_blocks: _Optional[_Iterable[_Union[Reasoning, _Mapping]]] = ..., is_error: _Optional[bool] = ..., input_kind: _Optional[str] = ...) -> None: ...

class Compacted(_message.Message):
    __slots__ = ("summary", "replacement_history")
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    REPLACEMENT_HISTORY_FIELD_NUMBER: _ClassVar[int]
    summary: str
    replacement_history: ReplacementHistory
    def __init__(self, summary: _Optional[str] = ..., replacement_history: _Optional[_Union[ReplacementHistory, _Mapping]] = ...) -> None: ...

class ReplacementHistory(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[ChatMessage]
    def __init__(self, messages: _Optional[_Iterable[_Union[ChatMessage, _Mapping]]] = ...) -> None: ...

class MessageRef(_message.Message):
    __slots__ = ("seq", "history_index")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    HISTORY_INDEX_FIELD_NUMBER: _ClassVar[int]
    seq: int
    history_index: int
    def __init__(self, seq: _Optional[int] = ..., history_index: _Optional[int] = ...) -> None: ...

class Retraction(_message.Message):
    __slots__ = ("messages", "reason")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[MessageRef]
    reason: str
    def __init__(self, messages: _Optional[_Iterable[_Union[MessageRef, _Mapping]]] = ..., reason: _Optional[str] = ...) -> None: ...

class Event(_message.Message):
    __slots__ = ("kind", "body")
    KIND_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    kind: str
    body: _struct_pb2.Struct
    def __init__(self, kind: _Optional[str] = ..., body: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class ForkOrigin(_message.Message):
    __slots__ = ("session_id", "seq", "digest")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    seq: int
    digest: str
    def __init__(self, session_id: _Optional[str] = ..., seq: _Optional[int] = ..., digest: _Optional[str] = ...) -> None: ...

class SessionMeta(_message.Message):
    __slots__ = ("session_id", "agent_name", "parent_session_id", "delegation_id", "tenant", "model", "cwd", "originator", "client_version", "forked_from", "created_at")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_NAME_FIELD_NUMBER: _ClassVar[int]
    PARENT_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    DELEGATION_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    ORIGINATOR_FIELD_NUMBER: _ClassVar[int]
    CLIENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    FORKED_FROM_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    agent_name: str
    parent_session_id: str
    delegation_id: str
    tenant: str
    model: str
    cwd: str
    originator: str
    client_version: str
    forked_from: ForkOrigin
    created_at: str
    def __init__(self, session_id: _Optional[str] = ..., agent_name: _Optional[str] = ..., parent_session_id: _Optional[str] = ..., delegation_id: _Optional[str] = ..., tenant: _Optional[str] = ..., model: _Optional[str] = ..., cwd: _Optional[str] = ..., originator: _Optional[str] = ..., client_version: _Optional[str] = ..., forked_from: _Optional[_Union[ForkOrigin, _Mapping]] = ..., created_at: _Optional[str] = ...) -> None: ...

class AgentCheckpoint(_message.Message):
    __slots__ = ("digest", "message_count", "covers_seq", "stop_kind", "seq", "lines_digest")
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    COVERS_SEQ_FIELD_NUMBER: _ClassVar[int]
    STOP_KIND_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    LINES_DIGEST_FIELD_NUMBER: _ClassVar[int]
    digest: str
    message_count: int
    covers_seq: int
    stop_kind: str
    seq: int
    lines_digest: str
    def __init__(self, digest: _Optional[str] = ..., message_count: _Optional[int] = ..., covers_seq: _Optional[int] = ..., stop_kind: _Optional[str] = ..., seq: _Optional[int] = ..., lines_digest: _Optional[str] = ...) -> None: ...

class StopError(_message.Message):
    __slots__ = ("message", "category")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CATEGORY_FIELD_NUMBER: _ClassVar[int]
    message: str
    category: str
    def __init__(self, message: _Optional[str] = ..., category: _Optional[str] = ...) -> None: ...

class StopRecord(_message.Message):
    __slots__ = ("stop_kind", "reason", "error", "checkpoint_seq")
    STOP_KIND_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_SEQ_FIELD_NUMBER: _ClassVar[int]
    stop_kind: str
    reason: str
    error: StopError
    checkpoint_seq: int
    def __init__(self, stop_kind: _Optional[str] = ..., reason: _Optional[str] = ..., error: _Optional[_Union[StopError, _Mapping]] = ..., checkpoint_seq: _Optional[int] = ...) -> None: ...

class DegradedEntry(_message.Message):
    __slots__ = ("kind", "line", "offset", "detail")
    KIND_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    kind: str
    line: int
    offset: int
    detail: str
    def __init__(self, kind: _Optional[str] = ..., line: _Optional[int] = ..., offset: _Optional[int] = ..., detail: _Optional[str] = ...) -> None: ...
