"""One mapping from ledger errors to gRPC statuses, used by both servicers.

``async with status_mapping(context, "Append"):`` around a handler body turns a
:class:`shared.errors.LedgerError` into its canonical status with google.rpc
rich details (BadRequest field violations, PreconditionFailure), and any other
exception into INTERNAL with a short message: a client never sees a traceback.
The table is in :mod:`shared.errors`.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import grpc
from google.protobuf import any_pb2
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from shared.errors import (
    CorruptSessionError,
    InvalidArgumentError,
    LedgerError,
    QueueFullError,
    RecordValidationError,
    SessionExistsError,
    SessionNotFoundError,
    SessionStateError,
    StorageWriteError,
)

log = logging.getLogger(__name__)


def _status_of(error: LedgerError, prefix: str) -> tuple[grpc.StatusCode, str, list[Message]]:
    message = prefix + str(error)
    match error:
        case RecordValidationError():
            violation = error_details_pb2.BadRequest.FieldViolation(
                field=f"records[{error.index}].{error.field}", description=error.description
            )
            return (
                grpc.StatusCode.INVALID_ARGUMENT,
                message,
                [error_details_pb2.BadRequest(field_violations=[violation])],
            )
        case InvalidArgumentError():
            violation = error_details_pb2.BadRequest.FieldViolation(
                field=error.field, description=error.description
            )
            return (
                grpc.StatusCode.INVALID_ARGUMENT,
                message,
                [error_details_pb2.BadRequest(field_violations=[violation])],
            )
        case SessionNotFoundError():
            return grpc.StatusCode.NOT_FOUND, message, []
        case SessionExistsError():
            return grpc.StatusCode.ALREADY_EXISTS, message, []
        case SessionStateError():
            violation = error_details_pb2.PreconditionFailure.Violation(
                type="SESSION_STATE", subject=error.subject, description=error.precondition
            )
            return (
                grpc.StatusCode.FAILED_PRECONDITION,
                message,
                [error_details_pb2.PreconditionFailure(violations=[violation])],
            )
        case CorruptSessionError():
            return grpc.StatusCode.DATA_LOSS, message, []
        case QueueFullError():
            return grpc.StatusCode.RESOURCE_EXHAUSTED, message, []
        case StorageWriteError():
            return grpc.StatusCode.UNAVAILABLE, message, []
        case _:
            return grpc.StatusCode.INTERNAL, message, []


def rich_status(code: grpc.StatusCode, message: str, details: list[Message]) -> grpc.Status:
    """A grpc.Status carrying google.rpc details in its trailing metadata."""
    status = status_pb2.Status(code=code.value[0], message=message)
    for detail in details:
        packed = any_pb2.Any()
        packed.Pack(detail)
        status.details.append(packed)
    return rpc_status.to_status(status)


@asynccontextmanager
async def status_mapping(
    context: grpc.aio.ServicerContext, rpc: str, prefix: str = ""
) -> AsyncIterator[None]:
    """Abort the RPC with the canonical status of any error raised in the block.

    ``prefix`` is put before the error text (e.g. the position of a request in a
    stream). Aborting raises inside gRPC, ending the handler.
    """
    try:
        yield
    except LedgerError as error:
        code, message, details = _status_of(error, prefix)
        await context.abort_with_status(rich_status(code, message, details))
    except grpc.aio.AbortError:
        raise
    except Exception:
        log.exception("%s failed unexpectedly", rpc)
        await context.abort_with_status(
            rich_status(grpc.StatusCode.INTERNAL, f"{rpc} failed unexpectedly; see the server log", [])
        )
