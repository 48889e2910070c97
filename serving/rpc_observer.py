"""Per-RPC metrics and one log line per refused or failed call, for both services.

:class:`RpcObserver` is the outermost interceptor (:mod:`serving.server`), so it also sees
the calls authentication refuses, and tracing (inside it) sees every abort. It exports, with the names and labels
of the gRPC ecosystem's Prometheus interceptors (dashboards written for those work):

* ``grpc_server_started_total{grpc_type, grpc_service, grpc_method}``;
* ``grpc_server_handled_total{grpc_type, grpc_service, grpc_method, grpc_code}``: calls
  ended, by status code;
* ``grpc_server_handling_seconds{grpc_type, grpc_service, grpc_method}``: a histogram of
  the time from the call's start to its status (a streaming call: to its last message).

``grpc_type`` is ``unary``, ``client_stream``, ``server_stream`` or ``bidi_stream``.
Each call that does not end OK is logged once on the ``rollout.rpc`` logger: a
*refused* call (the caller's doing: INVALID_ARGUMENT, NOT_FOUND, UNAUTHENTICATED,
PERMISSION_DENIED, FAILED_PRECONDITION, ...) at WARNING, a *failed* one (INTERNAL,
UNKNOWN, DATA_LOSS, UNAVAILABLE) at ERROR, a call the client cancelled at INFO. An UNAVAILABLE
that sends the caller elsewhere by design (ErrorInfo ``NOT_OWNER``: another writer owns the
shard; ``SESSION_NOT_VISIBLE``: a reader of a cluster does not see a new session yet,
docs/cluster.md §4-5) is *redirected*, at WARNING: a cluster at work, not a failure. The
record's ``extra`` fields (``rpc``, ``code``, ``detail``, ``peer``, ``duration_ms``,
``outcome``) become keys of the JSON line with ``--log-format json``
(:mod:`shared.log_format`); the message carries them for plain text.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import grpc.aio
from grpc_interceptor.server import AsyncServerInterceptor
from prometheus_client import Counter, Histogram

from shared.reasons import NOT_OWNER, SESSION_NOT_VISIBLE, error_info_metadata, status_of_trailer

log = logging.getLogger("rollout.rpc")

_LABELS = ("grpc_type", "grpc_service", "grpc_method")
STARTED = Counter("grpc_server_started", "RPCs started on the server.", _LABELS)
HANDLED = Counter(
    "grpc_server_handled", "RPCs completed on the server, by status code.", (*_LABELS, "grpc_code")
)
HANDLING_SECONDS = Histogram(
    "grpc_server_handling_seconds",
    "Seconds from an RPC's start to its status (a stream: to its last message).",
    _LABELS,
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)

#: Status codes that mean the service failed (logged at ERROR); other codes but OK and
#: CANCELLED mean the request was refused (WARNING).
SERVER_FAULTS = frozenset(
    {
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.DATA_LOSS,
        grpc.StatusCode.UNAVAILABLE,
    }
)
#: ErrorInfo reasons of an UNAVAILABLE that sends the caller elsewhere by design (logged as redirected).
REDIRECTS = (NOT_OWNER, SESSION_NOT_VISIBLE)
#: Longest status message kept in a log line (characters).
DETAIL_MAX_CHARS = 500


def _grpc_type(client_stream: bool, server_stream: bool) -> str:
    if client_stream:
        return "bidi_stream" if server_stream else "client_stream"
    return "server_stream" if server_stream else "unary"


def _status_code(context: grpc.aio.ServicerContext, error: BaseException | None) -> grpc.StatusCode:
    """The status a call ended with: the one set on its context, else what its error implies."""
    code = context.code()
    if isinstance(code, grpc.StatusCode):
        return code
    if isinstance(code, int):  # some gRPC versions keep the number
        return next(
            (member for member in grpc.StatusCode if member.value[0] == code), grpc.StatusCode.UNKNOWN
        )
    if error is None:
        return grpc.StatusCode.OK
    # GeneratorExit: gRPC closed a response stream whose client went away.
    if isinstance(error, asyncio.CancelledError | GeneratorExit):
        return grpc.StatusCode.CANCELLED
    return grpc.StatusCode.UNKNOWN


def _redirected(context: grpc.aio.ServicerContext) -> bool:
    """Whether the call's status carries an ErrorInfo of :data:`REDIRECTS`."""
    status = status_of_trailer(context.trailing_metadata())
    return any(error_info_metadata(status, reason) is not None for reason in REDIRECTS)


#: How many exceptions of a chain (``__cause__`` / ``__context__``) lose their tracebacks.
_CHAIN_LIMIT = 16


def release_frames(error: BaseException) -> None:
    """Drop the tracebacks of ``error`` and of the exceptions chained to it (``__cause__`` /
    ``__context__``), so that the frames they passed through, and those frames' locals, are freed.

    A traceback keeps every frame alive with its locals: a handler's request and what was
    built from it (a refused 100 MB record's payload and its line).
    """
    current: BaseException | None = error
    for _ in range(_CHAIN_LIMIT):
        if current is None:
            return
        current.__traceback__ = None
        current = current.__cause__ or current.__context__


async def close_requests(requests: Any) -> None:
    """Close a client-streaming call's request iterator (gRPC's async generator over the
    messages received), releasing the last request it holds; one that is running or has no
    ``aclose`` is left as it is."""
    iterator = requests.__aiter__()
    aclose = getattr(iterator, "aclose", None)
    if aclose is not None:
        with contextlib.suppress(RuntimeError):  # still running in another task
            await aclose()


class _MethodMetrics:
    """The metric children of one method and call shape, looked up once (``labels()`` costs)."""

    __slots__ = ("handled", "kind", "rpc", "seconds", "service", "started")

    def __init__(self, kind: str, method_name: str) -> None:
        self.kind = kind
        self.service, _, self.rpc = method_name.lstrip("/").rpartition("/")
        self.started = STARTED.labels(kind, self.service, self.rpc)
        self.seconds = HANDLING_SECONDS.labels(kind, self.service, self.rpc)
        self.handled: dict[grpc.StatusCode, Any] = {}

    def count(self, code: grpc.StatusCode, elapsed: float) -> None:
        handled = self.handled.get(code)
        if handled is None:
            handled = self.handled[code] = HANDLED.labels(self.kind, self.service, self.rpc, code.name)
        handled.inc()
        self.seconds.observe(elapsed)


class RpcObserver(AsyncServerInterceptor):
    """Counts, times and logs every call of a server (see the module doc); ``service`` labels
    its log lines ("writer", "reader").

    An aborted call (``context.abort``: every refusal, mapped by
    :func:`serving.status.rpc_statuses`, and authentication's) ends here: its AbortError
    loses its tracebacks and the handler returns, and gRPC sends the status the abort set.
    Raised on through gRPC, the error kept the handler's frames, with the request and what
    was built from it, alive until a full garbage collection: measured with a plain
    grpc.aio server, 8 concurrent 60 MB requests refused by ``abort`` left 1.2-4.0 GB
    resident, growing each round, against none when the error stops in the handler (docs/spec.md
    §2.10, bounded memory per request). For the same reason a client-streaming call's
    request iterator is closed when the call ends: left suspended, it holds the last
    request it received in a reference cycle.
    """

    def __init__(self, service: str) -> None:
        self.service = service
        self._methods: dict[tuple[str, bool, bool], _MethodMetrics] = {}

    async def intercept(
        self,
        method: Callable[..., Any],
        request_or_iterator: Any,
        context: grpc.aio.ServicerContext,
        method_name: str,
    ) -> Any:
        started = time.perf_counter()
        # Asked now: once a call has been cancelled (a client gone, a server stopping), gRPC may
        # have freed what peer() reads, and asking then crashes the process.
        peer = context.peer()
        outcome = method(request_or_iterator, context)  # a coroutine or an async generator: not run yet
        shape = (method_name, hasattr(request_or_iterator, "__aiter__"), hasattr(outcome, "__aiter__"))
        metrics = self._methods.get(shape)
        if metrics is None:
            metrics = self._methods[shape] = _MethodMetrics(_grpc_type(shape[1], shape[2]), method_name)
        metrics.started.inc()
        requests = request_or_iterator if shape[1] else None
        del request_or_iterator  # this frame must not keep a request alive
        if shape[2]:
            return self._observe_stream(outcome, context, metrics, peer, started, requests)
        try:
            response = await outcome
        except grpc.aio.AbortError as error:
            # The status is set; gRPC keeps this error and raises it itself once the handler
            # returns (see the class doc for why it goes no further).
            self._finish(context, metrics, peer, started, error)
            release_frames(error)
            return None
        except BaseException as error:
            self._finish(context, metrics, peer, started, error)
            raise
        finally:
            if requests is not None:
                await close_requests(requests)
        self._finish(context, metrics, peer, started, None)
        return response

    async def _observe_stream(
        self,
        responses: AsyncIterator[Any],
        context: grpc.aio.ServicerContext,
        metrics: _MethodMetrics,
        peer: str,
        started: float,
        requests: Any,
    ) -> AsyncIterator[Any]:
        try:
            async for response in responses:
                yield response
        except grpc.aio.AbortError as error:
            self._finish(context, metrics, peer, started, error)
            release_frames(error)
            return
        except BaseException as error:
            self._finish(context, metrics, peer, started, error)
            raise
        finally:
            if requests is not None:
                await close_requests(requests)
        self._finish(context, metrics, peer, started, None)

    def _finish(
        self,
        context: grpc.aio.ServicerContext,
        metrics: _MethodMetrics,
        peer: str,
        started: float,
        error: BaseException | None,
    ) -> None:
        """Count and time a call that ended; log it unless OK (``peer`` as asked when it started)."""
        elapsed = time.perf_counter() - started
        code = _status_code(context, error)
        metrics.count(code, elapsed)
        if code is grpc.StatusCode.OK:
            return
        if code is grpc.StatusCode.UNAVAILABLE and _redirected(context):
            level, outcome = logging.WARNING, "redirected"
        elif code in SERVER_FAULTS:
            level, outcome = logging.ERROR, "failed"
        elif code is grpc.StatusCode.CANCELLED:
            level, outcome = logging.INFO, "cancelled"
        else:
            level, outcome = logging.WARNING, "refused"
        detail = (context.details() or "")[:DETAIL_MAX_CHARS]
        if isinstance(detail, bytes):
            detail = detail.decode(errors="replace")
        log.log(
            level,
            "%s %s %s: %s: %s",
            self.service,
            outcome,
            metrics.rpc,
            code.name,
            detail,
            extra={
                "service": self.service,
                "rpc": f"/{metrics.service}/{metrics.rpc}",
                "outcome": outcome,
                "code": code.name,
                "detail": detail,
                "peer": peer,
                "duration_ms": round(elapsed * 1000, 3),
            },
        )
