"""Authentication of both services: bearer tokens mapped to tenants, or client certificates.

The token file (``--auth-tokens FILE``) is one JSON object mapping each token to its
tenant, either as a plain string or as an object that may also mark the token as an
importer (trusted to set source times: AppendRecord.ts, StopRequest.ts, and to call
ImportSessions)::

    {
      "3q2+7w-agent-token-of-acme": "acme",
      "9f0c1e-importer-token-of-acme": {"tenant": "acme", "importer": true}
    }

Tokens are sent as ``authorization: Bearer <token>`` metadata. They are looked up by
their BLAKE2b digest and the digest confirmed with :func:`hmac.compare_digest`, so the
time a lookup takes never depends on how much of a guessed token matches a real one.
The file is read at start-up (a bad file stops the service with a message naming
what is wrong, never a token) and again on SIGHUP (:meth:`TokenTable.reload`: a bad
file then keeps the tokens in force and logs why).

Without a token file, a service that requires client certificates (``--tls-client-ca``)
takes the caller's tenant from its certificate's subject common name (CN): exactly one
CN, a subject with several is refused as ambiguous. Such a caller is never an importer
(combine certificates with a token file for importers: the token then decides the
tenant, the certificate only admits the connection). Wherever client certificates are
required, a call is refused once its certificate is past its notAfter (a connection
made before then stays open, and gRPC checks a certificate only when it connects).

Rules, the same on both services (:class:`AuthInterceptor`): health checking
(``grpc.health.v1.Health``) is always open; every other RPC, server reflection
included, needs valid credentials, else UNAUTHENTICATED. The caller is set in
:data:`serving.tenancy.CALLER` for the call; isolation itself happens where sessions
are looked up (:mod:`serving.tenancy`).

**Credentials that end end their streams.** A call that streams (its requests, its
responses or both: WatchSession, StreamReplay, StreamMemoryView, AppendStream,
ImportSessions, reflection) is checked once when it opens, as every call, and stays
registered while it runs. When the token file is re-read and the stream's token is
gone or stands for another caller, or when its client certificate reaches its
notAfter, the stream ends with UNAUTHENTICATED saying why, and delivers nothing more:
a stream waiting in its handler (for a record to follow, a chunk to read, a request,
a write to be made durable) is cancelled there, as a client's cancel would (what a
cancel leaves, it leaves: records already queued are written, not acknowledged); one
whose last message gRPC is still sending ends before its handler is asked for the
next. Calls that do not stream finish as they began.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import hashlib
import hmac
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import orjson
from grpc_interceptor.server import AsyncServerInterceptor

from serving.tenancy import CALLER, Caller
from shared.errors import clip

log = logging.getLogger(__name__)

#: RPCs every client may call without credentials (probes, load balancers).
OPEN_PREFIXES = ("/grpc.health.v1.Health/",)
#: The metadata key and scheme of a bearer token.
AUTHORIZATION = "authorization"
BEARER = "bearer "
#: Longest tenant name (characters), as the writer's other session_meta fields.
TENANT_MAX_CHARS = 4096


class TokenFileError(ValueError):
    """The token file cannot be used; the message names the file and what is wrong (never a token)."""


def _digest(token: str) -> bytes:
    return hashlib.blake2b(token.encode(), digest_size=32).digest()


def _caller_of(value: Any, position: int, path: Path) -> Caller:
    where = f"{path}: entry {position + 1}"
    tenant: Any
    if isinstance(value, str):
        tenant, importer = value, False
    elif isinstance(value, dict):
        unknown = sorted(set(value) - {"tenant", "importer"})
        if unknown:
            raise TokenFileError(f"{where}: unknown keys {unknown}; a token's object has tenant and importer")
        tenant, importer = value.get("tenant"), value.get("importer", False)
        if not isinstance(importer, bool):
            raise TokenFileError(f"{where}: importer must be true or false")
    else:
        raise TokenFileError(
            f'{where}: a token maps to a tenant ("acme") or to {{"tenant": ..., "importer": ...}}'
        )
    if not isinstance(tenant, str) or not tenant or len(tenant) > TENANT_MAX_CHARS:
        raise TokenFileError(
            f"{where}: the tenant must be a non-empty string of at most {TENANT_MAX_CHARS} characters"
        )
    return Caller(tenant, importer)


def load_tokens(path: Path) -> dict[bytes, Caller]:
    """Read a token file: BLAKE2b digest of each token -> its :class:`Caller`.

    Raises TokenFileError naming the file and the entry (by position, never the token)
    when it cannot be read, is not a JSON object, holds an empty token or one with
    blanks, or maps a token to anything but a tenant or a ``{"tenant", "importer"}`` object.
    """
    try:
        document = orjson.loads(path.read_bytes())
    except OSError as exc:
        raise TokenFileError(f"{path}: cannot be read ({exc.strerror or exc})") from exc
    except orjson.JSONDecodeError as exc:
        raise TokenFileError(f"{path}: is not JSON ({exc})") from exc
    if not isinstance(document, dict) or not document:
        raise TokenFileError(f"{path}: must be a JSON object mapping each token to its tenant")
    table: dict[bytes, Caller] = {}
    for position, (token, value) in enumerate(document.items()):
        if not token or token != token.strip() or any(character.isspace() for character in token):
            raise TokenFileError(f"{path}: entry {position + 1}: a token is non-empty and has no blanks")
        digest = _digest(token)
        table[digest] = dataclasses.replace(
            _caller_of(value, position, path), credential=f"token:{digest[:6].hex()}"
        )
    return table


def _keyed(table: dict[bytes, Caller]) -> dict[bytes, tuple[bytes, Caller]]:
    return {digest: (digest, caller) for digest, caller in table.items()}


class TokenTable:
    """The tokens in force, read from ``path``; :meth:`reload` reads it again (SIGHUP)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._callers = _keyed(load_tokens(path))
        self._observers: list[Callable[[], None]] = []

    def __len__(self) -> int:
        return len(self._callers)

    def observe(self, observer: Callable[[], None]) -> None:
        """Call ``observer()`` after each reload that changed the tokens in force (in the reloading thread)."""
        self._observers.append(observer)

    def reload(self) -> bool:
        """Read the file again; on error keep the tokens in force, log why and return False.

        Once the new tokens are in force, the observers are told (:class:`AuthInterceptor`
        ends the streams of tokens no longer valid).
        """
        try:
            self._callers = _keyed(load_tokens(self.path))
        except TokenFileError as exc:
            log.error("auth tokens not reloaded, the previous ones stay in force: %s", exc)
            return False
        for observer in self._observers:
            observer()
        log.info("auth tokens reloaded from %s: %d tokens", self.path, len(self._callers))
        return True

    def caller(self, token: str) -> Caller | None:
        """The caller a token stands for, or None for an unknown token.

        Found by the token's BLAKE2b digest, then confirmed with ``hmac.compare_digest``:
        no step takes a time that depends on how much of the token matches a real one.
        """
        return self.caller_of(_digest(token))

    def caller_of(self, digest: bytes) -> Caller | None:
        """The caller of the token whose BLAKE2b digest is ``digest`` (see :meth:`caller`), or None."""
        found = self._callers.get(digest)
        if found is None or not hmac.compare_digest(found[0], digest):
            return None
        return found[1]


def bearer_token(metadata: Any) -> str | None:
    """The token of an ``authorization: Bearer <token>`` entry of call metadata, or None."""
    for key, value in metadata or ():
        if key == AUTHORIZATION and isinstance(value, str) and value[:7].lower() == BEARER:
            return value[7:].strip()
    return None


@dataclass(frozen=True, slots=True)
class ClientCertificate:
    """What the ledger reads of a client certificate: its subject common names (CN) and its
    validity, notBefore and notAfter (POSIX seconds)."""

    common_names: tuple[str, ...]
    not_before: float
    not_after: float

    def tenant(self) -> str | None:
        """The one CN naming the tenant, or None when the subject has none, an empty one, or several."""
        if len(self.common_names) != 1 or not self.common_names[0]:
            return None
        return self.common_names[0]

    def refusal(self, now: float) -> str | None:
        """Why this certificate does not admit a call at ``now`` (POSIX seconds), or None."""
        if now >= self.not_after:
            return f"the client certificate expired at {_utc(self.not_after)} (its notAfter); renew it and reconnect"
        if now < self.not_before:
            return f"the client certificate is not valid before {_utc(self.not_before)} (its notBefore)"
        return None


def _utc(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _text(value: str | bytes) -> str:
    return value if isinstance(value, str) else value.decode("utf-8", "replace")


@functools.lru_cache(maxsize=256)
def read_certificate(pem: bytes) -> ClientCertificate | None:
    """The :class:`ClientCertificate` of a PEM certificate (each distinct one parsed once), or None
    when it cannot be parsed. Every CN attribute of the subject counts, multi-valued RDNs included."""
    # Imported here: a service without client certificates never loads the library (~5 MiB resident).
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    try:
        certificate = x509.load_pem_x509_certificate(pem)
    except ValueError:
        return None
    names = tuple(
        _text(name.value) for name in certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    )
    return ClientCertificate(
        names, certificate.not_valid_before_utc.timestamp(), certificate.not_valid_after_utc.timestamp()
    )


def client_certificate(context: grpc.aio.ServicerContext) -> ClientCertificate | None:
    """The client certificate of a call (from gRPC's ``x509_pem_cert`` property), or None without one."""
    pems = context.auth_context().get("x509_pem_cert") or []
    return read_certificate(pems[0]) if pems else None


def certificate_tenant(certificate: ClientCertificate) -> Caller | str:
    """The caller a client certificate stands for (its one CN is the tenant, never an importer),
    or the sentence refusing an ambiguous subject (several CNs) or one without a CN."""
    tenant = certificate.tenant()
    if tenant is not None:
        return Caller(tenant, importer=False, credential=f"certificate:{tenant}")
    names = certificate.common_names
    if len(names) > 1:
        quoted = ", ".join(repr(clip(name)) for name in names[:4])
        return (
            f"the client certificate's subject names {len(names)} common names (CN: {quoted}); the tenant"
            " is taken from exactly one, so an ambiguous subject is refused: issue the certificate with"
            " a single CN"
        )
    return "the client certificate names no subject common name (CN), which is the caller's tenant"


#: UNAUTHENTICATED message of a stream whose token was revoked.
_TOKEN_REVOKED = (
    "the bearer token that opened this stream is no longer accepted as it was when the stream opened"
    " (the service re-read its token file); call again with a token in force"
)


def _certificate_expired(not_after: float) -> str:
    """UNAUTHENTICATED message of a stream whose client certificate reached its notAfter."""
    return (
        f"the client certificate that opened this stream expired at {_utc(not_after)}; renew it and reconnect"
    )


@dataclass(frozen=True, slots=True)
class Credentials:
    """What authenticated a call: its caller, the digest of its bearer token (None: none), and the
    notAfter of its client certificate where certificates are required (None: none)."""

    caller: Caller
    token_digest: bytes | None = None
    not_after: float | None = None


@dataclass(eq=False, slots=True)
class _OpenStream:
    """A streaming call in progress: its credentials, the task serving it, whether that task is
    waiting in the call's handler (where a cancel ends it cleanly), and why it must end (None: it may go on)."""

    credentials: Credentials
    task: asyncio.Task[Any]
    in_handler: bool = False
    ended: str | None = None
    expiry: asyncio.TimerHandle | None = field(default=None)


class AuthInterceptor(AsyncServerInterceptor):
    """Authenticates every call but health checks; sets the caller for the call and ends the
    streams of credentials that end (see the module doc).

    ``tokens``: the token table (None: no tokens); ``certificates``: client certificates are
    required (mTLS): their validity is checked, and without a token table each one's CN is
    the tenant. ``clock``: the time in POSIX seconds (certificate validity). A call without
    valid credentials ends with UNAUTHENTICATED before its handler runs.
    """

    def __init__(
        self, tokens: TokenTable | None, certificates: bool, clock: Callable[[], float] = time.time
    ) -> None:
        self.tokens = tokens
        self.certificates = certificates
        self.clock = clock
        self._streams: set[_OpenStream] = set()
        if tokens is not None:
            tokens.observe(self.recheck_streams)

    @property
    def open_streams(self) -> int:
        """Streaming calls in progress."""
        return len(self._streams)

    def authenticate(self, metadata: Any, context: grpc.aio.ServicerContext) -> Credentials | str:
        """The call's credentials, or the sentence refusing them."""
        not_after = None
        certificate = None
        if self.certificates or self.tokens is None:
            certificate = client_certificate(context)
            if certificate is None:
                return "the call carries no client certificate this service can read"
            refusal = certificate.refusal(self.clock())
            if refusal is not None:
                return refusal
            not_after = certificate.not_after
        if self.tokens is not None:
            token = bearer_token(metadata)
            if token is None:
                return "this service requires a bearer token (metadata 'authorization: Bearer <token>')"
            digest = _digest(token)
            caller = self.tokens.caller_of(digest)
            if caller is None:
                return "the bearer token is not one this service accepts"
            return Credentials(replace(caller, bearer=token), digest, not_after)
        assert certificate is not None
        tenant = certificate_tenant(certificate)
        return tenant if isinstance(tenant, str) else Credentials(tenant, None, not_after)

    def _refusal_now(self, credentials: Credentials) -> str | None:
        """Why credentials accepted earlier no longer hold (None: they do)."""
        digest = credentials.token_digest
        if (
            digest is not None
            and self.tokens is not None
            and self.tokens.caller_of(digest) != credentials.caller
        ):
            return _TOKEN_REVOKED
        if credentials.not_after is not None and self.clock() >= credentials.not_after:
            return _certificate_expired(credentials.not_after)
        return None

    def recheck_streams(self) -> None:
        """End every open stream whose credentials no longer hold (after the token file is re-read)."""
        ended = 0
        for stream in list(self._streams):
            refusal = self._refusal_now(stream.credentials)
            if refusal is not None:
                self._end(stream, refusal)
                ended += 1
        if ended:
            log.info("ended %d streams whose credentials no longer hold", ended)

    def _end(self, stream: _OpenStream, refusal: str) -> None:
        """Have ``stream`` end with UNAUTHENTICATED ``refusal``: at once when it waits in its handler,
        else before its handler is asked for more (event loop)."""
        if stream.ended is not None:
            return
        stream.ended = refusal
        if stream.in_handler:
            stream.task.cancel()

    def _open(self, credentials: Credentials) -> _OpenStream:
        """Register the streaming call of the current task (ended at its certificate's notAfter)."""
        task = asyncio.current_task()
        assert task is not None, "gRPC serves each call in a task"
        stream = _OpenStream(credentials, task)
        if credentials.not_after is not None:
            delay = max(credentials.not_after - self.clock(), 0.0)
            refusal = _certificate_expired(credentials.not_after)
            stream.expiry = asyncio.get_running_loop().call_later(delay, self._end, stream, refusal)
        self._streams.add(stream)
        return stream

    def _close(self, stream: _OpenStream) -> None:
        self._streams.discard(stream)
        if stream.expiry is not None:
            stream.expiry.cancel()

    async def intercept(
        self,
        method: Callable[..., Any],
        request_or_iterator: Any,
        context: grpc.aio.ServicerContext,
        method_name: str,
    ) -> Any:
        if method_name.startswith(OPEN_PREFIXES):
            return await _call(method, request_or_iterator, context)
        credentials = self.authenticate(context.invocation_metadata(), context)
        if isinstance(credentials, str):
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, credentials)
        assert isinstance(credentials, Credentials)
        streamed_requests = hasattr(request_or_iterator, "__aiter__")
        outcome = method(request_or_iterator, context)
        if hasattr(outcome, "__aiter__"):
            return self._stream_responses(credentials, outcome, context)
        reset = CALLER.set(credentials.caller)
        try:
            if not streamed_requests:
                return await outcome
            return await self._stream_requests(credentials, outcome, context)
        finally:
            CALLER.reset(reset)

    async def _stream_requests(
        self, credentials: Credentials, outcome: Any, context: grpc.aio.ServicerContext
    ) -> Any:
        """Await a client-streaming handler, ending it when its credentials end."""
        stream = self._open(credentials)
        stream.in_handler = True
        try:
            response = await outcome
        except asyncio.CancelledError:
            if stream.ended is None:
                raise
            stream.task.uncancel()
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, stream.ended)
        finally:
            stream.in_handler = False
            self._close(stream)
        if stream.ended is not None:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, stream.ended)
        return response

    async def _stream_responses(
        self, credentials: Credentials, responses: Any, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Any]:
        """Iterate a streaming handler's responses as its caller (the handler runs as they are
        pulled), ending the stream when its credentials end."""
        reset = CALLER.set(credentials.caller)
        stream = self._open(credentials)
        iterator = responses.__aiter__()
        try:
            while stream.ended is None:
                stream.in_handler = True
                try:
                    response = await iterator.__anext__()
                except StopAsyncIteration:
                    break
                except asyncio.CancelledError:
                    if stream.ended is None:
                        raise
                    stream.task.uncancel()
                    break
                finally:
                    stream.in_handler = False
                if stream.ended is not None:  # a handler that caught the cancel: its answer is not sent
                    break
                yield response
            if stream.ended is not None:
                await iterator.aclose()
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, stream.ended)
        finally:
            self._close(stream)
            # A stream the client cancels is closed by grpc from another context, where nothing
            # of this one is set: resetting there raises (and was logged as a stray traceback).
            with contextlib.suppress(ValueError):
                CALLER.reset(reset)


async def _call(
    method: Callable[..., Any], request_or_iterator: Any, context: grpc.aio.ServicerContext
) -> Any:
    outcome = method(request_or_iterator, context)
    return outcome if hasattr(outcome, "__aiter__") else await outcome
