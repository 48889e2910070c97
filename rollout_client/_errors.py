"""Typed errors of the client: one class per gRPC status family, carrying the rich details.

The hierarchy::

    RolloutError                       base; ``.code``, ``.message`` and the google.rpc details
    ├── InvalidArgumentError           INVALID_ARGUMENT   ``.field_violations`` (field, description)
    ├── NotFoundError                  NOT_FOUND          unknown session
    ├── AlreadyExistsError             ALREADY_EXISTS     a session id already in the ledger
    ├── FailedPreconditionError        FAILED_PRECONDITION ``.precondition_violations``; ``.next_seq``
    │   └── SessionStoppedError                           the session is stopped (call resume())
    ├── AbortedError                   ABORTED            a Stop or Resume of the session is running
    ├── ResourceExhaustedError         RESOURCE_EXHAUSTED queue full, disk full, reply too large
    ├── UnavailableError               UNAVAILABLE        service down, or a write/fsync failed
    ├── DeadlineExceededError          DEADLINE_EXCEEDED  the call's deadline passed
    ├── DataLossError                  DATA_LOSS          damaged session file (line and offset named)
    ├── UnauthenticatedError           UNAUTHENTICATED    missing or unknown token
    ├── PermissionDeniedError          PERMISSION_DENIED  e.g. record times from an untrusted caller
    ├── InternalError                  INTERNAL, UNKNOWN and every other code
    └── AppendOutcomeUnknownError      (client side) an append may or may not have landed

Status codes and details come from the services (``protos/rollout/v1/*.proto``
documents which RPC returns which). Client-side misuse raises the usual Python
exceptions instead: ``ValueError`` / ``TypeError`` for a record of the wrong shape,
:class:`RootNotDeclaredError` (a ``ValueError``) for an agent session that says
neither root nor child.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import grpc
from google.rpc import error_details_pb2

from shared.reasons import SESSION_EXISTS, SESSION_IS_OPEN, next_seq_of_precondition, status_of_trailer


@dataclass(frozen=True)
class FieldViolation:
    """One ``google.rpc.BadRequest`` field violation, e.g. ``records[2].message.tool_call_id``."""

    field: str
    description: str


@dataclass(frozen=True)
class PreconditionViolation:
    """One ``google.rpc.PreconditionFailure`` violation (subject ``session/<id>``, description
    ``next_seq=<n>`` on a seq mismatch or ``session is open`` on a stopped session: the words
    of shared.reasons)."""

    type: str
    subject: str
    description: str


@dataclass(frozen=True)
class ErrorInfo:
    """A ``google.rpc.ErrorInfo``: e.g. reason ``ENOSPC``, domain ``rollout-ledger``,
    metadata ``{"operation": "fsync"}`` on a failed write."""

    reason: str
    domain: str
    metadata: dict[str, str] = field(default_factory=dict)


class RolloutError(Exception):
    """A call to the ledger failed. ``code`` is the gRPC status (None for client-side outcomes),
    ``message`` the service's text; the google.rpc details are decoded into the three lists."""

    def __init__(
        self,
        message: str,
        *,
        code: grpc.StatusCode | None = None,
        field_violations: tuple[FieldViolation, ...] = (),
        precondition_violations: tuple[PreconditionViolation, ...] = (),
        error_info: tuple[ErrorInfo, ...] = (),
    ) -> None:
        super().__init__(f"{code.name}: {message}" if code is not None else message)
        self.code = code
        self.message = message
        self.field_violations = field_violations
        self.precondition_violations = precondition_violations
        self.error_info = error_info


class InvalidArgumentError(RolloutError):
    """INVALID_ARGUMENT: a request field or record is refused; nothing of the request was written."""


class NotFoundError(RolloutError):
    """NOT_FOUND: the session does not exist (or its file is gone)."""


class AlreadyExistsError(RolloutError):
    """ALREADY_EXISTS: the session id (or session key) given to create_session is already in the
    ledger; :attr:`session_id` names the session when the writer said which."""

    @property
    def session_id(self) -> str | None:
        """The existing session's id (ErrorInfo reason ``SESSION_EXISTS``), or None."""
        for info in self.error_info:
            if info.reason == SESSION_EXISTS and info.metadata.get("session_id"):
                return info.metadata["session_id"]
        return None


class FailedPreconditionError(RolloutError):
    """FAILED_PRECONDITION: the session is not in a state for this call (see the violations)."""

    @property
    def next_seq(self) -> int | None:
        """The session's actual next seq when the refusal is a seq mismatch, else None."""
        for violation in self.precondition_violations:
            next_seq = next_seq_of_precondition(violation.description)
            if next_seq is not None:
                return next_seq
        return None


class SessionStoppedError(FailedPreconditionError):
    """The session is stopped: appends are refused until ``resume()``."""


class AbortedError(RolloutError):
    """ABORTED: a Stop or Resume of the session is in progress; retrying later is safe."""


class ResourceExhaustedError(RolloutError):
    """RESOURCE_EXHAUSTED: the writer's queue or disk is full, or a reply is too large."""


class UnavailableError(RolloutError):
    """UNAVAILABLE: the service cannot be reached, or a write or fsync failed (nothing kept)."""


class DeadlineExceededError(RolloutError):
    """DEADLINE_EXCEEDED: the call's deadline passed before an answer."""


class DataLossError(RolloutError):
    """DATA_LOSS: the session file is damaged (the message names line and byte offset)."""


class UnauthenticatedError(RolloutError):
    """UNAUTHENTICATED: the service wants a valid bearer token (``token=``)."""


class PermissionDeniedError(RolloutError):
    """PERMISSION_DENIED: the token may not do this (e.g. set record times)."""


class InternalError(RolloutError):
    """INTERNAL, UNKNOWN or another status no other class covers."""


class ClientClosedError(RolloutError):
    """The blocking client was closed (from another thread) before this call completed, or the
    call came after :meth:`RolloutClient.close`. An append cut short this way may or may not
    have been written: read the session (replay) before appending it again."""


class AppendOutcomeUnknownError(RolloutError):
    """An append whose first attempt may have landed could not be settled without risking a
    second copy (see :mod:`rollout_client._appends`). Nothing was written twice; read the
    session (replay) to see whether the records are there before appending them again.

    ``expected_next_seq`` is the seq the request asked for, ``actual_next_seq`` the writer's
    next seq when it was last asked (None when it never answered), ``record_count`` the
    lines the request writes, ``request_id`` its idempotency key.
    """

    def __init__(
        self,
        message: str,
        *,
        request_id: str,
        expected_next_seq: int,
        actual_next_seq: int | None,
        record_count: int,
    ) -> None:
        super().__init__(message)
        self.request_id = request_id
        self.expected_next_seq = expected_next_seq
        self.actual_next_seq = actual_next_seq
        self.record_count = record_count


class RootNotDeclaredError(ValueError):
    """create_session named an agent outside any delegation without ``root=True``: a session
    that names an agent is either a root (say so) or a child (create it inside
    ``rollout_client.delegation(...)``); empty coordinates are never taken for a root."""


_CLASSES: dict[grpc.StatusCode, type[RolloutError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExistsError,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPreconditionError,
    grpc.StatusCode.ABORTED: AbortedError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    grpc.StatusCode.DATA_LOSS: DataLossError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
}


def error_from_rpc(error: grpc.aio.AioRpcError) -> RolloutError:
    """The typed exception of a failed call, with its BadRequest, PreconditionFailure and
    ErrorInfo details decoded (details of other types are ignored)."""
    code = error.code()
    message = error.details() or ""
    fields: list[FieldViolation] = []
    preconditions: list[PreconditionViolation] = []
    infos: list[ErrorInfo] = []
    status = status_of_trailer(error.trailing_metadata())
    for packed in status.details if status is not None else ():
        bad_request = error_details_pb2.BadRequest()
        failure = error_details_pb2.PreconditionFailure()
        info = error_details_pb2.ErrorInfo()
        if packed.Unpack(bad_request):
            fields += [FieldViolation(v.field, v.description) for v in bad_request.field_violations]
        elif packed.Unpack(failure):
            preconditions += [
                PreconditionViolation(v.type, v.subject, v.description) for v in failure.violations
            ]
        elif packed.Unpack(info):
            infos.append(ErrorInfo(info.reason, info.domain, dict(info.metadata)))
    cls = _CLASSES.get(code, InternalError)
    if cls is FailedPreconditionError and any(v.description == SESSION_IS_OPEN for v in preconditions):
        cls = SessionStoppedError
    return cls(
        message,
        code=code,
        field_violations=tuple(fields),
        precondition_violations=tuple(preconditions),
        error_info=tuple(infos),
    )
