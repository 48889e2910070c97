"""`shared/` holds the contract both services and the SDK agree on, and nothing else: no module
of it imports the serving plumbing (:mod:`serving`), either service, or the machinery of a
gRPC server, metrics, logs or tracing (issue 24's Shape)."""

import ast
from pathlib import Path

SHARED = Path(__file__).resolve().parents[2] / "shared"

#: Top-level packages a contract module may not import.
SERVING_MACHINERY = frozenset(
    {
        "serving",
        "writer_service",
        "reader_service",
        "grpc",
        "grpc_health",
        "grpc_reflection",
        "grpc_status",
        "grpc_interceptor",
        "prometheus_client",
        "structlog",
        "opentelemetry",
    }
)


def _top_level_imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_shared_imports_no_serving_machinery():
    modules = sorted(SHARED.glob("*.py"))
    assert len(modules) > 10
    found = {
        path.name: sorted(_top_level_imports(path) & SERVING_MACHINERY)
        for path in modules
        if _top_level_imports(path) & SERVING_MACHINERY
    }
    assert found == {}
