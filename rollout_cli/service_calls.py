"""How client commands reach the services: settings from flags and environment, the client,
its retry policy, and a failed call in one line.

Every command that calls the writer or the reader (``rollout ls``, ``replay``, ``memory run``,
...) goes through here: :func:`command_settings` resolves ``--writer`` / ``--reader`` and the
group's ``--token`` / ``--tls-ca`` with the environment by
:func:`rollout_client.client_settings` (as every ``RolloutClient()`` resolves them), and
:func:`service_client` makes the client and turns a failed call into a ClickException.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import click

from rollout_cli.reachability import cleartext_token_message, in_command_words, unreachable_message
from rollout_client import (
    DEFAULT_READER,
    DEFAULT_WRITER,
    ClientSettings,
    RetryPolicy,
    RolloutClient,
    RolloutError,
    client_settings,
)

#: People wait for answers, not for retries against a service that is not there: a few quick
#: attempts on a retryable status, and no deadline on a long call (a verify of a big session).
CLI_RETRY = RetryPolicy(deadline=24 * 3600, attempt_timeout=24 * 3600, initial_backoff=0.1, max_attempts=4)

writer_option = click.option(
    "--writer",
    default=None,
    help=f"Writer address (env ROLLOUT_WRITER, else {DEFAULT_WRITER}).",
)
reader_option = click.option(
    "--reader",
    default=None,
    help=f"Reader address (env ROLLOUT_READER, else {DEFAULT_READER}).",
)


@dataclass(frozen=True, slots=True)
class Credentials:
    """The --token and --tls-ca given on the command line (None: not given; the environment
    then decides, through :func:`rollout_client.client_settings`). The ``rollout`` group keeps
    them as its context object."""

    token: str | None = None
    tls_ca: Path | None = None


def check_ca_file(path: Path) -> None:
    """Raise click.BadParameter (exit 2) unless ``path`` holds PEM certificates a TLS client can
    trust (gRPC itself would only say, later, that the handshake failed)."""
    try:
        ssl.create_default_context(cafile=str(path))
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise click.BadParameter(
            f"{path} holds no usable PEM certificate ({exc})", param_hint="'--tls-ca' / ROLLOUT_TLS_CA"
        ) from exc


def command_settings(writer: str | None = None, reader: str | None = None) -> ClientSettings:
    """The addresses and credentials of a client command: its --writer / --reader and the group's
    --token / --tls-ca, each else its environment variable (:func:`rollout_client.client_settings`,
    the resolution every RolloutClient makes).

    Only client commands ask, so a bad ROLLOUT_TLS_CA does not stop ``serve`` or ``--help``;
    click.BadParameter when the CA file holds no usable certificate.
    """
    obj = click.get_current_context().find_root().obj
    given = obj if isinstance(obj, Credentials) else Credentials()
    settings = client_settings(writer, reader, token=given.token, tls_ca=given.tls_ca)
    if settings.tls_ca is not None:
        check_ca_file(settings.tls_ca)
    return settings


@contextmanager
def service_client(service: str, address: str | None) -> Iterator[RolloutClient]:
    """A client of the ``service`` ("writer" or "reader") at ``address`` (None: from the
    environment); a failed call inside becomes a one-line ClickException (exit status 1)."""
    settings = command_settings(*((address, None) if service == "writer" else (None, address)))
    try:
        client = RolloutClient(
            settings.writer, settings.reader, retry=CLI_RETRY, token=settings.token, tls_ca=settings.tls_ca
        )
    except ValueError as exc:  # a token in clear text to a remote address
        raise click.ClickException(cleartext_token_message(exc)) from exc
    address = settings.writer if service == "writer" else settings.reader
    with client:
        try:
            yield client
        except RolloutError as error:
            raise call_failure(error, service, address, settings) from error


def call_failure(
    error: RolloutError, service: str, address: str, settings: ClientSettings
) -> click.ClickException:
    """A one-line error for a failed call: the status, or what to do when the service is not there."""
    code, message = error.code, in_command_words(error.message)
    if code is None:
        return click.ClickException(message)
    if code.name == "UNAVAILABLE" and "connect" in error.message:
        return click.ClickException(
            unreachable_message(service, address, error.message, tls_ca_given=settings.tls_ca is not None)
        )
    if code.name == "UNAUTHENTICATED" and settings.token is None:
        return click.ClickException(f"{code.name}: {message}; pass --token / ROLLOUT_TOKEN")
    if code.name == "UNIMPLEMENTED":
        return click.ClickException(
            f"{address} does not serve the rollout {service} (is it the other service?)"
        )
    return click.ClickException(f"{code.name}: {message}")
