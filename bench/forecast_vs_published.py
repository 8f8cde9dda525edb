"""The dry run's forecast of each recipe in specs/recipes/ against what its authors published.

    .venv/bin/python bench/forecast_vs_published.py            # the table (docs/cost.md quotes it)
    .venv/bin/python bench/forecast_vs_published.py --scaling  # also step time on 32 -> 256 GPUs

For each trained phase of a recipe: the forecast step time (P50 and its P10-P90 band over the
forecast's draws) against the published seconds per step, and the study's GPU-hours against the
published total where the published run's steps are known. The published figures are quoted with
their sources in each recipe's header; nothing here is fitted to them (docs/cost.md, "Checked
against published runs"). Datasets are not loaded: sizes come from the registry, and the recipes
declare their steps.
"""

from __future__ import annotations

import argparse
import random
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

from engine.price.forecast import DRAWS, RNG_SEED, context, forecast
from engine.price.kinds import run_cost
from engine.price.profiles import NAMES
from engine.price.shapes import StudyShape, shape_of_plan
from engine.price.study import resolve_profile
from engine.runs.preflight import preflight

RECIPES = Path(__file__).resolve().parents[1] / "specs" / "recipes"
STEP_PARTS = ("generate", "judge", "logprob", "update", "overhead")
GOAL = 0.35  # P50 within ±35 % of the published figure


@dataclass(frozen=True)
class Published:
    recipe: str
    phase: str  # the phase whose step time is published ("" for the whole study)
    step_s: Optional[float] = None  # seconds per step
    step_band: Optional[tuple[float, float]] = None  # the published range, when one is given
    gpu_hours: Optional[float] = None  # only where the published run's steps are known
    source: str = ""


PUBLISHED = [
    Published("deepcoder-14b", "grpo16k", step_s=2000, step_band=(1200, 2500),
              source="rllm scripts/deepcoder/README.md ~2000 s/step; blog 1200-2500 s/step"),
    Published("deepcoder-14b", "grpo32k", step_s=2000, step_band=(1200, 2500),
              source="rllm scripts/deepcoder/README.md ~2000 s/step; blog 1200-2500 s/step"),
]


def study_of(recipe: str) -> tuple[StudyShape, object]:
    checked = preflight(RECIPES / f"{recipe}.yaml", content=False)
    study = shape_of_plan(checked.plan, checked.validated)
    return study, resolve_profile(study, None, checked.validated.registry)


def step_seconds(study: StudyShape, profile, phase: str, gpus: Optional[int] = None,
                 batch: Optional[int] = None) -> list[float]:
    """Seconds per rollout step of `phase`'s first run over the forecast's draws (draw 0: the median),
    on `gpus` and at `batch` prompts per step when given."""
    run = next(r for r in study.runs if r.unit == phase and r.kind in ("grpo", "repair"))
    if gpus is not None:
        run = replace(run, gpus=gpus)
    if batch is not None:
        run = replace(run, config={**run.config, "hparams": {**run.config["hparams"], "train_batch_size": batch}})
    rng = random.Random(RNG_SEED)
    out = []
    for draw in range(DRAWS):
        z = {name: (rng.gauss(0.0, 1.0) if draw else 0.0) for name in NAMES}
        cost = run_cost(context(study, profile, profile.draw(z)), run)
        out.append(sum(cost.parts.get(p, 0.0) for p in STEP_PARTS) / max(cost.steps or 1, 1))
    return out


def band(values: list[float]) -> tuple[float, float, float]:
    ordered = sorted(values)
    at = lambda q: ordered[round(q * (len(ordered) - 1))]  # noqa: E731
    return at(0.1), values[0], at(0.9)


def table() -> list[str]:
    lines = [f"{'recipe / phase':28} {'what':10} {'forecast P50':>12} {'P10-P90':>17} {'published':>14} "
             f"{'error':>7}  in band"]
    for recipe in sorted({p.recipe for p in PUBLISHED}):
        study, profile = study_of(recipe)
        for pub in (p for p in PUBLISHED if p.recipe == recipe):
            lo, mid, hi = band(step_seconds(study, profile, pub.phase))
            error = (mid - pub.step_s) / pub.step_s
            inside = lo <= pub.step_s <= hi
            shown = f"{pub.step_s:,.0f}" + (f" ({pub.step_band[0]:,.0f}-{pub.step_band[1]:,.0f})" if pub.step_band
                                            else "")
            lines.append(f"{recipe + ' / ' + pub.phase:28} {'s/step':10} {mid:12,.0f} {lo:8,.0f}-{hi:<8,.0f} "
                         f"{shown:>14} {error:+7.0%}  {'yes' if inside else 'NO'}"
                         f"{'' if abs(error) <= GOAL else '  (outside ±35 %)'}")
        f = forecast(study, profile)
        hours = f.slot_hours
        total = next((p.gpu_hours for p in PUBLISHED if p.recipe == recipe and p.gpu_hours), None)
        error = f"{(hours.p50 - total) / total:+7.0%}" if total else "      -"
        lines.append(f"{recipe + ' (study)':28} {'GPU-h':10} {hours.p50:12,.0f} {hours.p10:8,.0f}-{hours.p90:<8,.0f} "
                     f"{(f'{total:,.0f}' if total else 'steps n/p'):>14} {error}")
        for run in (r for r in f.runs if r.kind == "grpo" and r.steps):
            lines.append(f"  {run.unit}: median seconds a step by part: "
                         + ", ".join(f"{k} {v / run.steps:,.0f}" for k, v in run.parts.items() if k in STEP_PARTS))
    return lines


def scaling(recipe: str = "deepcoder-14b") -> list[str]:
    """Strong scaling: one step of each stage on 32 -> 256 GPUs (the per-step tables flatten once the
    longest sample bounds the step); and a 4x batch on the same GPUs, against the MLPerf GRPO
    reference's logs (GBS 256 -> 1024 on 256 GB300: 396-466 s -> 844-967 s a step, x2.0-2.1)."""
    study, profile = study_of(recipe)
    lines = [f"strong scaling, {recipe}: GPUs, step s P50 [P10-P90] and speed-up over 32 GPUs, per stage"]
    phases = [r.unit for r in study.runs if r.kind == "grpo"]
    first: dict[str, float] = {}
    for gpus in (32, 64, 128, 256):
        cells = []
        for phase in phases:
            lo, mid, hi = band(step_seconds(study, profile, phase, gpus))
            first.setdefault(phase, mid)
            cells.append(f"{phase} {mid:6,.0f} [{lo:,.0f}-{hi:,.0f}] x{first[phase] / mid:.2f}")
        lines.append(f"  {gpus:4d}  " + "   ".join(cells))
    lines.append("batch x4 on the same GPUs (32 -> 128 prompts a step), step time grows (MLPerf GRPO: x2.0-2.1):")
    for phase in phases:
        small, full = step_seconds(study, profile, phase, batch=32)[0], step_seconds(study, profile, phase)[0]
        lines.append(f"  {phase}: {small:,.0f} s -> {full:,.0f} s, x{full / small:.2f}")
    return lines


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scaling", action="store_true", help="also print step time on 32 -> 256 GPUs")
    args = parser.parse_args(argv)
    for line in table():
        print(line)
    if args.scaling:
        print()
        for line in scaling():
            print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
