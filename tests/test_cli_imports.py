"""The command line's modules import no private name of one another and form no import circle
(imports inside functions count too): what several commands share lives in a module of its own
(rollout_cli.service_calls), with public names."""

from __future__ import annotations

import ast
from pathlib import Path

CLI = Path(__file__).resolve().parent.parent / "rollout_cli"


def _module_name(path: Path) -> str:
    parts = path.relative_to(CLI.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> tuple[dict[str, set[str]], list[tuple[str, str, str]]]:
    """(module -> rollout_cli modules it imports, [(module, from, private name)])."""
    modules = {_module_name(path): path for path in CLI.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    private = []
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("rollout_cli"):
                for alias in node.names:
                    target = f"{node.module}.{alias.name}"
                    graph[name].add(target if target in modules else str(node.module))
                    if alias.name.startswith("_"):
                        private.append((name, str(node.module), alias.name))
            elif isinstance(node, ast.Import):
                graph[name].update(alias.name for alias in node.names if alias.name.startswith("rollout_cli"))
    return graph, private


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    found = []

    def walk(start: str, path: list[str]) -> None:
        for target in sorted(graph.get(path[-1], ())):
            if target == start:
                found.append([*path, start])
            elif target not in path and target in graph:
                walk(start, [*path, target])

    for start in graph:
        walk(start, [start])
    return found


def test_no_cli_module_imports_a_private_name_of_another() -> None:
    assert _imports()[1] == []


def test_the_cli_modules_form_no_import_circle() -> None:
    assert _circles(_imports()[0]) == []
