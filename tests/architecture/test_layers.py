"""The package layers: each imports only earlier ones, and no module cycle exists.

Every import counts (top level, inside a function, under TYPE_CHECKING), read from the
source with `ast`, so no import can hide a dependency from this test.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ENGINE = Path(__file__).resolve().parents[2] / "engine"

# Lower index = earlier layer. A module may import its own layer and earlier ones.
LAYERS = [
    {"errors", "files", "problem", "records", "resources", "retry", "tinymodel"},
    {"spec"},
    {"data", "prompts"},
    {"isolation"},
    {"judge", "reward"},
    {"verify"},
    {"plan"},
    {"repair"},
    {"evaluate"},
    {"train"},
    {"runs"},
    {"price"},
    {"report"},
    {"cli"},
]
RANK = {name: i for i, names in enumerate(LAYERS) for name in names}
# What the sandbox worker (run as `python -I -S`) may load besides the standard library.
WORKER_ENGINE = {"engine", "engine.judge", "engine.judge.plain", "engine.judge.outcome", "engine.judge.checkers",
                 "engine.judge.compare"}


def module_name(path: Path) -> str:
    parts = path.relative_to(ENGINE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def engine_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)  # `from engine.x import module`
    modules = {module_name(p) for p in ENGINE.rglob("*.py")}
    return {name for name in found if name in modules and name != module_name(path)}


def layer(module: str) -> int | None:
    parts = module.split(".")
    return RANK.get(parts[1]) if len(parts) > 1 else None


def graph() -> dict[str, set[str]]:
    return {module_name(p): engine_imports(p) for p in ENGINE.rglob("*.py") if "__pycache__" not in p.parts}


def test_every_package_has_a_layer():
    assert {m.split(".")[1] for m in graph() if "." in m} <= set(RANK) | {"__main__"}


def test_each_module_imports_only_its_layer_and_earlier_ones():
    wrong = [f"{m} (layer {layer(m)}) imports {dep} (layer {layer(dep)})"
             for m, deps in graph().items() if layer(m) is not None
             for dep in deps if layer(dep) is not None and layer(dep) > layer(m)]
    assert not wrong, "\n".join(wrong)


def test_no_import_cycles():
    edges = graph()
    cycles = [m for m in edges if _reaches(edges, m, m)]
    assert not cycles, f"modules on an import cycle: {sorted(cycles)}"


def _reaches(edges: dict[str, set[str]], start: str, goal: str) -> bool:
    stack, seen = list(edges.get(start, ())), set()
    while stack:
        here = stack.pop()
        if here == goal:
            return True
        if here not in seen:
            seen.add(here)
            stack.extend(edges.get(here, ()))
    return False


def test_only_the_cli_imports_rich():
    users = sorted(m for p in ENGINE.rglob("*.py") if "__pycache__" not in p.parts
                   for m in [module_name(p)] if not m.startswith("engine.cli")
                   if any(isinstance(n, (ast.Import, ast.ImportFrom)) and "rich" in _names(n)
                          for n in ast.walk(ast.parse(p.read_text(encoding="utf-8")))))
    assert not users


def _names(node: ast.Import | ast.ImportFrom) -> set[str]:
    if isinstance(node, ast.ImportFrom):
        return {(node.module or "").split(".")[0]}
    return {a.name.split(".")[0] for a in node.names}


@pytest.mark.parametrize("entry", ["engine.judge.local.worker"])
def test_the_sandbox_worker_loads_only_the_standard_library(entry):
    code = (f"import sys; sys.path.insert(0, {str(ENGINE.parent)!r}); import {entry}; "
            "print('\\n'.join(sorted(sys.modules)))")
    loaded = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True,
                            check=True).stdout.split()
    engine = {m for m in loaded if m == "engine" or m.startswith("engine.")}
    foreign = {m.split(".")[0] for m in loaded if not m.startswith("engine")} - set(sys.stdlib_module_names) - {"__main__"}
    assert not foreign, f"the worker loads non-standard modules: {sorted(foreign)}"
    local = {m for m in engine if m.startswith("engine.judge.local")}
    assert engine - local <= WORKER_ENGINE, sorted(engine - local - WORKER_ENGINE)
    assert "engine.judge.local.pool" not in local
