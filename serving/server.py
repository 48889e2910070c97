"""How both services are served: one construction of a grpc.aio server (credentials,
interceptors, options, health checking and reflection), apart from what a status means
(:mod:`serving.status`).

:class:`ServiceServer` is used by the writer and the reader alike:

* **credentials**: plaintext, the embedded default on loopback (binding any other
  address without TLS logs a warning), or TLS from ``--tls-cert`` / ``--tls-key``;
  ``--tls-client-ca`` also requires each client to present a certificate signed by
  that CA (mTLS);
* **interceptors**, outermost first: the RPC observer (metrics, one log line per refused
  or failed call, and where an aborted call ends, :mod:`serving.rpc_observer`),
  OpenTelemetry tracing when turned on (:mod:`serving.tracing`: inside the observer, so
  its spans record every abort), then authentication (:mod:`serving.auth`) when tokens or
  client certificates are configured;
* **standard services**: gRPC health checking (always open, also on an optional
  plaintext health-only address for probes that cannot speak TLS, such as Kubernetes'
  ``grpc`` probes) and server reflection, both ``grpc.reflection.v1`` and
  ``v1alpha`` (reflection needs the same credentials as the RPCs);
* **the bound address**: what :meth:`ServiceServer.bind` returns is the host asked for
  with the port actually bound (``0.0.0.0:0`` is announced as ``0.0.0.0:<port>``).
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.descriptor import ServiceDescriptor
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from grpc_reflection.v1alpha import reflection, reflection_pb2, reflection_pb2_grpc

from serving.auth import AuthInterceptor, TokenTable
from serving.rpc_observer import RpcObserver
from serving.status import RequestScreen, add_servicer

log = logging.getLogger(__name__)

HEALTH_SERVICE = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
#: Server reflection as gRPC names it today; its messages are those of v1alpha, field for field.
REFLECTION_V1 = "grpc.reflection.v1.ServerReflection"
_LOOPBACK_NAMES = ("localhost",)


class BindError(RuntimeError):
    """A service could not bind its address (in use, or not an address of this host)."""


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """PEM files of the server's TLS: its certificate chain and key, and the CA its clients'
    certificates must be signed by (None: no client certificate asked for)."""

    cert: Path
    key: Path
    client_ca: Path | None = None

    def credentials(self) -> grpc.ServerCredentials:
        """The server credentials; OSError when a file cannot be read."""
        chain = [(self.key.read_bytes(), self.cert.read_bytes())]
        if self.client_ca is None:
            return grpc.ssl_server_credentials(chain)
        return grpc.ssl_server_credentials(
            chain, root_certificates=self.client_ca.read_bytes(), require_client_auth=True
        )


@dataclass(frozen=True)
class ServerSettings:
    """What a service is served with, beyond its own options (see the module doc).

    ``tls``: None for plaintext; ``tokens``: the bearer tokens (None: none);
    ``health_address``: host:port of a plaintext listener serving health checking
    only (None: none); ``tracing``: an OpenTelemetry server interceptor (None: off).
    """

    tls: TlsFiles | None = None
    tokens: TokenTable | None = None
    health_address: str | None = None
    tracing: grpc.aio.ServerInterceptor | None = None
    extra_interceptors: Sequence[grpc.aio.ServerInterceptor] = field(default_factory=tuple)

    def describe(self) -> str:
        """How callers reach the service, for its start-up log line: transport, authentication,
        health-only address and tracing (e.g. "TLS with client certificates, bearer tokens")."""
        if self.tls is None:
            parts = ["plaintext"]
        else:
            parts = ["TLS with client certificates" if self.tls.client_ca is not None else "TLS"]
        parts.append("bearer tokens required" if self.tokens is not None else "no tokens")
        if self.health_address is not None:
            parts.append(f"health checks also on {self.health_address} (plaintext)")
        if self.tracing is not None:
            parts.append("OTLP tracing")
        return ", ".join(parts)

    @property
    def authenticated(self) -> bool:
        """True when callers must present credentials (tokens, or client certificates)."""
        return self.tokens is not None or (self.tls is not None and self.tls.client_ca is not None)

    def interceptors(self, service: str) -> list[grpc.aio.ServerInterceptor]:
        """The interceptors of a server of ``service`` (its label in metrics), outermost first."""
        chosen: list[grpc.aio.ServerInterceptor] = [RpcObserver(service)]
        if self.tracing is not None:
            chosen.append(self.tracing)
        if self.authenticated:
            certificates = self.tls is not None and self.tls.client_ca is not None
            chosen.append(AuthInterceptor(self.tokens, certificates=certificates))
        chosen.extend(self.extra_interceptors)
        return chosen


#: The embedded default: plaintext, no authentication.
PLAINTEXT = ServerSettings()


def is_loopback(host: str) -> bool:
    """True for a host that only this machine can reach (127.0.0.0/8, ::1, localhost)."""
    bare = host.strip("[]")
    if bare in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(bare).is_loopback
    except ValueError:
        return False


def split_address(address: str) -> tuple[str, str]:
    """(host, port) of ``host:port`` (``[v6]:port`` keeps its brackets); BindError when malformed."""
    host, colon, port = address.rpartition(":")
    if not colon or not host or not port.isdigit():
        raise BindError(f"{address!r} is not host:port")
    return host, port


def _register_v1_reflection() -> None:
    """Put ``grpc.reflection.v1`` in the default descriptor pool: v1alpha's file under the v1
    package (the messages are the same, field for field), so reflection can describe itself."""
    pool = descriptor_pool.Default()
    try:
        pool.FindFileByName("grpc/reflection/v1/reflection.proto")
        return
    except KeyError:
        pass
    source = descriptor_pb2.FileDescriptorProto()
    reflection_pb2.DESCRIPTOR.CopyToProto(source)
    source.name = "grpc/reflection/v1/reflection.proto"
    source.package = "grpc.reflection.v1"
    pool.AddSerializedFile(source.SerializeToString())


_register_v1_reflection()


class RunningService:
    """What a started service shows the code that runs it: its bound ``address`` and ``port``
    (RunningWriter and RunningReader hold their ServiceServer as ``service``)."""

    service: ServiceServer

    @property
    def address(self) -> str:
        return self.service.address

    @property
    def port(self) -> int:
        return self.service.port


#: What to do when an address cannot be bound.
_PORT_ADVICE = (
    "is the port in use? Choose another address (--address; under rollout serve,"
    " --writer-address / --reader-address)"
)


class ServiceServer:
    """A grpc.aio server of one service with the house's credentials, interceptors and
    standard services (see the module doc).

    ``label`` names the service in logs and errors ("writer", "reader"); ``options`` are
    gRPC channel arguments (message limits); port reuse is always off, so a port another
    server holds fails to bind instead of being shared.
    """

    def __init__(self, label: str, settings: ServerSettings, options: Iterable[tuple[str, Any]]) -> None:
        self.label = label
        self.settings = settings
        self.server = grpc.aio.server(
            interceptors=settings.interceptors(label),
            options=[*options, ("grpc.so_reuseport", 0)],
        )
        self.health = HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        self._health_server: grpc.aio.Server | None = None
        self._names: list[str] = []
        self.address = ""

    def add(
        self, service: ServiceDescriptor, servicer: object, screens: Mapping[str, RequestScreen] | None = None
    ) -> None:
        """Serve ``servicer`` for ``service`` (see :func:`serving.status.add_servicer`)."""
        add_servicer(self.server, service, servicer, screens)
        self._names.append(service.full_name)

    def _add_reflection(self) -> None:
        names = (*self._names, HEALTH_SERVICE, REFLECTION_V1, reflection.SERVICE_NAME)
        servicer = reflection.aio.ReflectionServicer(names)
        reflection_pb2_grpc.add_ServerReflectionServicer_to_server(servicer, self.server)
        # v1: the same handler under the v1 name (its messages are v1alpha's, byte for byte).
        self.server.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(
                    REFLECTION_V1,
                    {
                        "ServerReflectionInfo": grpc.stream_stream_rpc_method_handler(
                            servicer.ServerReflectionInfo,
                            request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
                            response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
                        )
                    },
                ),
            )
        )

    def bind(self, address: str) -> str:
        """Bind ``address`` (host:port; port 0 picks a free one) with the settings' credentials.

        Returns the bound address (the host asked for, the port bound). Raises BindError
        with a sentence a person can act on, OSError when a TLS file cannot be read.
        A plaintext bind of a non-loopback host logs a warning.
        """
        host, _ = split_address(address)
        tls = self.settings.tls
        try:
            if tls is None:
                port: int = self.server.add_insecure_port(address)
            else:
                port = self.server.add_secure_port(address, tls.credentials())
        except RuntimeError as exc:
            reason = str(exc).split("; set GRPC_VERBOSITY")[0]  # gRPC's advice is not the operator's
            raise BindError(f"cannot bind the {self.label} to {address} ({reason}); {_PORT_ADVICE}") from exc
        if port == 0:
            raise BindError(f"cannot bind the {self.label} to {address}; {_PORT_ADVICE}")
        self.address = f"{host}:{port}"
        if tls is None and not is_loopback(host):
            log.warning(
                "the %s serves %s in plaintext: anyone who can reach it can read what is sent,"
                " tokens included; give --tls-cert and --tls-key",
                self.label,
                self.address,
            )
        return self.address

    async def start(self) -> None:
        """Start serving (after :meth:`add` and :meth:`bind`): health says SERVING for every service.

        Raises BindError when the health-only address cannot be bound.
        """
        self._add_reflection()
        if self.settings.health_address is not None:
            self._health_server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
            health_pb2_grpc.add_HealthServicer_to_server(self.health, self._health_server)
            try:
                bound = self._health_server.add_insecure_port(self.settings.health_address)
            except RuntimeError as exc:
                bound = 0
                reason = f" ({exc})"
            else:
                reason = ""
            if bound == 0:
                raise BindError(
                    f"cannot bind the {self.label}'s health checks to {self.settings.health_address}{reason};"
                    " is the port in use?"
                )
            await self._health_server.start()
        await self.server.start()
        for name in (*self._names, ""):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)

    @property
    def port(self) -> int:
        """The bound port (after :meth:`bind`)."""
        return int(self.address.rpartition(":")[2])

    async def stop(self, grace: float) -> None:
        """Say NOT_SERVING, stop accepting calls and let those in flight finish within ``grace`` seconds."""
        await self.health.enter_graceful_shutdown()
        await self.server.stop(grace)
        if self._health_server is not None:
            await self._health_server.stop(None)
