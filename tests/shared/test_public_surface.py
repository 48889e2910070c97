"""The public surface of ``shared``: a sorted, complete ``__all__`` and the names the services use."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import shared

REPO = Path(__file__).resolve().parents[2]
CONSUMERS = ("writer_service", "reader_service", "rollout_cli", "rollout_client", "rollout_memory")


def _imports_from_shared():
    """Every ``(module, name, where)`` that a consumer package imports with ``from shared... import``."""
    found = []
    for package in CONSUMERS:
        for path in sorted((REPO / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.ImportFrom)
                    and node.level == 0
                    and node.module
                    and (node.module == "shared" or node.module.startswith("shared."))
                ):
                    where = f"{path.relative_to(REPO)}:{node.lineno}"
                    found += [(node.module, alias.name, where) for alias in node.names]
    return found


IMPORTS = _imports_from_shared()


def test_all_is_sorted_and_unique():
    """shared.__all__ is in ruff's isort-style order (CONSTANTS first) and names each export once."""
    assert list(shared.__all__) == sorted(shared.__all__, key=lambda name: (not name.isupper(), name))
    assert len(set(shared.__all__)) == len(shared.__all__)


@pytest.mark.parametrize("name", shared.__all__)
def test_every_exported_name_is_importable(name):
    """Each name in shared.__all__ is importable from shared and is not None."""
    assert getattr(importlib.import_module("shared"), name, None) is not None


def test_all_lists_every_public_name_imported_into_the_package():
    """Every public name shared/__init__.py binds is listed in __all__."""
    public = {
        name
        for name, value in vars(shared).items()
        if not name.startswith("_") and not isinstance(value, type(shared))
    }
    assert public <= set(shared.__all__)


def test_consumers_import_something_from_shared():
    """The scan finds the services' imports from shared (so the next test is not vacuous)."""
    modules = {module for module, _, _ in IMPORTS}
    assert {"shared.rebuild", "shared.stop_kinds", "shared.wire", "shared.naming"} <= modules


@pytest.mark.parametrize(("module", "name", "where"), IMPORTS, ids=[f"{m}.{n}" for m, n, _ in IMPORTS])
def test_names_the_services_import_from_shared_exist(module, name, where):
    """Each name writer_service, reader_service, rollout_cli and rollout_client import from shared.* exists there."""
    assert hasattr(importlib.import_module(module), name), f"{where}: {module}.{name} is missing"
