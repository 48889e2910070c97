"""client_settings: each address and credential from its argument, else its environment variable,
else its default; both clients take theirs from it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import rollout_client._aio
from rollout_client import (
    DEFAULT_READER,
    DEFAULT_WRITER,
    AsyncRolloutClient,
    ClientSettings,
    RolloutClient,
    client_settings,
)

ENVIRONMENT = {
    "ROLLOUT_WRITER": "10.0.0.1:7001",
    "ROLLOUT_READER": "10.0.0.1:7002",
    "ROLLOUT_TOKEN": "tok-env",
    "ROLLOUT_TLS_CA": "/etc/rollout/ca.pem",
}


def test_the_environment_fills_every_setting_not_given() -> None:
    """No argument: the four variables; arguments given win one by one."""
    assert client_settings(environ=ENVIRONMENT) == ClientSettings(
        "10.0.0.1:7001", "10.0.0.1:7002", "tok-env", Path("/etc/rollout/ca.pem")
    )
    assert client_settings("h:1", token="tok-arg", environ=ENVIRONMENT) == ClientSettings(
        "h:1", "10.0.0.1:7002", "tok-arg", Path("/etc/rollout/ca.pem")
    )
    assert client_settings(reader="h:2", tls_ca=Path("ca.pem"), environ=ENVIRONMENT) == ClientSettings(
        "10.0.0.1:7001", "h:2", "tok-env", Path("ca.pem")
    )


def test_empty_arguments_and_variables_count_as_not_given() -> None:
    """An empty argument falls to the variable, an empty variable to the default."""
    assert client_settings("", "", token="", tls_ca="", environ=ENVIRONMENT) == client_settings(
        environ=ENVIRONMENT
    )
    empty = dict.fromkeys(ENVIRONMENT, "")
    assert client_settings(environ=empty) == ClientSettings(DEFAULT_WRITER, DEFAULT_READER, None, None)
    assert client_settings(environ={}) == ClientSettings(DEFAULT_WRITER, DEFAULT_READER, None, None)


def test_the_process_environment_is_read_when_none_is_given(monkeypatch) -> None:
    """Without ``environ``, os.environ at the time of the call."""
    for name, value in ENVIRONMENT.items():
        monkeypatch.setenv(name, value)
    assert client_settings() == client_settings(environ=ENVIRONMENT)


@pytest.mark.parametrize("kind", [RolloutClient, AsyncRolloutClient])
def test_both_clients_take_their_settings_from_client_settings(monkeypatch, kind) -> None:
    """The constructors resolve through the shared function (here made to read another mapping):
    a client that read the environment itself would not see it."""
    seen = []

    def resolving_from_another_mapping(*args, **kwargs):
        seen.append((args, kwargs))
        return client_settings(*args, **kwargs, environ={"ROLLOUT_WRITER": "127.0.0.1:7101"})

    monkeypatch.setattr(rollout_client._aio, "client_settings", resolving_from_another_mapping)
    for name in ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    client = kind(reader="127.0.0.1:7102")
    core = client.core if isinstance(client, RolloutClient) else client
    try:
        assert (core.writer_address, core.reader_address) == ("127.0.0.1:7101", "127.0.0.1:7102")
        assert seen == [((None, "127.0.0.1:7102"), {"token": None, "tls_ca": None})]
    finally:
        if isinstance(client, RolloutClient):
            client.close()
        else:
            asyncio.run(client.close())
