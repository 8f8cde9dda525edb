"""The dependencies pyproject.toml declares are the ones engine/ imports: nothing imported
without being declared (it would be missing from a fresh install the day its carrier drops
it), nothing declared that nothing imports (a needless install)."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Imported, and installed through a declared dependency that pins them: verl brings its config
# and model stack (its pins must win), the extras bring theirs.
THROUGH = {"hydra-core": "verl", "omegaconf": "verl", "transformers": "verl", "tokenizers": "verl",
           "safetensors": "verl", "huggingface-hub": "datasets / transformers", "pydantic-core": "pydantic",
           "torch": "the cpu extra / verl", "trl": "the trl extra", "vllm": "the gpu extra",
           "sentence-transformers": "the semantic extra", "ray": "verl (its pin must win)",
           "wandb": "verl", "accelerate": "the trl extra", "mlflow": "the mlflow extra",
           "mlflow-skinny": "the mlflow extra", "mlflow-tracing": "the mlflow extra"}
# Declared, never imported by name: what they are for.
NOT_IMPORTED = {"verl": "found with find_spec and run by the launch scripts",
                "packaging": "a resolver pin (<26)"}


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[ ;]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {_name(r) for r in project["dependencies"]}


def imported() -> set[str]:
    modules: set[str] = set()
    for path in (ROOT / "engine").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                modules |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules.add(node.module.split(".")[0])
    third = {m for m in modules if m not in sys.stdlib_module_names and m != "engine"}
    distributions = packages_distributions()
    known = {"vllm": ["vllm"], "tenacity": ["tenacity"]}  # not installed everywhere tests run
    return {d.lower().replace("_", "-") for m in third for d in distributions.get(m, known.get(m, [m]))}


def test_every_imported_distribution_is_declared():
    missing = imported() - declared() - set(THROUGH)
    assert not missing, f"imported by engine/ but not declared in pyproject.toml: {sorted(missing)}"


def test_every_declared_dependency_is_imported():
    unused = declared() - imported() - set(NOT_IMPORTED)
    assert not unused, f"declared in pyproject.toml but never imported by engine/: {sorted(unused)}"
