"""Typed errors: one class per status family, with the google.rpc details decoded."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2

import rollout_client
from rollout_client import (
    ErrorInfo,
    FailedPreconditionError,
    FieldViolation,
    InternalError,
    PreconditionViolation,
    RolloutError,
    SessionStoppedError,
    UnavailableError,
    user,
)
from rollout_client._errors import error_from_rpc


def rpc_error(
    code: grpc.StatusCode, message: str, *details, raw: bytes | None = None
) -> grpc.aio.AioRpcError:
    """An AioRpcError as a server answering ``code`` with these google.rpc details would raise."""
    status = status_pb2.Status(code=code.value[0], message=message)
    for detail in details:
        packed = any_pb2.Any()
        packed.Pack(detail)
        status.details.append(packed)
    trailer = raw if raw is not None else status.SerializeToString()
    metadata = grpc.aio.Metadata(("grpc-status-details-bin", trailer))
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), metadata, details=message)


def unavailable() -> grpc.aio.AioRpcError:
    """A lost answer, as the channel reports it."""
    return grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), "lost")


@pytest.mark.parametrize("code", [code for code in grpc.StatusCode if code != grpc.StatusCode.OK])
def test_every_status_code_has_exactly_one_typed_error(code) -> None:
    """Each non-OK status maps to a RolloutError subclass named after its family (INTERNAL for the rest)."""
    error = error_from_rpc(rpc_error(code, "why"))
    assert isinstance(error, RolloutError)
    assert error.code == code
    assert error.message == "why"
    expected = "".join(part.title() for part in code.name.split("_")) + "Error"
    if hasattr(rollout_client, expected):
        assert type(error).__name__ == expected
    else:
        assert type(error) is InternalError


def test_field_violations_precondition_failures_and_error_info_are_decoded() -> None:
    """BadRequest, PreconditionFailure and ErrorInfo details arrive as typed tuples."""
    bad = error_details_pb2.BadRequest(
        field_violations=[
            error_details_pb2.BadRequest.FieldViolation(field="records[2].message.role", description="bad")
        ]
    )
    error = error_from_rpc(rpc_error(grpc.StatusCode.INVALID_ARGUMENT, "x", bad))
    assert error.field_violations == (FieldViolation("records[2].message.role", "bad"),)
    failure = error_details_pb2.PreconditionFailure(
        violations=[
            error_details_pb2.PreconditionFailure.Violation(
                type="T", subject="session/s", description="next_seq=7"
            )
        ]
    )
    mismatch = error_from_rpc(rpc_error(grpc.StatusCode.FAILED_PRECONDITION, "x", failure))
    assert isinstance(mismatch, FailedPreconditionError)
    assert mismatch.precondition_violations == (PreconditionViolation("T", "session/s", "next_seq=7"),)
    assert mismatch.next_seq == 7
    info = error_details_pb2.ErrorInfo(
        reason="ENOSPC", domain="rollout-ledger", metadata={"operation": "fsync"}
    )
    full = error_from_rpc(rpc_error(grpc.StatusCode.RESOURCE_EXHAUSTED, "disk full", info))
    assert full.error_info == (ErrorInfo("ENOSPC", "rollout-ledger", {"operation": "fsync"}),)


def test_a_stopped_session_is_its_own_precondition_error() -> None:
    """FAILED_PRECONDITION with 'session is open' is SessionStoppedError, with no next seq."""
    failure = error_details_pb2.PreconditionFailure(
        violations=[
            error_details_pb2.PreconditionFailure.Violation(
                subject="session/s", description="session is open"
            )
        ]
    )
    error = error_from_rpc(rpc_error(grpc.StatusCode.FAILED_PRECONDITION, "stopped", failure))
    assert isinstance(error, SessionStoppedError)
    assert error.next_seq is None


def test_undecodable_details_leave_the_status_and_message() -> None:
    """A details trailer that is not a google.rpc.Status is ignored, never a crash."""
    error = error_from_rpc(rpc_error(grpc.StatusCode.UNAVAILABLE, "down", raw=b"\xff\xff not a status"))
    assert isinstance(error, UnavailableError)
    assert (error.message, error.field_violations) == ("down", ())


def test_a_stopped_session_answers_session_stopped_from_the_live_writer(client) -> None:
    """The live writer's refusal of an append to a stopped session is SessionStoppedError."""
    session = client.create_session()
    session.append(user("x"))
    session.stop("paused")
    with pytest.raises(SessionStoppedError) as caught:
        session.append(user("y"))
    assert caught.value.precondition_violations[0].subject == f"session/{session.id}"


def test_a_request_over_the_writers_size_limit_is_not_retried(data_dir, reader_process, monkeypatch) -> None:
    """gRPC's own "larger than max" refusal is raised at once: the same request would meet it every time."""
    import rollout_client._appends as appends
    from rollout_client import ResourceExhaustedError, RolloutClient
    from tests.conftest import start_service

    waits: list[int] = []

    async def no_wait(self: appends.Attempts) -> bool:
        waits.append(self.count)
        return False  # a retry would stop here: the test sees that it was asked for

    monkeypatch.setattr(appends.Attempts, "wait", no_wait)
    writer = start_service("writer", data_dir, "--max-record-bytes", "1024")  # gRPC limit: 4 MiB + 2 KiB
    try:
        with RolloutClient(writer.address, reader_process.address) as client:
            session = client.create_session()
            with pytest.raises(ResourceExhaustedError) as caught:
                session.append(user("x" * (5 * 1024 * 1024)))
            assert "larger than max" in caught.value.message
            assert waits == []
            session.append(user("small"))  # the session is fine afterwards
    finally:
        writer.stop()


def test_a_reply_too_large_or_a_message_over_the_limit_is_never_retried() -> None:
    """RESOURCE_EXHAUSTED is retryable (backpressure) except when the same request meets it every
    time: the reader's REPLY_TOO_LARGE reason and gRPC's own "larger than max"."""
    from rollout_client import ErrorInfo, RolloutError
    from rollout_client._appends import is_retryable

    exhausted = grpc.StatusCode.RESOURCE_EXHAUSTED
    assert is_retryable(RolloutError("queue full; retry", code=exhausted))
    too_large = (ErrorInfo("REPLY_TOO_LARGE", "rollout-ledger"),)
    assert not is_retryable(RolloutError("use StreamReplay", code=exhausted, error_info=too_large))
    assert not is_retryable(RolloutError("Received message larger than max (5 vs. 4)", code=exhausted))
