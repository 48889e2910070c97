"""Where a client connects and how it authenticates: the arguments given, else the environment.

:func:`client_settings` is the one place that reads them, for :class:`rollout_client.RolloutClient`,
:class:`rollout_client.AsyncRolloutClient` and the ``rollout`` command's client commands alike,
so a program and the command line pointed by the same environment reach the same services the
same way (docs/spec.md §6):

==============  ==========  ==================  ==========================
setting         argument    environment         otherwise
==============  ==========  ==================  ==========================
writer address  ``writer``  ``ROLLOUT_WRITER``  ``127.0.0.1:50051``
reader address  ``reader``  ``ROLLOUT_READER``  ``127.0.0.1:50052``
bearer token    ``token``   ``ROLLOUT_TOKEN``   none (no authorization sent)
TLS CA file     ``tls_ca``  ``ROLLOUT_TLS_CA``  none (plaintext)
==============  ==========  ==================  ==========================

An argument that is None or empty is not given; an empty variable is not set. Each setting is
taken on its own: an address given as an argument still goes with ``ROLLOUT_TOKEN``.

The writer address may be a comma-separated list of writers of one cluster
(``10.0.0.1:50051,10.0.0.2:50051``): the client asks the first that answers for the shard map
and sends each session's calls to its shard's owner (docs/cluster.md §4;
:attr:`ClientSettings.writers`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

DEFAULT_WRITER = "127.0.0.1:50051"
DEFAULT_READER = "127.0.0.1:50052"
WRITER_VARIABLE = "ROLLOUT_WRITER"
READER_VARIABLE = "ROLLOUT_READER"
TOKEN_VARIABLE = "ROLLOUT_TOKEN"
TLS_CA_VARIABLE = "ROLLOUT_TLS_CA"


@dataclass(frozen=True, slots=True)
class ClientSettings:
    """The writer and reader addresses (``host:port``), the bearer token (None: none) and the CA
    file (PEM) of the services' TLS (None: plaintext) a client uses."""

    writer: str
    reader: str
    token: str | None
    tls_ca: Path | None

    @property
    def writers(self) -> tuple[str, ...]:
        """The writer addresses of :attr:`writer`, a comma-separated list, in order (blanks dropped;
        the default writer when it names none)."""
        given = tuple(part.strip() for part in self.writer.split(",") if part.strip())
        return given or (DEFAULT_WRITER,)


def client_settings(
    writer: str | None = None,
    reader: str | None = None,
    *,
    token: str | None = None,
    tls_ca: str | Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> ClientSettings:
    """Each setting from its argument, else its environment variable, else its default (table in
    the module doc). ``environ``: the variables to read (None: ``os.environ``). Reads no file and
    raises nothing: the CA file is read when a channel is made."""
    variables = os.environ if environ is None else environ

    def pick(argument: str | Path | None, variable: str) -> str | None:
        given = str(argument) if argument is not None else ""
        return given or variables.get(variable) or None

    ca = pick(tls_ca, TLS_CA_VARIABLE)
    return ClientSettings(
        writer=pick(writer, WRITER_VARIABLE) or DEFAULT_WRITER,
        reader=pick(reader, READER_VARIABLE) or DEFAULT_READER,
        token=pick(token, TOKEN_VARIABLE),
        tls_ca=Path(ca) if ca is not None else None,
    )
