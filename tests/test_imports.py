"""No import cycles inside cfkit, counting imports made inside functions (a hidden cycle is still a cycle)."""
from __future__ import annotations

import ast
from collections import deque
from pathlib import Path

import pytest

import cfkit

ROOT = Path(cfkit.__file__).parent
COVERED = ("cfkit",)
"""Packages whose modules may sit on no import cycle: the whole of cfkit."""


def module_name(path: Path) -> str:
    """``cfkit/zoo/gan.py`` -> ``cfkit.zoo.gan``; a package's ``__init__.py`` -> the package."""
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, modules: set[str]) -> set[str]:
    """The cfkit modules ``path`` imports anywhere in its body, relative imports resolved."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            source = ".".join(filter(None, (base, node.module)))
            submodules = {f"{source}.{alias.name}" for alias in node.names} & modules
            found.update(submodules or {source})
    return found & modules


def import_graph() -> dict[str, set[str]]:
    """Module -> the cfkit modules it imports."""
    paths = sorted(ROOT.rglob("*.py"))
    modules = {module_name(p) for p in paths}
    return {module_name(p): imported_modules(p, modules) - {module_name(p)} for p in paths}


def cycle_through(graph: dict[str, set[str]], start: str) -> list[str] | None:
    """A shortest import path from ``start`` back to ``start``, or None when there is none."""
    parent: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for nxt in sorted(graph[node]):
            if nxt == start:
                path = [node]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                return [*reversed(path), start]
            if nxt not in parent:
                parent[nxt] = node
                queue.append(nxt)
    return None


def test_graph_sees_imports_inside_functions() -> None:
    graph = import_graph()
    assert "cfkit.zoo.checkpoints" in graph["cfkit.zoo.report"]
    assert "cfkit.zoo.inception" in graph["cfkit.running.cli"], "cli imports its commands' modules inside functions"
    assert cycle_through({"a": {"b"}, "b": {"c"}, "c": {"a"}}, "a") == ["a", "b", "c", "a"]
    assert cycle_through({"a": {"b"}, "b": set()}, "a") is None


@pytest.mark.parametrize("package", COVERED)
def test_no_import_cycle(package: str) -> None:
    graph = import_graph()
    inside = [m for m in sorted(graph) if m == package or m.startswith(f"{package}.")]
    cycles = [cycle for m in inside if (cycle := cycle_through(graph, m))]
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)
