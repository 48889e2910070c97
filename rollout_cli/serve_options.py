"""The options ``serve-writer``, ``serve-reader`` and ``serve`` share: TLS, tokens, logs,
metrics, health checks and tracing (what serving.server serves them with).

Each option also reads an environment variable (named in its help), so that a container
can be configured either way. ``serve`` passes the TLS, token, log and tracing options
to both of its services.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import signal
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click
from prometheus_client import start_http_server

from rollout_cli.log_format import LOG_FORMATS, configure_logging
from serving.auth import TokenFileError, TokenTable
from serving.server import BindError, ServerSettings, TlsFiles, split_address
from serving.tracing import TracingUnavailableError, tracing_interceptor

T = TypeVar("T")
_file = click.Path(dir_okay=False, path_type=Path)


def _address_option(name: str, help_text: str, envvar: str) -> Callable[[Any], Any]:
    return click.option(
        name, default=None, envvar=envvar, metavar="HOST:PORT", help=f"{help_text} (env {envvar})."
    )


_COMMON = (
    click.option(
        "--tls-cert",
        type=_file,
        envvar="ROLLOUT_TLS_CERT",
        help="PEM certificate chain: serve TLS (with --tls-key) (env ROLLOUT_TLS_CERT).",
    ),
    click.option(
        "--tls-key",
        type=_file,
        envvar="ROLLOUT_TLS_KEY",
        help="PEM private key of --tls-cert (env ROLLOUT_TLS_KEY).",
    ),
    click.option(
        "--tls-client-ca",
        type=_file,
        envvar="ROLLOUT_TLS_CLIENT_CA",
        help="PEM CA: require client certificates signed by it (mTLS); without --auth-tokens the"
        " certificate's subject CN is the caller's tenant (env ROLLOUT_TLS_CLIENT_CA).",
    ),
    click.option(
        "--auth-tokens",
        type=_file,
        envvar="ROLLOUT_AUTH_TOKENS",
        help='JSON file mapping each bearer token to its tenant ({"token": "acme"} or {"token": {"tenant":'
        ' "acme", "importer": true}}); re-read on SIGHUP (env ROLLOUT_AUTH_TOKENS).',
    ),
    click.option(
        "--log-format",
        type=click.Choice(LOG_FORMATS),
        default="text",
        show_default=True,
        envvar="ROLLOUT_LOG_FORMAT",
        help="Log lines as plain text or one JSON object per line (env ROLLOUT_LOG_FORMAT).",
    ),
    click.option(
        "--otlp-tracing",
        is_flag=True,
        envvar="ROLLOUT_OTLP_TRACING",
        help="Trace every RPC to OpenTelemetry (OTLP, configured by the OTEL_EXPORTER_OTLP_* variables;"
        " needs the tracing extra) (env ROLLOUT_OTLP_TRACING).",
    ),
)
_SERVICE = (
    _address_option(
        "--metrics-address",
        "Serve Prometheus metrics at http://HOST:PORT/metrics (PORT alone: 127.0.0.1:PORT)",
        "ROLLOUT_METRICS_ADDRESS",
    ),
    _address_option(
        "--health-address",
        "Also answer gRPC health checks, and nothing else, in plaintext on HOST:PORT (for probes that"
        " cannot speak TLS, such as Kubernetes' grpc probes)",
        "ROLLOUT_HEALTH_ADDRESS",
    ),
)
_PAIR = (
    _address_option(
        "--reader-metrics-address",
        "The reader's Prometheus metrics at http://HOST:PORT/metrics (the writer's: --metrics-port)",
        "ROLLOUT_READER_METRICS_ADDRESS",
    ),
)
_FIELDS = (
    "tls_cert",
    "tls_key",
    "tls_client_ca",
    "auth_tokens",
    "log_format",
    "otlp_tracing",
    "metrics_address",
    "health_address",
    "reader_metrics_address",
)


@dataclass(frozen=True, slots=True)
class ServeOptions:
    """The serving options as given (None: not given)."""

    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_client_ca: Path | None = None
    auth_tokens: Path | None = None
    log_format: str = "text"
    otlp_tracing: bool = False
    metrics_address: str | None = None
    health_address: str | None = None
    reader_metrics_address: str | None = None

    def begin(self, service: str, metrics_port: int | None = None) -> ServerSettings:
        """Set up logging and metrics for ``service`` and return the settings to serve it with.

        ``metrics_port``: the older ``--metrics-port`` (127.0.0.1 only). Raises
        click.UsageError for options that do not go together, click.ClickException (a
        sentence, no traceback) for a file that cannot be used or a port in use.
        """
        configure_logging(self.log_format, logging.getLogger().level)
        if self.metrics_address is not None and metrics_port is not None:
            raise click.UsageError("give --metrics-address or --metrics-port, not both")
        settings = self.settings(service)
        if metrics_port is not None:
            serve_metrics(f"127.0.0.1:{metrics_port}")
        elif self.metrics_address is not None:
            serve_metrics(self.metrics_address)
        return settings

    def settings(self, service: str) -> ServerSettings:
        """The ServerSettings these options ask for (see :meth:`begin` for the errors)."""
        tls, tokens = self.checked_files()
        tracing = None
        if self.otlp_tracing:
            try:
                tracing = tracing_interceptor(service)
            except TracingUnavailableError as exc:
                raise click.ClickException(str(exc)) from exc
        return ServerSettings(tls=tls, tokens=tokens, health_address=self.health_address, tracing=tracing)

    def checked_files(self) -> tuple[TlsFiles | None, TokenTable | None]:
        """The TLS files and the token table, each read once (see :meth:`begin` for the errors)."""
        if (self.tls_cert is None) != (self.tls_key is None):
            raise click.UsageError("--tls-cert and --tls-key go together")
        if self.tls_client_ca is not None and self.tls_cert is None:
            raise click.UsageError(
                "--tls-client-ca needs --tls-cert and --tls-key (client certificates need TLS)"
            )
        tls = None
        if self.tls_cert is not None and self.tls_key is not None:
            tls = TlsFiles(self.tls_cert, self.tls_key, self.tls_client_ca)
            try:
                tls.credentials()
            except OSError as exc:
                raise click.ClickException(f"cannot read {exc.filename}: {exc.strerror}") from exc
        tokens = None
        if self.auth_tokens is not None:
            try:
                tokens = TokenTable(self.auth_tokens)
            except TokenFileError as exc:
                raise click.ClickException(str(exc)) from exc
        return tls, tokens

    def pair_arguments(self) -> tuple[list[str], list[str]]:
        """The options ``serve`` gives its writer and its reader (absolute paths)."""
        shared: list[str] = ["--log-format", self.log_format]
        for option, path in (
            ("--tls-cert", self.tls_cert),
            ("--tls-key", self.tls_key),
            ("--tls-client-ca", self.tls_client_ca),
            ("--auth-tokens", self.auth_tokens),
        ):
            if path is not None:
                shared += [option, str(path.resolve())]
        if self.otlp_tracing:
            shared.append("--otlp-tracing")
        reader = list(shared)
        if self.reader_metrics_address is not None:
            reader += ["--metrics-address", self.reader_metrics_address]
        return shared, reader


def serve_metrics(address: str) -> None:
    """Serve Prometheus metrics at http://ADDRESS/metrics (``PORT`` alone: 127.0.0.1:PORT).

    Raises click.ClickException naming the address when it cannot be bound.
    """
    if address.isdigit():
        address = f"127.0.0.1:{address}"
    try:
        host, port = split_address(address)
    except BindError as exc:
        raise click.ClickException(f"--metrics-address: {exc}") from exc
    try:
        start_http_server(int(port), addr=host.strip("[]"))
    except OSError as exc:
        raise click.ClickException(
            f"cannot serve metrics on {address} ({exc.strerror or exc}); is the port in use?"
        ) from exc


async def reloading_tokens(start: Coroutine[Any, Any, T], settings: ServerSettings) -> T:
    """Await ``start`` (a service starting with ``settings``); from then on SIGHUP re-reads the token file."""
    running = await start
    if settings.tokens is not None:
        asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, settings.tokens.reload)
    return running


def _packing(options: tuple[Callable[[Any], Any], ...]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(command)
        def run(**kwargs: Any) -> Any:
            given = {name: kwargs.pop(name) for name in _FIELDS if name in kwargs}
            return command(serving=ServeOptions(**given), **kwargs)

        for option in reversed(options):
            run = option(run)
        return run

    return decorate


#: The options of serve-writer and serve-reader; the command receives ``serving: ServeOptions``.
service_options = _packing((*_COMMON, *_SERVICE))
#: The options of serve (passed to both services); the command receives ``serving: ServeOptions``.
pair_options = _packing((*_COMMON, *_PAIR))
