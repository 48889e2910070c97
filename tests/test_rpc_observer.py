"""The per-call observer lets go of what a refused call built: its request and payloads are freed
when the call ends, although gRPC keeps the call's abort error (docs/spec.md §2.10, bounded memory).
An aborted call ends in the observer (gRPC sends the status the abort set); other errors go on."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import AsyncIterator
from typing import Any

import grpc
import grpc.aio
import pytest

from serving.rpc_observer import RpcObserver
from shared.errors import RecordValidationError


class Built:
    """Stands in for what a handler builds from a request (a payload, a line): weakly referable."""


class RefusingContext:
    """The parts of a servicer context the observer reads, for a call refused with INVALID_ARGUMENT."""

    def peer(self) -> str:
        return "ipv4:127.0.0.1:1"

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.INVALID_ARGUMENT

    def details(self) -> str:
        return "record 0: over the limit"


def _encode(built: Built) -> None:
    raise RecordValidationError(0, "message", "record is over the limit; it is rejected, never truncated")


async def _refused_call(handler: Any, stream: bool) -> tuple[BaseException, weakref.ref[Built]]:
    """Run ``handler`` (unary or streaming) through the observer; returns (the abort error, a weak
    reference to what the handler built). The error is kept, as gRPC keeps a call's abort error,
    and the observer ends the call without raising it."""
    references: list[weakref.ref[Built]] = []
    kept: list[BaseException] = []
    await _observed(lambda request, context: handler(references, kept), None, stream)
    [error] = kept
    return error, references[0]


async def _observed(handler: Any, requests: Any, stream: bool) -> None:
    """Run one call of ``handler`` through the observer to its end, as gRPC would: a unary
    response awaited (an aborted call answers None), a response stream read to its end."""
    outcome = RpcObserver("writer").intercept(
        handler, requests, RefusingContext(), "/rollout.v1.RolloutWriter/X"
    )
    if stream:
        async for _ in await outcome:
            pass
    else:
        assert await outcome is None


def _abort(kept: list[BaseException]) -> grpc.aio.AbortError:
    """What ``context.abort`` does: the error is kept for gRPC, then raised."""
    error = grpc.aio.AbortError("aborted")
    kept.append(error)
    return error


async def _unary(references: list[weakref.ref[Built]], kept: list[BaseException]) -> None:
    built = Built()
    references.append(weakref.ref(built))
    try:
        _encode(built)
    except RecordValidationError:
        raise _abort(kept) from None


async def _streaming(references: list[weakref.ref[Built]], kept: list[BaseException]) -> AsyncIterator[None]:
    built = Built()
    references.append(weakref.ref(built))
    yield None
    try:
        _encode(built)
    except RecordValidationError as error:
        raise _abort(kept) from error


@pytest.mark.parametrize(
    ("handler", "stream"), [(_unary, False), (_streaming, True)], ids=["unary", "stream"]
)
def test_what_a_refused_call_built_is_freed_when_the_call_ends(handler: Any, stream: bool) -> None:
    """After an aborted call (unary or streaming), nothing its frames held is alive, even while its
    abort error is kept and before any garbage collection."""
    gc.disable()
    try:
        error, built = asyncio.run(_refused_call(handler, stream))
        assert error.__traceback__ is None
        assert built() is None
    finally:
        gc.enable()


def test_an_unexpected_error_keeps_its_traceback_for_the_log() -> None:
    """An error that is not an abort (a bug) keeps its traceback: gRPC logs it with the stack."""

    async def failing(request: object, context: object) -> None:
        raise KeyError("bug")

    async def scenario() -> BaseException:
        try:
            await RpcObserver("writer").intercept(failing, None, RefusingContext(), "/x.Y/Z")
        except KeyError as error:
            return error
        raise AssertionError("the call did not fail")

    assert asyncio.run(scenario()).__traceback__ is not None


async def _received(references: list[weakref.ref[Built]]) -> AsyncIterator[Built]:
    """A request iterator as gRPC's: suspended at a message, it holds that message."""
    built = Built()
    references.append(weakref.ref(built))
    yield built
    yield Built()


async def _reading_one_then_refusing(requests: AsyncIterator[Built], kept: list[BaseException]) -> None:
    async for request in requests:
        del request
        raise _abort(kept)


async def _reading_one_then_refusing_stream(
    requests: AsyncIterator[Built], kept: list[BaseException]
) -> AsyncIterator[None]:
    yield None
    await _reading_one_then_refusing(requests, kept)


@pytest.mark.parametrize("stream", [False, True], ids=["stream-unary", "bidi"])
def test_a_refused_client_stream_lets_go_of_the_last_request_it_received(stream: bool) -> None:
    """A client-streaming call refused after reading a request: its request iterator is closed when
    the call ends, so that request is freed although the iterator itself is still referenced."""

    async def scenario() -> None:
        references: list[weakref.ref[Built]] = []
        kept: list[BaseException] = []
        requests = _received(references)  # referenced here, as gRPC's receiver holds its iterator
        handler = _reading_one_then_refusing_stream if stream else _reading_one_then_refusing
        await _observed(lambda iterator, context: handler(iterator, kept), requests, stream)
        assert len(kept) == 1
        # Checked before asyncio.run ends: its shutdown would close every async generator.
        assert references[0]() is None

    gc.disable()
    try:
        asyncio.run(scenario())
    finally:
        gc.enable()


class GoneContext(RefusingContext):
    """A call whose client went away: no status was set."""

    def code(self) -> None:  # type: ignore[override]
        return None


def test_a_response_stream_closed_because_its_client_left_counts_as_cancelled(caplog) -> None:
    """gRPC closes the response stream of a client that went away (GeneratorExit inside it): the call
    is logged and counted as CANCELLED at INFO, not as a server failure."""

    async def replies(request: object, context: object) -> AsyncIterator[int]:
        for number in range(10):
            yield number

    async def scenario() -> None:
        stream = await RpcObserver("reader").intercept(
            replies, None, GoneContext(), "/rollout.v1.RolloutReader/GetX"
        )
        assert await anext(stream) == 0
        await stream.aclose()

    with caplog.at_level("INFO", logger="rollout.rpc"):
        asyncio.run(scenario())
    [record] = [r for r in caplog.records if r.name == "rollout.rpc"]
    assert record.levelname == "INFO"
    assert "CANCELLED" in record.getMessage()


@pytest.mark.parametrize(
    ("reason", "level", "outcome"),
    [
        ("NOT_OWNER", "WARNING", "redirected"),
        ("SESSION_NOT_VISIBLE", "WARNING", "redirected"),
        ("OWNER_UNREACHED", "ERROR", "failed"),
        ("", "ERROR", "failed"),
    ],
)
def test_an_unavailable_that_redirects_by_design_is_logged_as_redirected(
    caplog, reason: str, level: str, outcome: str
) -> None:
    """Over a real server: UNAVAILABLE with ErrorInfo NOT_OWNER or SESSION_NOT_VISIBLE (a cluster
    sending the caller elsewhere) is logged at WARNING as redirected; any other UNAVAILABLE is a
    failure at ERROR."""
    from google.protobuf import any_pb2
    from google.rpc import code_pb2, error_details_pb2, status_pb2
    from grpc_status import rpc_status

    from shared.reasons import ERROR_DOMAIN

    message = status_pb2.Status(code=code_pb2.UNAVAILABLE, message="elsewhere")
    if reason:
        detail = any_pb2.Any()
        detail.Pack(error_details_pb2.ErrorInfo(reason=reason, domain=ERROR_DOMAIN))
        message.details.append(detail)
    status = rpc_status.to_status(message)

    async def refuse(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        await context.abort(status.code, status.details, status.trailing_metadata)
        raise AssertionError("unreachable")

    async def scenario() -> grpc.StatusCode:
        server = grpc.aio.server(interceptors=[RpcObserver("writer")])
        handlers = {"Append": grpc.unary_unary_rpc_method_handler(refuse)}
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("rollout.v1.RolloutWriter", handlers),)
        )
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await channel.unary_unary("/rollout.v1.RolloutWriter/Append")(b"")
                return caught.value.code()
        finally:
            await server.stop(None)

    with caplog.at_level("INFO", logger="rollout.rpc"):
        assert asyncio.run(scenario()) is grpc.StatusCode.UNAVAILABLE
    [record] = [r for r in caplog.records if r.name == "rollout.rpc"]
    assert (record.levelname, record.outcome) == (level, outcome)
