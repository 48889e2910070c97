"""One mapping from ledger errors to gRPC statuses, used by every RPC of both servicers.

``@rpc_statuses("Append")`` on a handler (unary, server-streaming async generator or
client-streaming) turns what it raises into a status: each class of the hierarchy in
:mod:`shared.errors` into its canonical status with google.rpc rich details
(BadRequest field violations, PreconditionFailure, ErrorInfo), decided per class by
one ``match`` that mypy proves complete (it ends in ``typing.assert_never``); an
OSError (a session file that cannot be read) into NOT_FOUND or UNAVAILABLE; and
anything else (a bug) into INTERNAL with a short message: a client never sees a
traceback. A stream handler names the failing request of its stream by raising
:class:`StreamRequestError`.

Every status fits gRPC's metadata limits whatever a client sent: messages quote
client input clipped (shared.records.clip, 100 characters), and as a last guard a
status message is cut at :data:`MAX_STATUS_MESSAGE_BYTES` and each detail text at
:data:`MAX_DETAIL_TEXT_BYTES` (UTF-8), saying so. A status beyond the client's
metadata limit would otherwise reach it as RESOURCE_EXHAUSTED, which the protos call
retryable.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import aclosing
from pathlib import Path
from typing import Any, NoReturn, TypeVar, assert_never, cast

import grpc
from google.protobuf import any_pb2
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import DecodeError, Message
from google.protobuf.message_factory import GetMessageClass
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from shared.errors import (
    LEDGER_ERROR_CLASSES,
    AnyLedgerError,
    ArtifactNotFoundError,
    CorruptSessionError,
    FileNameError,
    InvalidArgumentError,
    NotOwnerError,
    PermissionDeniedError,
    QueueFullError,
    RecordValidationError,
    ReplyTooLargeError,
    ResourceLimitError,
    RoundNotFoundError,
    SearchUnavailableError,
    SessionBusyError,
    SessionExistsError,
    SessionFileChangedError,
    SessionNotFoundError,
    SessionNotVisibleError,
    SessionStateError,
    SessionUnavailableError,
    StorageWriteError,
    WatchClosedError,
    storage_error,
)
from shared.reasons import (
    ERROR_DOMAIN,
    NOT_OWNER,
    OWNER_ADDRESS,
    OWNER_EPOCH,
    OWNER_UNREACHED,
    REPAIR_FAILED,
    REPLY_TOO_LARGE,
    SESSION_EXISTS,
    SESSION_NOT_VISIBLE,
    SESSION_STATE,
    WRITE_FAILED,
)

log = logging.getLogger(__name__)

#: Longest status message sent (UTF-8 bytes; a non-ASCII one travels percent-encoded, up to 3x).
MAX_STATUS_MESSAGE_BYTES = 1024
#: Longest field name, description or subject of a rich detail (UTF-8 bytes).
MAX_DETAIL_TEXT_BYTES = 512


def bounded(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` UTF-8 bytes (on a character boundary), saying it was cut."""
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) <= limit:
        return text
    mark = f"… (cut at {limit} bytes)"
    return raw[: limit - len(mark.encode())].decode("utf-8", "ignore") + mark


def _field_violation(error: InvalidArgumentError) -> error_details_pb2.BadRequest:
    violation = error_details_pb2.BadRequest.FieldViolation(
        field=bounded(error.field, MAX_DETAIL_TEXT_BYTES),
        description=bounded(error.description, MAX_DETAIL_TEXT_BYTES),
    )
    return error_details_pb2.BadRequest(field_violations=[violation])


def _status_of(error: AnyLedgerError, prefix: str) -> tuple[grpc.StatusCode, str, list[Message]]:
    """(code, message, google.rpc details) of ``error``, its message after ``prefix``. One case
    per class of :data:`shared.errors.AnyLedgerError` (a subclass before its base)."""
    message = prefix + str(error)
    match error:
        case RecordValidationError():
            violation = error_details_pb2.BadRequest.FieldViolation(
                field=bounded(f"records[{error.index}].{error.field}", MAX_DETAIL_TEXT_BYTES),
                description=bounded(error.description, MAX_DETAIL_TEXT_BYTES),
            )
            return (
                grpc.StatusCode.INVALID_ARGUMENT,
                message,
                [error_details_pb2.BadRequest(field_violations=[violation])],
            )
        case FileNameError():
            return grpc.StatusCode.INVALID_ARGUMENT, message, [_field_violation(error)]
        case InvalidArgumentError():
            return grpc.StatusCode.INVALID_ARGUMENT, message, [_field_violation(error)]
        case PermissionDeniedError():
            return grpc.StatusCode.PERMISSION_DENIED, message, []
        case RoundNotFoundError():
            return grpc.StatusCode.NOT_FOUND, message, []
        case SessionNotFoundError():
            return grpc.StatusCode.NOT_FOUND, message, []
        case ArtifactNotFoundError():
            return grpc.StatusCode.NOT_FOUND, message, []
        case SessionExistsError():
            info = error_details_pb2.ErrorInfo(
                reason=SESSION_EXISTS, domain=ERROR_DOMAIN, metadata={"session_id": error.session_id}
            )
            return grpc.StatusCode.ALREADY_EXISTS, message, [info]
        case SessionStateError():
            violation = error_details_pb2.PreconditionFailure.Violation(
                type=SESSION_STATE,
                subject=bounded(error.subject, MAX_DETAIL_TEXT_BYTES),
                description=bounded(error.precondition, MAX_DETAIL_TEXT_BYTES),
            )
            return (
                grpc.StatusCode.FAILED_PRECONDITION,
                message,
                [error_details_pb2.PreconditionFailure(violations=[violation])],
            )
        case SessionBusyError():
            return grpc.StatusCode.ABORTED, message, []
        case CorruptSessionError():
            return grpc.StatusCode.DATA_LOSS, message, []
        case SessionUnavailableError():
            info = error_details_pb2.ErrorInfo(
                reason=error.errno_name or REPAIR_FAILED,
                domain=ERROR_DOMAIN,
                metadata={"operation": "repair"},
            )
            return grpc.StatusCode.UNAVAILABLE, message, [info]
        case NotOwnerError():
            info = error_details_pb2.ErrorInfo(
                reason=NOT_OWNER,
                domain=ERROR_DOMAIN,
                metadata={
                    "shard": str(error.shard),
                    "epoch": "" if error.epoch is None else str(error.epoch),
                    OWNER_ADDRESS: "" if error.owner is None else error.owner[0],
                    OWNER_EPOCH: "" if error.owner is None else str(error.owner[1]),
                },
            )
            return grpc.StatusCode.UNAVAILABLE, message, [info]
        case ReplyTooLargeError():  # the same request meets it every time: the reason says so
            info = error_details_pb2.ErrorInfo(reason=REPLY_TOO_LARGE, domain=ERROR_DOMAIN)
            return grpc.StatusCode.RESOURCE_EXHAUSTED, message, [info]
        case QueueFullError():
            return grpc.StatusCode.RESOURCE_EXHAUSTED, message, []
        case ResourceLimitError():
            return grpc.StatusCode.RESOURCE_EXHAUSTED, message, []
        case StorageWriteError():
            info = error_details_pb2.ErrorInfo(
                reason=error.errno_name or WRITE_FAILED,
                domain=ERROR_DOMAIN,
                metadata={"operation": error.operation or "write"},
            )
            code = grpc.StatusCode.RESOURCE_EXHAUSTED if error.disk_full else grpc.StatusCode.UNAVAILABLE
            return code, message, [info]
        case SessionFileChangedError():  # the stream cannot go on: watch again from seq 0
            info = error_details_pb2.ErrorInfo(reason=error.reason, domain=ERROR_DOMAIN)
            return grpc.StatusCode.ABORTED, message, [info]
        case SessionNotVisibleError():
            info = error_details_pb2.ErrorInfo(
                reason=SESSION_NOT_VISIBLE if error.confirmed else OWNER_UNREACHED,
                domain=ERROR_DOMAIN,
                metadata={"shard": str(error.shard), OWNER_ADDRESS: error.owner},
            )
            return grpc.StatusCode.UNAVAILABLE, message, [info]
        case WatchClosedError() | SearchUnavailableError():
            return grpc.StatusCode.UNAVAILABLE, message, []
        case _:
            assert_never(error)


def rich_status(code: grpc.StatusCode, message: str, details: list[Message]) -> grpc.Status:
    """A grpc.Status carrying google.rpc details in its trailing metadata (the message cut at
    :data:`MAX_STATUS_MESSAGE_BYTES`)."""
    status = status_pb2.Status(code=code.value[0], message=bounded(message, MAX_STATUS_MESSAGE_BYTES))
    for detail in details:
        packed = any_pb2.Any()
        packed.Pack(detail)
        status.details.append(packed)
    return rpc_status.to_status(status)


async def abort_with(context: grpc.aio.ServicerContext, status: grpc.Status) -> NoReturn:
    """Abort the call with ``status`` (code, message, google.rpc details in its trailing
    metadata); raises grpc.aio.AbortError. Through ``context.abort``, not ``abort_with_status``:
    the same for gRPC, and OpenTelemetry's context wrapper records the code only on ``abort``."""
    await context.abort(status.code, status.details, status.trailing_metadata)
    raise AssertionError("unreachable: abort raises")


def _file_error_status(error: OSError, rpc: str, prefix: str) -> grpc.Status:
    """NOT_FOUND for a session file that vanished; any other error reading one is mapped as
    :func:`shared.errors.storage_error` (operation ``read``; UNAVAILABLE + ErrorInfo errno)."""
    name = Path(os.fsdecode(error.filename)).name if error.filename else "a session file"
    if isinstance(error, FileNotFoundError):
        return rich_status(
            grpc.StatusCode.NOT_FOUND,
            f"{prefix}{rpc}: session file {name} is gone (moved or deleted outside the ledger)",
            [],
        )
    return rich_status(*_status_of(storage_error(error, "read", f"{rpc}: reading {name}"), prefix))


class StreamRequestError(Exception):
    """Raised by a stream handler: request ``position`` (0-based) of the client's stream failed
    with ``error``. Its status is ``error``'s, the message starting ``request <position> of the
    stream: ``."""

    def __init__(self, position: int, error: Exception) -> None:
        super().__init__(f"request {position} of the stream: {error}")
        self.position = position
        self.error = error


def status_of_failure(error: Exception, rpc: str) -> grpc.Status:
    """The status an RPC ends with when its handler raised ``error`` (see the module doc).

    Logs what is not a ledger error (an OSError, or a bug: INTERNAL) with its traceback.
    """
    prefix = ""
    if isinstance(error, StreamRequestError):
        prefix, error = f"request {error.position} of the stream: ", error.error
    if isinstance(error, LEDGER_ERROR_CLASSES):
        return rich_status(*_status_of(error, prefix))
    if isinstance(error, OSError):  # reading a session file (writes raise StorageWriteError)
        log.error("%s: file system error", rpc, exc_info=error)
        return _file_error_status(error, rpc, prefix)
    log.error("%s failed unexpectedly", rpc, exc_info=error)
    return rich_status(grpc.StatusCode.INTERNAL, f"{rpc} failed unexpectedly; see the server log", [])


Handler = TypeVar("Handler", bound=Callable[..., Any])


def rpc_statuses(rpc: str) -> Callable[[Handler], Handler]:
    """Decorate the servicer method of RPC ``rpc`` so that whatever it raises ends the call with
    its status (:func:`status_of_failure`); an abort the handler made itself passes as it is.

    Works on coroutine handlers (unary and client-streaming RPCs) and async generator
    handlers (server-streaming RPCs; the handler's generator is closed when the call ends).
    """

    def decorate(handler: Handler) -> Handler:
        if inspect.isasyncgenfunction(handler):

            @functools.wraps(handler)
            async def streaming(*args: Any) -> AsyncIterator[Any]:
                context: grpc.aio.ServicerContext = args[-1]
                try:
                    async with aclosing(handler(*args)) as replies:
                        async for reply in replies:
                            yield reply
                except grpc.aio.AbortError:
                    raise
                except Exception as error:
                    await abort_with(context, status_of_failure(error, rpc))

            return cast(Handler, streaming)
        if not inspect.iscoroutinefunction(handler):
            raise TypeError(f"{rpc}: rpc_statuses decorates async handlers, not {handler!r}")

        @functools.wraps(handler)
        async def unary(*args: Any) -> Any:
            context: grpc.aio.ServicerContext = args[-1]
            try:
                return await handler(*args)
            except grpc.aio.AbortError:
                raise
            except Exception as error:
                await abort_with(context, status_of_failure(error, rpc))

        return cast(Handler, unary)

    return decorate


class RefusedRequest:
    """Stands in for a request refused from its bytes, before or instead of decoding: bytes
    that are not valid protobuf (e.g. a string field that is not valid UTF-8, such as an
    encoded lone surrogate; INVALID_ARGUMENT), or what a method's screen refused
    (see :func:`add_servicer`)."""

    __slots__ = ("error",)

    def __init__(self, error: AnyLedgerError) -> None:
        self.error = error


#: A method's screen: given a request's bytes, the error refusing it, or None to decode it.
RequestScreen = Callable[[bytes], AnyLedgerError | None]


def _tolerant_deserializer(message_class: Any, screen: RequestScreen | None) -> Callable[[bytes], Any]:
    def deserialize(raw: bytes) -> Any:
        if screen is not None:
            refusal = screen(raw)
            if refusal is not None:
                return RefusedRequest(refusal)
        try:
            return message_class.FromString(raw)
        except DecodeError as exc:
            return RefusedRequest(
                InvalidArgumentError(
                    "request",
                    f"is not a valid {message_class.DESCRIPTOR.full_name} ({exc}); check that every"
                    " string is valid UTF-8 (no lone surrogates) and objects are not nested too deeply",
                )
            )

    return deserialize


def check_decoded(request: Any) -> None:
    """Raise the error of a stream item refused from its bytes (see :class:`RefusedRequest`).

    Client-streaming handlers receive their request iterator as it is (a wrapping
    generator would cost every message of a hot stream) and call this per item.
    """
    if isinstance(request, RefusedRequest):
        raise request.error


def _wrap(method: Callable[..., Any], client_streaming: bool, server_streaming: bool) -> Callable[..., Any]:
    """A handler that answers a request refused from its bytes with its status, then calls ``method``.

    Client-streaming methods are returned as they are: they call :func:`check_decoded`.
    """
    if client_streaming:
        return method

    async def reject(request: RefusedRequest, context: grpc.aio.ServicerContext) -> None:
        await abort_with(context, rich_status(*_status_of(request.error, "")))

    if server_streaming:

        async def unary_stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            if isinstance(request, RefusedRequest):
                await reject(request, context)
            async for response in method(request, context):
                yield response

        return unary_stream

    async def unary_unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
        if isinstance(request, RefusedRequest):
            await reject(request, context)
        return await method(request, context)

    return unary_unary


def _serializer(message_class: Any) -> Callable[[Any], bytes]:
    """Serialize a response message; a response a handler already serialized (bytes) is sent as is."""
    serialize = message_class.SerializeToString

    def serialized(response: Any) -> bytes:
        return response if type(response) is bytes else serialize(response)

    return serialized


def add_servicer(
    server: grpc.aio.Server,
    service: ServiceDescriptor,
    servicer: object,
    screens: Mapping[str, RequestScreen] | None = None,
) -> None:
    """Register ``servicer``'s methods for ``service`` with decoding errors answered as
    INVALID_ARGUMENT (the generated ``add_*_to_server`` would answer INTERNAL).

    A handler may return (or yield) its response already serialized, as bytes of
    the method's response type; it is sent as is. ``screens`` maps a method name to
    a function that sees each request's bytes before they are decoded and may refuse
    them with a ledger error (answered with its status, as :func:`rpc_statuses`
    would). Client-streaming methods must call :func:`check_decoded` on each request.
    """
    handlers: dict[str, grpc.RpcMethodHandler] = {}
    for method in service.methods:
        request_class = GetMessageClass(method.input_type)
        response_class = GetMessageClass(method.output_type)
        factory = {
            (False, False): grpc.unary_unary_rpc_method_handler,
            (False, True): grpc.unary_stream_rpc_method_handler,
            (True, False): grpc.stream_unary_rpc_method_handler,
            (True, True): grpc.stream_stream_rpc_method_handler,
        }[(method.client_streaming, method.server_streaming)]
        handlers[method.name] = factory(
            _wrap(getattr(servicer, method.name), method.client_streaming, method.server_streaming),
            request_deserializer=_tolerant_deserializer(request_class, (screens or {}).get(method.name)),
            response_serializer=_serializer(response_class),
        )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service.full_name, handlers),))
