"""The verl launch script of a run without a GPU is the cluster's, but for the rollout's name and
the modules verl imports (its plug-in hook): the diff is a golden file, reviewed like the scripts."""

from __future__ import annotations

import dataclasses
import difflib
import os
from pathlib import Path

import pytest

from engine.isolation.validate import validate_spec
from engine.plan.expand import plan
from engine.plan.model import Run
from engine.runs.render import launch_context, render_launch
from engine.spec.model import PhaseKind
from engine.train import verl_compose, verl_overrides

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "tests" / "runs" / "golden" / "spec.yaml"
GOLDEN = Path(__file__).resolve().parent / "golden" / "verl_cpu.diff"


def _on(run: Run, gpus: int) -> Run:
    return run.model_copy(update={"resources": run.resources.model_copy(update={"gpus": gpus})})


def _scripts() -> dict[str, tuple[str, str]]:
    validated = validate_spec(SPEC, content=False)
    the_plan = plan(validated)
    out = {}
    for kind in (PhaseKind.sft, PhaseKind.grpo, PhaseKind.repair):
        run = next(r for r in the_plan.runs if r.kind == kind and r.trainer == "verl")
        ctx = launch_context(run, the_plan, Path("/runs/golden"), validated.spec.base_model)
        ctx = dataclasses.replace(ctx, engine_root=Path("/opt/rlvr-run/engine"))
        out[kind.value] = (render_launch(_on(run, 1), ctx), render_launch(_on(run, 0), ctx))
    return out


def _diff(scripts: dict[str, tuple[str, str]]) -> str:
    lines: list[str] = []
    for kind, (cluster, cpu) in scripts.items():
        lines += difflib.unified_diff(cluster.splitlines(keepends=True), cpu.splitlines(keepends=True),
                                      f"{kind} on one GPU", f"{kind} on a CPU", n=0)
    return "".join(lines)


def test_the_cpu_script_differs_from_the_clusters_in_rollout_name_and_plugin_modules_only() -> None:
    text = _diff(_scripts())
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text(), "the CPU/cluster diff changed; review and regenerate with UPDATE_GOLDEN=1"
    changed = [line for line in text.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    assert changed and all("actor_rollout_ref.rollout.name=" in line or "VERL_USE_EXTERNAL_MODULES" in line
                           or line.lstrip("+-").startswith("# ") for line in changed), changed


@pytest.mark.parametrize("kind", ["grpo", "repair"])
def test_the_cpu_rollout_name_composes_against_verls_config(kind: str) -> None:
    """`validate` composes the CPU script's overrides against verl's Hydra config as the cluster's."""
    validated = validate_spec(SPEC, content=False)
    run = _on(next(r for r in plan(validated).runs if r.kind.value == kind and r.trainer == "verl"), 0)
    lines = verl_overrides.verl_overrides(run, verl_overrides.PLACEHOLDER_PATHS)
    assert f"actor_rollout_ref.rollout.name={verl_overrides.CPU_ROLLOUT}" in lines
    assert verl_compose.check_overrides(lines, verl_overrides.CONFIG_NAMES[run.kind]) == []
