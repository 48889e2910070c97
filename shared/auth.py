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
takes the caller's tenant from its certificate's subject common name (CN); such a
caller is never an importer (combine certificates with a token file for importers:
the token then decides the tenant, the certificate only admits the connection).

Rules, the same on both services (:class:`AuthInterceptor`): health checking
(``grpc.health.v1.Health``) is always open; every other RPC, server reflection
included, needs valid credentials, else UNAUTHENTICATED. The caller is set in
:data:`shared.tenancy.CALLER` for the call; isolation itself happens where sessions
are looked up (:mod:`shared.tenancy`).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import orjson
from grpc_interceptor.server import AsyncServerInterceptor

from shared.tenancy import CALLER, Caller

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
        table[_digest(token)] = _caller_of(value, position, path)
    return table


def _keyed(table: dict[bytes, Caller]) -> dict[bytes, tuple[bytes, Caller]]:
    return {digest: (digest, caller) for digest, caller in table.items()}


class TokenTable:
    """The tokens in force, read from ``path``; :meth:`reload` reads it again (SIGHUP)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._callers = _keyed(load_tokens(path))

    def __len__(self) -> int:
        return len(self._callers)

    def reload(self) -> bool:
        """Read the file again; on error keep the tokens in force, log why and return False."""
        try:
            self._callers = _keyed(load_tokens(self.path))
        except TokenFileError as exc:
            log.error("auth tokens not reloaded, the previous ones stay in force: %s", exc)
            return False
        log.info("auth tokens reloaded from %s: %d tokens", self.path, len(self._callers))
        return True

    def caller(self, token: str) -> Caller | None:
        """The caller a token stands for, or None for an unknown token.

        Found by the token's BLAKE2b digest, then confirmed with ``hmac.compare_digest``:
        no step takes a time that depends on how much of the token matches a real one.
        """
        digest = _digest(token)
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


def certificate_tenant(context: grpc.aio.ServicerContext) -> str | None:
    """The subject common name (CN) of the client certificate of a call, or None."""
    names = context.auth_context().get("x509_common_name") or []
    return names[0].decode() if names and names[0] else None


class AuthInterceptor(AsyncServerInterceptor):
    """Authenticates every call but health checks; sets the caller for the call (see the module doc).

    ``tokens``: the token table (None: no tokens); ``certificates``: take the tenant from
    the client certificate when there is no token table. A call without valid credentials
    ends with UNAUTHENTICATED before its handler runs.
    """

    def __init__(self, tokens: TokenTable | None, certificates: bool) -> None:
        self.tokens = tokens
        self.certificates = certificates

    def authenticate(self, metadata: Any, context: grpc.aio.ServicerContext) -> Caller | str:
        """The caller, or the sentence refusing it."""
        if self.tokens is not None:
            token = bearer_token(metadata)
            if token is None:
                return "this service requires a bearer token (metadata 'authorization: Bearer <token>')"
            caller = self.tokens.caller(token)
            return caller if caller is not None else "the bearer token is not one this service accepts"
        tenant = certificate_tenant(context)
        if tenant is None:
            return "the client certificate names no subject common name (CN), which is the caller's tenant"
        return Caller(tenant, importer=False)

    async def intercept(
        self,
        method: Callable[..., Any],
        request_or_iterator: Any,
        context: grpc.aio.ServicerContext,
        method_name: str,
    ) -> Any:
        if method_name.startswith(OPEN_PREFIXES):
            return await _call(method, request_or_iterator, context)
        caller = self.authenticate(context.invocation_metadata(), context)
        if isinstance(caller, str):
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, caller)
        assert isinstance(caller, Caller)
        outcome = method(request_or_iterator, context)
        if hasattr(outcome, "__aiter__"):
            return _as_caller(caller, outcome)
        reset = CALLER.set(caller)
        try:
            return await outcome
        finally:
            CALLER.reset(reset)


async def _call(
    method: Callable[..., Any], request_or_iterator: Any, context: grpc.aio.ServicerContext
) -> Any:
    outcome = method(request_or_iterator, context)
    return outcome if hasattr(outcome, "__aiter__") else await outcome


async def _as_caller(caller: Caller, responses: Any) -> Any:
    """Iterate a streaming handler's responses with ``caller`` set (the handler runs as they are pulled)."""
    reset = CALLER.set(caller)
    try:
        async for response in responses:
            yield response
    finally:
        CALLER.reset(reset)
