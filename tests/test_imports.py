"""cfkit's imports go one way: down its layers (:data:`LAYERS`), with no import cycles, counting imports made inside
functions (a hidden cycle or a hidden upward import is still one)."""
from __future__ import annotations

import ast
from collections import deque
from pathlib import Path

import pytest

import cfkit

ROOT = Path(cfkit.__file__).parent
COVERED = ("cfkit",)
"""Packages whose modules may sit on no import cycle: the whole of cfkit."""
LAYERS = ("cfkit.errors", "cfkit.paths", "cfkit.common", "cfkit.data", "cfkit.zoo", "cfkit.methods",
          "cfkit.scoring", "cfkit.studies", "cfkit.interactive", "cfkit.running")
"""cfkit's top-level entries, lowest first: a module imports its own entry or a lower one, never a higher (as the
``cfkit/__init__.py`` docstring and the README's "Package layout" say)."""


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


def layer(module: str, layers: tuple[str, ...] = LAYERS) -> int:
    """The index in ``layers`` of the entry ``module`` belongs to."""
    return next(i for i, entry in enumerate(layers) if module == entry or module.startswith(entry + "."))


def upward_imports(graph: dict[str, set[str]], layers: tuple[str, ...] = LAYERS) -> list[str]:
    """``"a -> b"`` for every import of a higher layer. Importing ``cfkit.x.y`` also runs ``cfkit/x/__init__.py``,
    so each imported module's parent packages count as imported too; the root package belongs to no layer."""
    root = layers[0].partition(".")[0]
    upward = set()
    for module, imported in graph.items():
        if module == root:
            continue
        for target in imported:
            parts = target.split(".")
            for depth in range(2, len(parts) + 1):
                reached = ".".join(parts[:depth])
                if layer(reached, layers) > layer(module, layers):
                    upward.add(f"{module} -> {reached}")
    return sorted(upward)


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


def test_upward_imports_are_reported() -> None:
    """A synthetic graph: an upward import is reported (inside a function or not, the graph does not say), and so
    is one that reaches a higher layer only through a parent package's ``__init__``; downward ones are not."""
    layers = ("p.low", "p.mid", "p.high")
    graph = {"p": set(), "p.low": set(), "p.low.a": {"p.mid.b"}, "p.mid": set(), "p.mid.b": {"p.low.a", "p.mid"},
             "p.high": set(), "p.high.c": {"p.low.a", "p.mid.b", "p"}}
    assert upward_imports(graph, layers) == ["p.low.a -> p.mid", "p.low.a -> p.mid.b"]
    assert upward_imports({**graph, "p.low.a": set()}, layers) == []
    assert layer("p.high.c", layers) == 2 and layer("p.mid", layers) == 1


def test_layers_name_every_top_level_entry() -> None:
    """Every module and folder at the top of cfkit has its layer (a folder without ``__init__.py`` too)."""
    entries = {f"cfkit.{p.stem}" for p in ROOT.iterdir()
               if (p.suffix == ".py" and p.stem != "__init__") or (p.is_dir() and p.name != "__pycache__")}
    assert entries == set(LAYERS) and len(LAYERS) <= 10


def test_no_import_goes_up() -> None:
    upward = upward_imports(import_graph())
    assert not upward, "imports going up a layer: " + "; ".join(upward)


@pytest.mark.parametrize("package", COVERED)
def test_no_import_cycle(package: str) -> None:
    graph = import_graph()
    inside = [m for m in sorted(graph) if m == package or m.startswith(f"{package}.")]
    cycles = [cycle for m in inside if (cycle := cycle_through(graph, m))]
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_running_a_notebook_or_building_a_method_leaves_torchmetrics_unimported() -> None:
    """torchmetrics pulls in torchvision's models and torch._dynamo, seconds of every ``cfkit run`` and notebook
    start; only computing a distance (FID, KID) imports it."""
    import subprocess
    import sys

    probe = ("import sys, cfkit.running.run, cfkit.methods.catalog, cfkit.scoring.evaluation; "
             "print('torchmetrics' in sys.modules); "
             "import torch; from cfkit.zoo.feature_space import fid_from_features; "
             "fid_from_features(torch.randn(8, 4), torch.randn(8, 4)); print('torchmetrics' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "True"]
