"""rlvr-run: declarative experiment runner for RLVR post-training of code models.

Library first: every stage is a plain function importable from here; `engine.cli` is a
thin layer on top. Names load on first use (PEP 562), so importing `engine` stays cheap:
the sandbox worker imports this package under `python -I -S` and must not pull in
pydantic, torch or the rest.

    import engine
    validated = engine.validate_spec("specs/matrix.yaml")
    the_plan = engine.plan(validated)
    outcome = engine.run_spec("specs/matrix.yaml", dry_run=True)
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

# public name → "module:attribute"
_PUBLIC = {
    "load_spec": "engine.spec.load:load_spec",
    "validate_spec": "engine.isolation.validate:validate_spec",
    "preflight": "engine.runs.preflight:preflight",
    "plan": "engine.plan.expand:plan",
    "materialize": "engine.runs.materialize:materialize",
    "run_spec": "engine.runs.pipeline:run_spec",
    "collect_status": "engine.runs.status:collect_status",
    "Judge": "engine.judge.api:Judge",
    "JudgeConfig": "engine.judge.config:JudgeConfig",
    "load_dataset": "engine.data.loaders:load_dataset_problems",
    "load_reference": "engine.data.loaders:load_reference",
    "open_lineage": "engine.runs.lineage:open_lineage",
}
__all__ = ["__version__", *_PUBLIC]


def __getattr__(name: str) -> Any:
    target = _PUBLIC.get(name)
    if target is None:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    from engine.resources import load_object  # the one lazy-registry loader (stdlib only)

    value = load_object(target)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
