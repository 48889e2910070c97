"""The words of status details that clients act on: one definition for services and SDK.

A status's message is for people and may change; what a program reads is in its
google.rpc details, and every such word is defined here, documented in the protos
(``protos/rollout/v1/*.proto``) and compared with these constants, never as text
of a message:

* ``ErrorInfo.reason`` (domain :data:`ERROR_DOMAIN`): :data:`SESSION_EXISTS`
  (ALREADY_EXISTS; metadata ``session_id`` names the session), :data:`REPLY_TOO_LARGE`
  (RESOURCE_EXHAUSTED; the same request meets it every time: use the streaming RPC),
  :data:`SESSION_FILE_REPLACED` / :data:`SESSION_FILE_TRUNCATED` (ABORTED, a watch), and
  for a failed write or repair the errno's name (``ENOSPC``, ``EIO``, ...), or
  :data:`WRITE_FAILED` / :data:`REPAIR_FAILED` when the failure had no errno;
  :data:`NOT_OWNER` (UNAVAILABLE; metadata ``shard``, ``epoch``, and the owner's address and epoch
  as the writer knows them, :data:`OWNER_ADDRESS` and :data:`OWNER_EPOCH`, empty when unknown:
  retry there, or after refreshing the shard map); :data:`SESSION_NOT_VISIBLE` and
  :data:`OWNER_UNREACHED` (UNAVAILABLE of a reader of a cluster that does not see a session's
  file: its owner holds the session, or no owner could be asked; metadata ``shard`` and
  :data:`OWNER_ADDRESS`: retry);
* ``PreconditionFailure`` violations (FAILED_PRECONDITION) of type :data:`SESSION_STATE`:
  the subject names what the precondition is about (:func:`session_subject`,
  :func:`request_subject`, :func:`seq_subject`); a stopped session's description is
  :data:`SESSION_IS_OPEN`, a seq mismatch's names the actual next seq
  (:func:`next_seq_precondition`, read back by :func:`next_seq_of_precondition`).

One text is not ours: gRPC refuses a message over a receive limit with RESOURCE_EXHAUSTED
and no details, its message holding :data:`GRPC_MESSAGE_TOO_LARGE`; the same request meets
it every time, so clients read it as not retryable.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from google.protobuf.message import DecodeError
from google.rpc import error_details_pb2, status_pb2

#: ``ErrorInfo.domain`` of every reason the ledger sends.
ERROR_DOMAIN = "rollout-ledger"

#: ALREADY_EXISTS of CreateSession: the id (or session key) is taken; metadata ``session_id``.
SESSION_EXISTS = "SESSION_EXISTS"
#: RESOURCE_EXHAUSTED of a unary read whose reply would be over the limit: not retryable.
REPLY_TOO_LARGE = "REPLY_TOO_LARGE"
#: ABORTED of WatchSession: the watched file was replaced or removed.
SESSION_FILE_REPLACED = "SESSION_FILE_REPLACED"
#: ABORTED of WatchSession: the watched file was cut below what the watch read.
SESSION_FILE_TRUNCATED = "SESSION_FILE_TRUNCATED"
#: A write or fsync failed without an errno (otherwise the reason is the errno's name).
WRITE_FAILED = "WRITE_FAILED"
#: A session awaits a repair that failed without an errno (otherwise the errno's name).
REPAIR_FAILED = "REPAIR_FAILED"
#: UNAVAILABLE of a writer that does not own the session's shard, or whose ownership ended before
#: the write was durable (nothing acknowledged; retry); metadata ``shard``, ``epoch`` (the epoch this
#: writer wrote under, empty when it never owned the shard), :data:`OWNER_ADDRESS` and :data:`OWNER_EPOCH`.
NOT_OWNER = "NOT_OWNER"
#: UNAVAILABLE of a reader of a cluster: the session's file is not visible on its host yet, while
#: the owner of the session's shard holds the session (retry); metadata ``shard``, OWNER_ADDRESS.
SESSION_NOT_VISIBLE = "SESSION_NOT_VISIBLE"
#: UNAVAILABLE of a reader of a cluster: the session's file is not visible on its host and no owner
#: of its shard could be asked whether it exists (retry); metadata ``shard``, OWNER_ADDRESS.
OWNER_UNREACHED = "OWNER_UNREACHED"
#: NOT_OWNER metadata: the ``host:port`` of the shard's owner as the writer knows it ("" when unknown).
OWNER_ADDRESS = "owner_address"
#: NOT_OWNER metadata: the epoch of that owner's ownership of the shard ("" when unknown).
OWNER_EPOCH = "owner_epoch"

#: ``PreconditionFailure.Violation.type`` of every FAILED_PRECONDITION the ledger sends.
SESSION_STATE = "SESSION_STATE"
#: The precondition a stopped session fails (an Append, or a Stop of a stopped session).
SESSION_IS_OPEN = "session is open"

#: Part of gRPC's own message refusing a message over a receive limit (``Received message
#: larger than max (N vs. M)``); gRPC sends it without details.
GRPC_MESSAGE_TOO_LARGE = "larger than max"

_NEXT_SEQ_PRECONDITION = re.compile(r"next_seq=(\d+)")


def session_subject(session_id: str) -> str:
    """The violation subject of a precondition on a session: ``session/<id>``."""
    return f"session/{session_id}"


def request_subject(request_id: str) -> str:
    """The violation subject of a precondition on an Append's request id: ``request/<id>``
    (the writer cannot tell whether that request landed)."""
    return f"request/{request_id}"


def seq_subject(seq: int) -> str:
    """The violation subject of a precondition on a point of a session: ``seq/<seq>``."""
    return f"seq/{seq}"


def next_seq_precondition(next_seq: int) -> str:
    """The description of a seq mismatch: ``next_seq=<the session's next seq>``."""
    return f"next_seq={next_seq}"


def next_seq_of_precondition(description: str) -> int | None:
    """The next seq a seq mismatch's description names (:func:`next_seq_precondition`), else None."""
    match = _NEXT_SEQ_PRECONDITION.fullmatch(description)
    return int(match.group(1)) if match is not None else None


#: The trailing metadata key that carries a failed call's google.rpc.Status.
STATUS_DETAILS_KEY = "grpc-status-details-bin"


def status_of_trailer(metadata: Iterable[tuple[str, str | bytes]] | None) -> status_pb2.Status | None:
    """The google.rpc.Status a failed call's trailing metadata carries (:data:`STATUS_DETAILS_KEY`),
    or None when it carries none or one that does not decode."""
    for key, value in metadata or ():
        if key == STATUS_DETAILS_KEY and isinstance(value, bytes):
            try:
                return status_pb2.Status.FromString(value)
            except DecodeError:
                return None
    return None


def error_info_metadata(status: status_pb2.Status | None, reason: str) -> dict[str, str] | None:
    """The metadata of ``status``'s ErrorInfo of ``reason``, or None when it carries none."""
    for detail in status.details if status is not None else ():
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info) and info.reason == reason:
            return dict(info.metadata)
    return None
