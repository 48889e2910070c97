"""The `rollout` commands, the importers and loadtest reach a pair that requires TLS and tokens."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest

from tests.conftest import CORPUS, run_rollout
from tests.e2e.secured import A_IMPORT, A, B, SecuredPair, local, make_certificates, start_secured_pair

CODEX = CORPUS / "codex" / "real-2026-06-exec-redacted.jsonl"


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> Iterator[SecuredPair]:
    started = start_secured_pair(tmp_path_factory.mktemp("cli-secured"))
    yield started
    started.stop()


def rollout(pair: SecuredPair, *args: str, token: str | None = None) -> tuple[int, str, str]:
    """Run `rollout --tls-ca CA [--token T] ARGS` against the pair (writer and reader by name)."""
    credentials = ["--tls-ca", str(pair.certificates.ca_file)]
    if token is not None:
        credentials += ["--token", token]
    result = run_rollout(
        *credentials,
        *args,
        "--writer" if args[0] in ("import", "stop", "resume", "fork", "loadtest") else "--reader",
        local(
            pair.writer.address
            if args[0] in ("import", "stop", "resume", "fork", "loadtest")
            else pair.reader.address
        ),
        timeout=120,
    )
    return result.returncode, result.stdout, result.stderr


def test_an_importer_token_imports_and_its_tenant_lists_it_while_another_sees_nothing(pair) -> None:
    """`import` with an importer token keeps source times; the tenant's token lists it, another's does not."""
    code, out, err = rollout(pair, "import", "codex", "--json", str(CODEX), token=A_IMPORT)
    assert code == 0, err
    [report] = [json.loads(line) for line in out.splitlines()]
    session_id = report["sessions"][0]["session_id"]
    code, out, err = rollout(pair, "ls", token=A)
    assert code == 0, err
    assert session_id in out
    code, out, err = rollout(pair, "ls", token=B)
    assert code == 0, err
    assert session_id not in out
    code, _, err = rollout(pair, "replay", session_id, token=B)
    assert code == 1
    assert "NOT_FOUND" in err


def test_a_plain_token_may_not_import(pair) -> None:
    """An import with a token not marked as an importer fails the file with PERMISSION_DENIED and keeps nothing."""
    code, out, _ = rollout(pair, "import", "codex", "--json", str(CODEX), token=B)
    assert code == 1
    [report] = [json.loads(line) for line in out.splitlines()]
    assert report["status"] == "failed"
    assert "PERMISSION_DENIED" in report["detail"]


def test_without_a_token_a_command_says_unauthenticated(pair) -> None:
    """No token: the command fails with one line naming UNAUTHENTICATED, never a traceback."""
    code, _, err = rollout(pair, "ls")
    assert code == 1
    assert "UNAUTHENTICATED" in err
    assert err.rstrip().endswith("pass --token / ROLLOUT_TOKEN")
    assert "Traceback" not in err


def test_the_token_may_come_from_the_environment(pair) -> None:
    """ROLLOUT_TOKEN and ROLLOUT_TLS_CA stand for --token and --tls-ca."""
    environment = {**os.environ, "ROLLOUT_TOKEN": A, "ROLLOUT_TLS_CA": str(pair.certificates.ca_file)}
    import subprocess
    import sys

    from tests.conftest import REPO

    result = subprocess.run(
        [sys.executable, "-m", "rollout_cli.main", "ls", "--reader", local(pair.reader.address)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=environment,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_loadtest_runs_with_a_token(pair) -> None:
    """`loadtest` authenticates like every command: its sessions go in without errors."""
    code, out, err = rollout(pair, "loadtest", "--sessions", "2", "--duration", "1", "--json", token=A)
    assert code == 0, err
    figures = json.loads(out)
    assert figures["errors"] == {}
    assert figures["appends"] > 0


def test_a_tls_service_reached_without_a_ca_file_says_to_pass_one(pair) -> None:
    """Plain text to a TLS service: one line that names --tls-ca / ROLLOUT_TLS_CA."""
    result = run_rollout("--token", A, "ls", "--reader", local(pair.reader.address))
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1].endswith(
        "If it serves TLS, pass its CA file with --tls-ca / ROLLOUT_TLS_CA."
    )


def test_a_ca_file_that_did_not_sign_the_service_certificate_is_named_as_a_failed_handshake(
    pair, tmp_path
) -> None:
    """Another CA's file: the error says the TLS handshake failed, not that nothing listens."""
    stranger = make_certificates(tmp_path)
    for args in (
        ["ls", "--reader", local(pair.reader.address)],
        ["import", "codex", "--writer", local(pair.writer.address), str(CODEX)],
    ):
        result = run_rollout("--tls-ca", str(stranger.ca_file), "--token", A_IMPORT, *args)
        assert result.returncode == 1, args
        assert any(
            line.startswith("Error: the TLS handshake with the") for line in result.stderr.splitlines()
        ), result.stderr
        assert "Traceback" not in result.stderr
        assert "ssl_transport_security" not in result.stderr  # gRPC's own log line stays out


def test_a_token_in_clear_text_is_refused_naming_the_option() -> None:
    """A token to a non-loopback address without TLS: refused before any call, naming --tls-ca."""
    result = run_rollout("--token", A, "ls", "--reader", "192.0.2.1:50052")
    assert result.returncode == 1
    assert "would travel in clear text; pass --tls-ca / ROLLOUT_TLS_CA" in result.stderr


def test_a_ca_file_against_a_plaintext_service_says_it_does_not_speak_tls(reader_process, tmp_path) -> None:
    """--tls-ca to a plaintext service: the error says the service does not speak TLS."""
    ca_file = make_certificates(tmp_path).ca_file
    result = run_rollout("--tls-ca", str(ca_file), "ls", "--reader", reader_process.address)
    assert result.returncode == 1
    assert f"Error: the reader at {reader_process.address} does not speak TLS" in result.stderr


@pytest.mark.parametrize(
    "content",
    [b"hello\n", b"-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n"],
    ids=["no-pem", "corrupt-body"],
)
def test_a_ca_file_without_a_usable_certificate_is_refused_before_connecting(tmp_path, content) -> None:
    """--tls-ca naming a file with no usable PEM certificate: a usage error (exit 2) naming the file;
    the same file in ROLLOUT_TLS_CA does not stop a command that makes no client call."""
    not_a_certificate = tmp_path / "notes.pem"
    not_a_certificate.write_bytes(content)
    result = run_rollout("--tls-ca", str(not_a_certificate), "ls", "--reader", "127.0.0.1:1")
    assert result.returncode == 2
    assert f"{not_a_certificate} holds no usable PEM certificate" in result.stderr
    assert "Traceback" not in result.stderr
    assert run_rollout("--tls-ca", str(not_a_certificate), "serve-writer", "--help").returncode == 0
