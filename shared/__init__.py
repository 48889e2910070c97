"""What the writer and reader services must agree on, and nothing else.

Record shapes and the line format (:mod:`shared.records`), the rebuild of a
message sequence (:mod:`shared.rebuild`), the digest (:mod:`shared.digest`), the
stop-kind vocabulary and resume eligibility (:mod:`shared.stop_kinds`), the file
name codec (:mod:`shared.naming`), the data root layout (:mod:`shared.layout`), the
shard of a session (:mod:`shared.shards`), the protobuf conversions (:mod:`shared.wire`),
the error hierarchy (:mod:`shared.errors`), its gRPC status mapping (:mod:`shared.status`)
and the words of status details clients read (:mod:`shared.reasons`); and how both
are served (:mod:`shared.serving`: TLS, interceptors, health, reflection), who calls
(:mod:`shared.auth`) and what a caller may see (:mod:`shared.tenancy`).
Neither service re-implements any of it; ``shared`` imports neither service. The memory
artifacts' format and provenance rules (:mod:`shared.memory`) are shared by the memory
pipeline (rollout_memory) and the client's injection block, over the same records.
"""

from shared.digest import DIGEST_FIELDS, canonical_message, digest
from shared.errors import (
    CorruptSessionError,
    FileNameError,
    InvalidArgumentError,
    LedgerError,
    NotOwnerError,
    PermissionDeniedError,
    QueueFullError,
    RecordValidationError,
    ReplyTooLargeError,
    ResourceLimitError,
    SessionBusyError,
    SessionExistsError,
    SessionFileChangedError,
    SessionNotFoundError,
    SessionStateError,
    SessionUnavailableError,
    StorageWriteError,
    WatchClosedError,
)
from shared.naming import SessionFileName, build_file_name, new_session_id, parse_file_name
from shared.rebuild import CheckpointRecord, DegradedEntry, DegradedKind, Rebuild, rebuild
from shared.records import RecordType, encode_line, validate_message
from shared.shards import shard_of
from shared.stop_kinds import ResumeEligibility, StopKind, classify_resume, classify_session

__all__ = [
    "DIGEST_FIELDS",
    "CheckpointRecord",
    "CorruptSessionError",
    "DegradedEntry",
    "DegradedKind",
    "FileNameError",
    "InvalidArgumentError",
    "LedgerError",
    "NotOwnerError",
    "PermissionDeniedError",
    "QueueFullError",
    "Rebuild",
    "RecordType",
    "RecordValidationError",
    "ReplyTooLargeError",
    "ResourceLimitError",
    "ResumeEligibility",
    "SessionBusyError",
    "SessionExistsError",
    "SessionFileChangedError",
    "SessionFileName",
    "SessionNotFoundError",
    "SessionStateError",
    "SessionUnavailableError",
    "StopKind",
    "StorageWriteError",
    "WatchClosedError",
    "build_file_name",
    "canonical_message",
    "classify_resume",
    "classify_session",
    "digest",
    "encode_line",
    "new_session_id",
    "parse_file_name",
    "rebuild",
    "shard_of",
    "validate_message",
]
