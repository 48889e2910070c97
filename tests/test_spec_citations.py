"""Citations of the specification resolve to docs/spec.md (docs/spec.md, issue 27's shape).

Code, tests, protos and documents cite rules as ``docs/spec.md §2.3`` (and, until every
citation is rewritten, in the older short form: the word in capitals, then ``§2.3``). Every
section such a citation names must be a heading of docs/spec.md, and no file may point at a
specification outside the repository.

The patterns below are assembled from pieces so that the rewrite of the older form (a
textual substitution over the whole tree) leaves this file as it is.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SPEC = REPO / "docs" / "spec.md"

#: The older short name of the specification (kept in pieces: see the module doc).
_OLD_NAME = "SP" + "EC"
#: Suffixes of the files whose citations are checked.
_SUFFIXES = frozenset({".py", ".pyi", ".proto", ".md", ".sh", ".toml", ".js", ".yaml", ".yml", ".txt"})
#: Folders never walked: tool caches, the environment, generated stubs' caches.
_SKIPPED_DIRS = frozenset({"node_modules", "__pycache__"})

#: One section number, ``2`` or ``2.10``.
_NUMBER = r"\d+(?:\.\d+)*"
#: Another section after a list separator (``, §7``, `` and §3``, `` and its §1``).
_NEXT = r"\s*(?:,|and(?:\s+its)?|or|/)\s*§\s*" + _NUMBER
#: The end of a range (``-§5``, ``-2.8``).
_RANGE_END = r"\s*[-–]\s*§?" + _NUMBER
#: A citation: the specification's name, then one section or a run of them
#: (``§2.6, §2.7``, ``§1 and §3``, ``§2.5 and its §1``, ``§3-§5``, ``§2.6-2.8``).
_CITATION = re.compile(
    r"(?:\b" + _OLD_NAME + r"|docs/spec\.md)[\s#*/]*(§+\s*" + _NUMBER + f"(?:{_NEXT}|{_RANGE_END})*)"
)
_HEADING = re.compile(r"^#{2,4}\s+(" + _NUMBER + r")\.?\s", re.MULTILINE)
#: Pointers at a specification outside the repository: its path, or the older short form.
_OUTSIDE = re.compile(
    r"(?:\.\./)?(?:shared/)?\b" + _OLD_NAME + r"\.md"
    r"|\b" + _OLD_NAME + r"\s+§"
    r"|\b" + _OLD_NAME + r" section \d"
)


def _text_files() -> list[Path]:
    """Every text file of the repository that may cite the specification (sorted; hidden folders,
    caches and generated stubs left out)."""
    found: list[Path] = []
    for folder, dirs, files in os.walk(REPO):
        dirs[:] = [name for name in dirs if not name.startswith(".") and name not in _SKIPPED_DIRS]
        for name in files:
            if Path(name).suffix in _SUFFIXES and not name.endswith(("_pb2.py", "_pb2.pyi")):
                found.append(Path(folder, name))
    return sorted(found)


def spec_sections(text: str) -> set[str]:
    """The section numbers docs/spec.md's headings give (``## 2.``, ``### 2.3 ...``)."""
    return set(_HEADING.findall(text))


def cited_sections(text: str) -> list[tuple[int, str]]:
    """(line number, section) of every section a citation in ``text`` names."""
    cited: list[tuple[int, str]] = []
    for match in _CITATION.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        cited += [(line, number) for number in re.findall(_NUMBER, match.group(1))]
    return cited


def test_citation_parser_reads_every_form() -> None:
    """The parser finds each form the tree uses, across a line break too."""
    text = (
        f"({_OLD_NAME} §2.3) {_OLD_NAME} §3-§5; {_OLD_NAME} §2.6-2.8; {_OLD_NAME} §2.5 and its §1 addition\n"
        f"docs/spec.md §5, §7. (docs/spec.md\n    §2.10, bounded) docs/spec.md §4 says"
    )
    assert [number for _, number in cited_sections(text)] == [
        "2.3", "3", "5", "2.6", "2.8", "2.5", "1", "5", "7", "2.10", "4",
    ]  # fmt: skip
    assert spec_sections("## 2. Writing\n### 2.3 Atomic\n## 10. Finding\ntext 4.1 no\n") == {"2", "2.3", "10"}


def test_every_citation_names_a_heading_of_docs_spec() -> None:
    """Each ``docs/spec.md §N[.M]`` (or older short-form) citation in the repository resolves."""
    sections = spec_sections(SPEC.read_text(encoding="utf-8"))
    assert {"1", "2.3", "2.10", "3", "4", "5", "7", "11"} <= sections
    unresolved = [
        f"{path.relative_to(REPO)}:{line}: §{number}"
        for path in _text_files()
        for line, number in cited_sections(path.read_text(encoding="utf-8", errors="replace"))
        if number not in sections
    ]
    assert not unresolved, "citations naming no heading of docs/spec.md:\n" + "\n".join(unresolved)


def test_no_citation_points_outside_the_repository() -> None:
    """No file names the specification kept outside the repository (its path, or the older short
    form of citation): every citation reads ``docs/spec.md §N``, the specification the tree
    carries."""
    outside = [
        f"{path.relative_to(REPO)}:{text.count(chr(10), 0, match.start()) + 1}: {match.group(0)!r}"
        for path in _text_files()
        for text in [path.read_text(encoding="utf-8", errors="replace")]
        for match in _OUTSIDE.finditer(text)
    ]
    assert not outside, (
        f"{len(outside)} citations point outside the repository (write them as docs/spec.md §N):\n"
        + "\n".join(outside)
    )


@pytest.mark.parametrize(
    "text",
    ["see ../shared/" + _OLD_NAME + ".md", _OLD_NAME + " §2.3", _OLD_NAME + " section 1 addition"],
)
def test_outside_pointers_are_recognized(text: str) -> None:
    """Each older form is one the check above catches."""
    assert _OUTSIDE.search(text)
