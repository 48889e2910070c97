"""A pair serving TLS and tokens, reached from the environment alone: by ``RolloutClient()``, by
``AsyncRolloutClient()`` and by the ``rollout`` commands, all through client_settings."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

import rollout_cli.main
import rollout_cli.service_calls
from rollout_client import AsyncRolloutClient, RolloutClient, assistant, client_settings, user
from tests.conftest import CORPUS
from tests.e2e.secured import A_IMPORT, A, SecuredPair, local, start_secured_pair

CODEX = CORPUS / "codex" / "real-2026-06-exec-redacted.jsonl"
VARIABLES = ("ROLLOUT_WRITER", "ROLLOUT_READER", "ROLLOUT_TOKEN", "ROLLOUT_TLS_CA")


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> Iterator[SecuredPair]:
    started = start_secured_pair(tmp_path_factory.mktemp("settings-secured"))
    yield started
    started.stop()


def environment(pair: SecuredPair, token: str) -> dict[str, str]:
    return {
        "ROLLOUT_WRITER": local(pair.writer.address),
        "ROLLOUT_READER": local(pair.reader.address),
        "ROLLOUT_TOKEN": token,
        "ROLLOUT_TLS_CA": str(pair.certificates.ca_file),
    }


def test_a_blocking_client_built_from_the_environment_alone_reaches_a_tls_and_token_pair(
    pair, monkeypatch
) -> None:
    """``RolloutClient()`` takes the addresses, the token and the CA file from the environment."""
    for name, value in environment(pair, A).items():
        monkeypatch.setenv(name, value)
    with RolloutClient() as client:
        session = client.create_session("env-agent", root=True)
        session.append(user("hello"), assistant("hi"))
        assert [message["content"] for message in session.replay().messages] == ["hello", "hi"]
        assert client.session(session.id).stop_facts().next_seq == 3


def test_an_asyncio_client_built_from_the_environment_alone_reaches_a_tls_and_token_pair(
    pair, monkeypatch
) -> None:
    """``AsyncRolloutClient()`` too."""
    for name, value in environment(pair, A).items():
        monkeypatch.setenv(name, value)

    async def run() -> list[str]:
        async with AsyncRolloutClient() as client:
            session = await client.create_session("env-agent", root=True)
            await session.append(user("hello"), assistant("hi"))
            return [message["content"] for message in (await session.replay()).messages]

    assert asyncio.run(run()) == ["hello", "hi"]


def test_the_commands_resolve_addresses_and_credentials_through_client_settings(pair, monkeypatch) -> None:
    """With nothing in the process environment, each client command (import, ls, replay, tail,
    fork, loadtest) reaches the pair only because it asks client_settings, here made to read the
    pair's variables from another mapping; the command's own arguments go through it too."""
    calls = []

    def resolving_from_the_pair(*args, **kwargs):
        calls.append((args, kwargs))
        return client_settings(*args, **kwargs, environ=environment(pair, A_IMPORT))

    monkeypatch.setattr(rollout_cli.service_calls, "client_settings", resolving_from_the_pair)
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    runner = CliRunner()

    def rollout(*args: str) -> str:
        result = runner.invoke(rollout_cli.main.cli, list(args), catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.stdout

    [report] = [json.loads(line) for line in rollout("import", "codex", "--json", str(CODEX)).splitlines()]
    session_id = report["sessions"][0]["session_id"]
    assert session_id in rollout("ls")
    assert "-- " in rollout("replay", session_id)
    assert rollout("tail", session_id, "-n", "1").startswith("[")
    assert rollout("fork", session_id, "--at-seq", "1").startswith(f"forked {session_id} at seq 1 into ")
    figures = json.loads(rollout("loadtest", "--sessions", "1", "--duration", "0.5", "--json"))
    assert figures["errors"] == {}
    assert figures["appends"] > 0
    assert len(calls) == 6
    rollout("--token", A, "ls", "--reader", local(pair.reader.address))
    assert calls[-1] == ((None, local(pair.reader.address)), {"token": A, "tls_ca": None})
