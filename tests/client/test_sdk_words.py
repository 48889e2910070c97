"""Errors a Python program meets name the client's calls and arguments, never the command line's
flags or commands; the command line says the same remedies as its own commands."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from rollout_client import DataLossError, FailedPreconditionError, user
from shared.remedies import FORCED_RESUME, SEE_VERIFY
from tests.conftest import REPO, run_rollout
from tests.data_roots import session_file

#: A command-line flag (``--tls-ca``), or a client command of ``rollout`` (``rollout verify``).
FLAG = re.compile(r"(?<![\w-])--[a-z]")
COMMAND = re.compile(r"\brollout (ls|replay|tail|stop-facts|verify|stop|resume|fork|import|loadtest)\b")


def _message_texts(package: str) -> list[tuple[str, str]]:
    """(where, text) of every string constant of ``package`` that is not a docstring."""
    found = []
    for path in sorted((REPO / package).rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                found.append((f"{path.relative_to(REPO)}:{node.lineno}", node.value))
    return found


def test_the_client_library_names_no_flag_or_command_in_its_messages() -> None:
    """No string of rollout_client outside docstrings names a flag or a rollout command."""
    offending = [
        (where, text)
        for where, text in _message_texts("rollout_client")
        if FLAG.search(text) or COMMAND.search(text)
    ]
    assert offending == []


@pytest.mark.parametrize("package", ["shared", "serving", "writer_service", "reader_service"])
def test_the_services_name_no_client_command_in_their_messages(package) -> None:
    """What the services say reaches programs through rollout_client: no `rollout <command>` in it
    (a remedy is a phrase of shared.remedies, which the command line translates)."""
    assert [(where, text) for where, text in _message_texts(package) if COMMAND.search(text)] == []


def _session_file(data_dir: Path, session_id: str) -> Path:
    return session_file(data_dir, session_id)


def test_refusals_name_the_client_calls_that_go_on(client, data_dir, reader_process) -> None:
    """A completed session's resume says resume(force=True); a damaged file's resume says that and
    verify(), and so does its stop facts' resume reason; the command line says rollout resume
    --force and rollout verify instead."""
    session = client.create_session()
    session.append(user("deploy to staging"))
    session.stop("completed", "done")
    with pytest.raises(FailedPreconditionError) as caught:
        session.resume()
    assert caught.value.message.endswith(f"; {FORCED_RESUME} re-opens it anyway")

    damaged = client.create_session()
    damaged.append(user("deploy to staging"))
    damaged.stop("paused", "lunch break")
    path = _session_file(data_dir, damaged.id)
    path.write_bytes(path.read_bytes().replace(b"lunch break", b"lunch BREAK"))
    with pytest.raises(DataLossError) as caught:
        damaged.resume()
    assert f"({SEE_VERIFY})" in caught.value.message
    assert f"re-open it anyway with {FORCED_RESUME}" in caught.value.message
    assert f"({SEE_VERIFY})" in damaged.stop_facts().resume_reason

    result = run_rollout("stop-facts", damaged.id, "--reader", reader_process.address)
    assert "(see rollout verify)" in result.stdout
    result = run_rollout("resume", damaged.id, "--writer", client.core.writer_address)
    assert "(see rollout verify)" in result.stderr
    assert "re-open it anyway with rollout resume --force" in result.stderr
    assert FORCED_RESUME not in result.stderr
