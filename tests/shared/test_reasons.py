"""The words of status details (shared.reasons): documented in the protos, sent by the services,
read by the SDK through the constants, never as text."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from shared import reasons

REPO = Path(__file__).resolve().parents[2]
PROTOS = sorted((REPO / "protos" / "rollout" / "v1").glob("*.proto"))
WORDS = {name: value for name, value in vars(reasons).items() if name.isupper() and isinstance(value, str)}
#: Attributes of a status or its details whose value a program must not compare with literal text.
DETAIL_ATTRIBUTES = {"reason", "description", "subject", "message", "details", "precondition"}


def proto_comments() -> str:
    """The comment text of every proto file, lines joined by spaces."""
    lines = []
    for proto in PROTOS:
        for line in proto.read_text(encoding="utf-8").splitlines():
            text = line.strip()
            if text.startswith("//"):
                lines.append(text[2:].strip())
    return " ".join(lines)


@pytest.mark.parametrize("name", sorted(WORDS))
def test_every_word_is_documented_in_the_protos(name: str) -> None:
    """Each reason, type and description of shared.reasons is named in a proto comment."""
    assert WORDS[name] in proto_comments(), f"{name} = {WORDS[name]!r} is not documented in {PROTOS}"


def test_the_subjects_and_the_next_seq_description_are_documented_in_the_protos() -> None:
    """The subject forms and a seq mismatch's description appear in the protos as the functions build them."""
    comments = proto_comments()
    for built in (
        reasons.session_subject("<id>"),
        reasons.request_subject("<request id>"),
        reasons.seq_subject("<seq>"),  # type: ignore[arg-type]
        reasons.next_seq_precondition("<n>"),  # type: ignore[arg-type]
    ):
        assert f'"{built}"' in comments, built


def test_a_seq_mismatch_description_reads_back_its_next_seq() -> None:
    """next_seq_of_precondition reads what next_seq_precondition writes, and nothing else."""
    for next_seq in (0, 1, 7, 2**40):
        assert reasons.next_seq_of_precondition(reasons.next_seq_precondition(next_seq)) == next_seq
    for other in (reasons.SESSION_IS_OPEN, "next_seq=", "next_seq=7 ", "next_seq=-1", "x next_seq=7", ""):
        assert reasons.next_seq_of_precondition(other) is None, other


def _is_detail(node: ast.AST) -> bool:
    """Whether ``node`` reads a status detail or message: ``x.reason``, ``error.details()``, ..."""
    if isinstance(node, ast.Call):
        node = node.func
    return isinstance(node, ast.Attribute) and node.attr in DETAIL_ATTRIBUTES


def _is_text(node: ast.AST) -> bool:
    return (isinstance(node, ast.Constant) and isinstance(node.value, str)) or isinstance(node, ast.JoinedStr)


def text_matches(source: str) -> list[int]:
    """Lines of ``source`` that compare a status detail with literal text (==, !=, in, startswith, a regex)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(map(_is_detail, operands)) and any(map(_is_text, operands)):
                found.append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            receiver, arguments = node.func.value, node.args
            if node.func.attr in {"startswith", "endswith"} and _is_detail(receiver):
                found.append(node.lineno)
            if node.func.attr in {"match", "fullmatch", "search"} and any(map(_is_detail, arguments)):
                found.append(node.lineno)
    return found


def test_the_scan_finds_text_matched_against_a_detail() -> None:
    """The scan below is not vacuous: each way of matching a detail as text is found."""
    source = (
        "a = violation.description == 'session is open'\n"
        "b = 'larger than max' in error.message\n"
        "c = info.reason != f'{x}'\n"
        "d = error.details().startswith('x')\n"
        "e = PATTERN.match(violation.description)\n"
        "f = info.reason == REPLY_TOO_LARGE\n"
    )
    assert text_matches(source) == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("path", sorted((REPO / "rollout_client").glob("*.py")), ids=lambda path: path.name)
def test_the_client_matches_no_detail_as_text(path: Path) -> None:
    """rollout_client compares reasons, subjects and descriptions with shared.reasons' constants only."""
    assert text_matches(path.read_text(encoding="utf-8")) == [], path
