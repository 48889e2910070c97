"""Where the etcd client library may be imported: the coordination package alone."""

from __future__ import annotations

import ast
from pathlib import Path

import writer_service.coordination as coordination

REPO = Path(__file__).resolve().parents[2]
COORDINATION = REPO / "writer_service" / "coordination"


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_only_the_coordination_package_imports_the_etcd_client():
    """No module of the services, the shared package, the client or the CLI imports aetcd; the coordination package's protocol module does."""
    offenders = [
        str(path.relative_to(REPO))
        for package in (
            "shared",
            "serving",
            "writer_service",
            "reader_service",
            "rollout_client",
            "rollout_cli",
        )
        for path in (REPO / package).rglob("*.py")
        if "aetcd" in _imports(path) and path != COORDINATION / "protocol.py"
    ]
    assert offenders == []
    assert "aetcd" in _imports(COORDINATION / "protocol.py")


def test_the_coordination_package_exports_a_sorted_complete_surface():
    """The package's __all__ is in isort order, names each export once, resolves, and names every public class of its modules."""
    exported = list(coordination.__all__)
    assert exported == sorted(exported, key=lambda name: (not name.isupper(), name))
    assert len(exported) == len(set(exported))
    assert all(hasattr(coordination, name) for name in exported)
    public_classes = {
        node.name
        for path in COORDINATION.glob("*.py")
        for node in ast.parse(path.read_text(encoding="utf-8")).body
        if isinstance(node, ast.ClassDef) and not node.name.startswith("_")
    }
    internal = {"Member", "MemberRotation"}  # the rotation's own parts, used by the package alone
    assert public_classes - internal <= set(exported)
