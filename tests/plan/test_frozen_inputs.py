"""What a run consumes is frozen into it: the registry entries it uses (dataset sources, prompt
templates) are in its config and id, the run reads them from there, and a dataset whose
content changed after a run first loaded it is refused."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from engine.errors import UserError
from engine.isolation.validate import validate_spec
from engine.plan.expand import plan
from engine.plan.frozen import FrozenDataset, load_frozen_dataset, pin_content
from engine.spec.registry import load_registry

REPO = Path(__file__).resolve().parents[2]
GOLDEN_SPEC = REPO / "tests" / "runs" / "golden" / "spec.yaml"


def _ids(spec: Path, registry) -> dict[str, str]:
    return {r.label: r.id for r in plan(validate_spec(spec, content=False, registry=registry)).runs}


def _edited(registry, **changes):
    return dataclasses.replace(registry, **changes)


def test_a_changed_prompt_template_or_source_entry_makes_new_runs(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(GOLDEN_SPEC.read_text())
    registry = load_registry()
    before = _ids(spec, registry)
    default = next(n for n, e in registry.prompts.items() if "stdio/chat" in e.default_for)
    entry = registry.prompts[default]
    prompts = {**registry.prompts, default: entry.model_copy(update={"template": entry.template + "\nBe brief."})}
    after = _ids(spec, _edited(registry, prompts=prompts))
    assert set(after) == set(before) and all(after[k] != before[k] for k in before)  # every run renders prompts
    source = registry.datasets["codecontests"]
    sources = {**registry.datasets, "codecontests": source.model_copy(update={"id_field": "other"})}
    moved = _ids(spec, _edited(registry, datasets=sources))
    assert all(moved[k] != before[k] for k in before if k.startswith(("sft", "grpo")))


def test_a_run_renders_the_prompts_it_was_planned_with(tmp_path):
    from engine.plan.frozen import run_registry
    from engine.runs.materialize import materialize
    from engine.runs.preflight import preflight

    project = tmp_path / "project"
    (project / "registry").mkdir(parents=True)
    for f in (REPO / "registry").glob("*.yaml"):
        (project / "registry" / f.name).write_text(f.read_text())
    spec = project / "spec.yaml"
    spec.write_text(GOLDEN_SPEC.read_text())
    checked = preflight(spec, content=False)
    run_dir = materialize(checked.plan, checked.validated, tmp_path / "runs")[0].path
    prompts = project / "registry" / "prompts.yaml"
    frozen = run_registry(run_dir).prompts
    prompts.write_text(prompts.read_text().replace("description:", "description: edited", 1))
    assert run_registry(run_dir).prompts == frozen  # the edit is a new plan's business, not this run's


def test_content_that_changed_after_a_run_started_is_refused(tmp_path):
    pin_content(tmp_path, "toy_valid", "a" * 64)
    pin_content(tmp_path, "toy_valid", "a" * 64)  # the same content resumes
    with pytest.raises(UserError, match=r"dataset `toy_valid`: its problems are not those this run started with"):
        pin_content(tmp_path, "toy_valid", "b" * 64)
    entry = FrozenDataset(source="toy", split="valid", role="valid")
    registry = load_registry()
    loaded = load_frozen_dataset("toy", entry, registry, run_dir=tmp_path / "run")
    assert load_frozen_dataset("toy", entry, registry, run_dir=tmp_path / "run").fingerprint == loaded.fingerprint
