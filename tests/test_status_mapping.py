"""Every ledger error reaches a client over gRPC with the status shared/errors.py documents, and
the client reads it back as rollout_client/_errors.py documents (serving.status.rpc_statuses)."""

from __future__ import annotations

import asyncio
import importlib
import inspect
import pkgutil
import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest
from google.protobuf.message_factory import GetMessageClass

import shared.errors
from reader_service.server import RolloutReaderServicer
from rollout.v1 import reader_pb2, reader_pb2_grpc, writer_pb2, writer_pb2_grpc
from rollout_client import _errors as client_errors
from rollout_client._appends import REFUSED_UNWRITTEN, is_reply_too_large, is_retryable
from rollout_client._errors import error_from_rpc
from serving.server import PLAINTEXT, ServiceServer
from serving.status import StreamRequestError, rpc_statuses
from shared.errors import (
    LEDGER_ERROR_CLASSES,
    ArtifactNotFoundError,
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
)
from shared.reasons import SESSION_FILE_REPLACED, SESSION_IS_OPEN, next_seq_precondition, session_subject
from writer_service.server import RolloutWriterServicer

WRITER = writer_pb2.DESCRIPTOR.services_by_name["RolloutWriter"]
READER = reader_pb2.DESCRIPTOR.services_by_name["RolloutReader"]
SESSION = "01a22c15-89a6-7d3d-b5b7-165622bd350c"

#: How the client reads a status: not retried; retried as a refusal that wrote nothing; retried
#: as an outcome that may have landed (rollout_client._appends: RETRYABLE, REFUSED_UNWRITTEN).
REFUSED, RETRY_UNWRITTEN, RETRY = "refused", "retry, nothing written", "retry, may have landed"

#: One instance of every error class (two where the status depends on the instance), with how a
#: client must read it. A stopped session is SESSION_IS_OPEN's refusal; a seq mismatch names
#: the next seq.
SAMPLES: list[tuple[LedgerError, str]] = [
    (RecordValidationError(2, "message.role", "is not a role"), REFUSED),
    (InvalidArgumentError("page_size", "is over 1000"), REFUSED),
    (FileNameError("session_id", "is not a UUID"), REFUSED),
    (PermissionDeniedError("records[0].ts", "only importers set record times"), REFUSED),
    (SessionNotFoundError(SESSION), REFUSED),
    (RoundNotFoundError(SESSION, "r"), REFUSED),
    (ArtifactNotFoundError("mem_0123"), REFUSED),
    (SessionExistsError(SESSION), REFUSED),
    (
        SessionStateError(
            "session is stopped", subject=session_subject(SESSION), precondition=SESSION_IS_OPEN
        ),
        REFUSED,
    ),
    (
        SessionStateError(
            "seq mismatch", subject=session_subject(SESSION), precondition=next_seq_precondition(7)
        ),
        REFUSED,
    ),
    (SessionBusyError("a Stop of the session is in progress"), RETRY_UNWRITTEN),
    (CorruptSessionError("line 3 at byte 120 is damaged"), REFUSED),
    (SessionUnavailableError("awaiting a repair", errno_name="ENOSPC"), RETRY),
    (NotOwnerError("this writer's ownership of shard 3 (epoch 7) ended", shard=3, epoch=7), RETRY),
    (
        SessionNotVisibleError("not visible on this reader's host yet", shard=3, owner="w:1", confirmed=True),
        RETRY,
    ),
    (ResourceLimitError("a configured limit was reached"), RETRY_UNWRITTEN),
    (QueueFullError("the session's queue is full"), RETRY_UNWRITTEN),
    (ReplyTooLargeError("use StreamReplay"), REFUSED),
    (StorageWriteError("fsync failed", errno_name="EIO", operation="fsync"), RETRY),
    (StorageWriteError("write failed", errno_name="ENOSPC", operation="write"), RETRY_UNWRITTEN),
    (SessionFileChangedError(SESSION_FILE_REPLACED, "the file was replaced"), RETRY_UNWRITTEN),
    (WatchClosedError("the reader is shutting down"), RETRY),
    (SearchUnavailableError("this reader runs without a content index"), RETRY),
]

_TREE_LINE = re.compile(r"[├└]── (\w+)\s+(.*)")
_CODE = re.compile(r"\b([A-Z][A-Z_]{3,})\b")


def documented_tree(module: Any) -> dict[str, list[grpc.StatusCode]]:
    """Class name -> the status codes its line of the module docstring's hierarchy names, in order."""
    tree: dict[str, list[grpc.StatusCode]] = {}
    for line in module.__doc__.splitlines():
        found = _TREE_LINE.search(line)
        if found is not None:
            names = _CODE.findall(found.group(2))
            tree[found.group(1)] = [
                grpc.StatusCode[name] for name in names if name in grpc.StatusCode.__members__
            ]
    return tree


LEDGER_TREE = documented_tree(shared.errors)
CLIENT_TREE = documented_tree(client_errors)


def documented_code(error: LedgerError) -> grpc.StatusCode:
    """The code shared/errors.py documents for ``error`` (a full disk: the second one named)."""
    codes = LEDGER_TREE[type(error).__name__]
    if isinstance(error, StorageWriteError) and error.disk_full:
        return codes[1]
    return codes[0]


def client_class_for(code: grpc.StatusCode) -> type[client_errors.RolloutError]:
    """The client class rollout_client/_errors.py documents for ``code`` (INTERNAL's for the rest)."""
    for name, codes in CLIENT_TREE.items():
        if codes and codes[0] == code:
            return getattr(client_errors, name)
    return client_errors.InternalError


#: The packages whose modules may define ledger errors.
PRODUCT_PACKAGES = ("shared", "serving", "writer_service", "reader_service", "rollout_client", "rollout_cli")


def import_every_product_module() -> None:
    """Import every module of :data:`PRODUCT_PACKAGES`: a class is among ``__subclasses__()`` only
    once its module is imported, which would otherwise depend on the tests run before in the same
    process (an error class in a module imported lazily went unseen in one order, failed in another)."""
    for name in PRODUCT_PACKAGES:
        package = importlib.import_module(name)
        for module in pkgutil.walk_packages(package.__path__, f"{name}."):
            importlib.import_module(module.name)


def all_subclasses(cls: type) -> set[type]:
    found = set()
    for subclass in cls.__subclasses__():
        found |= {subclass, *all_subclasses(subclass)}
    return found


class RaisingServicer:
    """Every RPC of a service, decorated as the services' handlers are, raising ``error``: unary
    ones at once, streaming ones after a reply (client streams read first; a bidi stream names
    its request 1, as AppendStream does)."""

    def __init__(self) -> None:
        self.error: Exception = RuntimeError("no error chosen")


def _raising_handler(
    name: str, client_streaming: bool, server_streaming: bool, reply: Any
) -> Callable[..., Any]:
    if server_streaming:

        @rpc_statuses(name)
        async def streaming(
            self: RaisingServicer, request: Any, context: grpc.aio.ServicerContext
        ) -> AsyncIterator[Any]:
            if client_streaming:
                async for _ in request:
                    pass
            yield reply
            if client_streaming:
                raise StreamRequestError(1, self.error)
            raise self.error

        return streaming

    @rpc_statuses(name)
    async def unary(self: RaisingServicer, request: Any, context: grpc.aio.ServicerContext) -> Any:
        if client_streaming:
            async for _ in request:
                pass
        raise self.error

    return unary


for _service in (WRITER, READER):
    for _method in _service.methods:
        setattr(
            RaisingServicer,
            f"{_service.name}_{_method.name}",
            _raising_handler(
                _method.name,
                _method.client_streaming,
                _method.server_streaming,
                GetMessageClass(_method.output_type)(),
            ),
        )


class _Bound:
    """A servicer object's methods of one service under their RPC names (for add_servicer)."""

    def __init__(self, servicer: RaisingServicer, service: Any) -> None:
        for method in service.methods:
            setattr(self, method.name, getattr(servicer, f"{service.name}_{method.name}"))


async def raised_over_grpc(errors: list[Exception]) -> list[tuple[str, grpc.aio.AioRpcError]]:
    """(kind of call, the client's AioRpcError) of each error raised by a unary, a client-streaming,
    a server-streaming and a bidi handler served by a real grpc.aio server on a free port."""
    servicer = RaisingServicer()
    service = ServiceServer("statuses", PLAINTEXT, options=[])
    service.add(WRITER, _Bound(servicer, WRITER))
    service.add(READER, _Bound(servicer, READER))
    address = service.bind("127.0.0.1:0")
    await service.start()
    found: list[tuple[str, grpc.aio.AioRpcError]] = []
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            writer = writer_pb2_grpc.RolloutWriterStub(channel)
            reader = reader_pb2_grpc.RolloutReaderStub(channel)
            append = writer_pb2.AppendRequest(session_id=SESSION)
            for error in errors:
                servicer.error = error
                calls: dict[str, Callable[[], Any]] = {
                    "unary": lambda: writer.Append(append),
                    "client stream": lambda: writer.ImportSessions(
                        iter([writer_pb2.ImportSessionsRequest()])
                    ),
                    "server stream": lambda: _drain(
                        reader.StreamReplay(reader_pb2.ReplayRequest(session_id=SESSION))
                    ),
                    "bidi stream": lambda: _drain(writer.AppendStream(iter([append, append]))),
                }
                for kind, call in calls.items():
                    with pytest.raises(grpc.aio.AioRpcError) as caught:
                        await call()
                    found.append((kind, caught.value))
    finally:
        await service.stop(0)
    return found


async def _drain(call: Any) -> None:
    async for _ in call:
        pass


def test_every_error_class_has_a_sample_a_documented_status_and_a_case() -> None:
    """The classes raised as ledger errors, those with a line in shared/errors.py's hierarchy, those
    the status mapping decides for and those sampled here are the same set."""
    import_every_product_module()
    raised = all_subclasses(LedgerError)
    assert raised == set(LEDGER_ERROR_CLASSES)
    assert {cls.__name__ for cls in raised} == set(LEDGER_TREE) - {"LedgerError"}
    assert {type(error) for error, _ in SAMPLES} == raised
    assert all(LEDGER_TREE[cls.__name__] for cls in raised), "every class names its status"


def test_every_error_class_ends_a_call_of_every_kind_with_its_documented_status() -> None:
    """Each error, raised by a unary, client-streaming, server-streaming (after a reply) and bidi
    handler over real gRPC, ends the call with the code shared/errors.py documents for it, its
    message, and the client's typed error of that code with the reading the SDK relies on."""
    errors = [error for error, _ in SAMPLES]
    answers = asyncio.run(raised_over_grpc(errors))
    assert len(answers) == 4 * len(SAMPLES)
    for index, (kind, answer) in enumerate(answers):
        error, reading = SAMPLES[index // 4]
        expected = documented_code(error)
        assert answer.code() == expected, (type(error).__name__, kind, answer.code(), answer.details())
        prefix = "request 1 of the stream: " if kind == "bidi stream" else ""
        assert answer.details() == prefix + str(error), (type(error).__name__, kind)
        typed = error_from_rpc(answer)
        assert isinstance(typed, client_class_for(expected)), (type(error).__name__, type(typed).__name__)
        assert typed.code == expected
        if not is_retryable(typed):
            assert reading == REFUSED, (type(error).__name__, "the client does not retry it")
        elif typed.code in REFUSED_UNWRITTEN:
            assert reading == RETRY_UNWRITTEN, (type(error).__name__, "the client reads: nothing written")
        else:
            assert reading == RETRY, (type(error).__name__, "the client reads: it may have landed")


def test_the_client_reads_the_details_each_error_carries() -> None:
    """A stopped session is SessionStoppedError, a seq mismatch gives next_seq, an existing session
    names its id, a reply too large is never retried, field violations name the field."""
    errors: list[Exception] = [
        SessionStateError("stopped", subject=session_subject(SESSION), precondition=SESSION_IS_OPEN),
        SessionStateError(
            "mismatch", subject=session_subject(SESSION), precondition=next_seq_precondition(7)
        ),
        SessionExistsError(SESSION),
        ReplyTooLargeError("use StreamReplay"),
        RecordValidationError(2, "message.role", "is not a role"),
        StorageWriteError("fsync failed", errno_name="EIO", operation="fsync"),
    ]
    answers = [answer for kind, answer in asyncio.run(raised_over_grpc(errors)) if kind == "unary"]
    stopped, mismatch, exists, too_large, invalid, failed_write = map(error_from_rpc, answers)
    assert isinstance(stopped, client_errors.SessionStoppedError)
    assert stopped.next_seq is None
    assert type(mismatch) is client_errors.FailedPreconditionError
    assert mismatch.next_seq == 7
    assert isinstance(exists, client_errors.AlreadyExistsError)
    assert exists.session_id == SESSION
    assert is_reply_too_large(too_large)
    assert not is_retryable(too_large)
    assert [(v.field, v.description) for v in invalid.field_violations] == [
        ("records[2].message.role", "is not a role")
    ]
    assert [(i.reason, i.metadata) for i in failed_write.error_info] == [("EIO", {"operation": "fsync"})]


def test_what_is_not_a_ledger_error_is_not_found_unavailable_or_internal() -> None:
    """A session file gone is NOT_FOUND, another read failure UNAVAILABLE naming its errno, and
    anything else (a bug) INTERNAL with no traceback in the message."""
    errors: list[Exception] = [
        FileNotFoundError(2, "No such file or directory", f"/data/sessions/{SESSION}.jsonl"),
        PermissionError(13, "Permission denied", f"/data/sessions/{SESSION}.jsonl"),
        KeyError("payload"),
    ]
    answers = [answer for kind, answer in asyncio.run(raised_over_grpc(errors)) if kind == "unary"]
    assert [answer.code() for answer in answers] == [
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.INTERNAL,
    ]
    assert "is gone" in answers[0].details()
    assert [i.reason for i in error_from_rpc(answers[1]).error_info] == ["EACCES"]
    assert answers[2].details() == "Append failed unexpectedly; see the server log"


@pytest.mark.parametrize(
    ("service", "servicer"),
    [(WRITER, RolloutWriterServicer), (READER, RolloutReaderServicer)],
    ids=["writer", "reader"],
)
def test_every_rpc_of_both_services_is_decorated_with_its_own_name(service: Any, servicer: Any) -> None:
    """Each RPC of both servicers is rpc_statuses' wrapper, for that RPC (GetRecentMessages and
    ResolveSession included): none maps its errors by hand, none is left undecided."""
    for method in service.methods:
        handler = getattr(servicer, method.name)
        assert handler.__code__.co_qualname.startswith("rpc_statuses.<locals>."), method.name
        assert inspect.getclosurevars(handler).nonlocals["rpc"] == method.name
