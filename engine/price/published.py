"""What published runs measured, set beside the forecast of the same shape: a recipe's dry run prints
its published figures with the forecast and their ratio (`registry/published.yaml`), and
bench/forecast_vs_published.py holds every published anchor against the model.

Nothing is fitted here: the published figures only check the forecast.
"""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path
from typing import Optional

from pydantic import BaseModel, Field

from engine.price.forecast import DRAWS, RNG_SEED, context
from engine.price.kinds import run_cost
from engine.price.profiles import NAMES, Profile
from engine.price.shapes import RunShape, StudyShape
from engine.spec.base import StrictModel
from engine.spec.load import load_model_file

PUBLISHED_FILE = "published.yaml"
STEP_PARTS = ("generate", "prefill", "judge", "logprob", "update", "overhead")


class PublishedStep(StrictModel):
    phase: str
    step_s: float = Field(gt=0)  # seconds per rollout step
    band: Optional[tuple[float, float]] = None  # the published range, when one is given
    gen_s: Optional[float] = Field(default=None, gt=0)  # its rollout's seconds, when published
    profile: str  # the GPUs it ran on
    gpus: int = Field(gt=0)
    source: str


class PublishedRun(StrictModel):
    source: str
    steps: list[PublishedStep] = Field(default_factory=list)
    gpu_hours: Optional[float] = Field(default=None, gt=0)  # the whole run, where its steps are published
    gpu_hours_profile: Optional[str] = None


class PublishedFile(StrictModel):
    recipes: dict[str, PublishedRun]


class PublishedCheck(BaseModel):
    """One published figure beside the forecast of the same shape (P50 and its P10-P90 band)."""

    what: str  # e.g. "grpo16k s/step on 32 h100"
    published: float
    band: Optional[tuple[float, float]] = None
    p10: float
    p50: float
    p90: float
    source: str

    @property
    def ratio(self) -> float:
        return self.p50 / self.published

    @property
    def inside(self) -> bool:
        return self.p10 <= self.published <= self.p90


def load_published(registry: Path) -> dict[str, PublishedRun]:
    path = Path(registry) / PUBLISHED_FILE
    return load_model_file(path, PublishedFile)[0].recipes if path.is_file() else {}


def quantiles(values: list[float]) -> tuple[float, float, float]:
    """P10, the median draw (draw 0: every constant at its median) and P90."""
    ordered = sorted(values)
    at = lambda q: ordered[round(q * (len(ordered) - 1))]  # noqa: E731
    return at(0.1), values[0], at(0.9)


def step_draws(study: StudyShape, profile: Profile, run: RunShape, draws: int = DRAWS) -> list[dict[str, float]]:
    """One rollout step's parts (seconds) of `run` over the forecast's draws (draw 0: the median)."""
    rng = random.Random(RNG_SEED)
    out = []
    for draw in range(max(draws, 1)):
        z = {name: (rng.gauss(0.0, 1.0) if draw else 0.0) for name in NAMES}
        cost = run_cost(context(study, profile, profile.draw(z)), run)
        steps = max(cost.steps or 1, 1)
        out.append({p: cost.parts.get(p, 0.0) / steps for p in STEP_PARTS})
    return out


def trained_run(study: StudyShape, phase: str, gpus: Optional[int] = None) -> RunShape:
    run = next(r for r in study.runs if r.unit == phase and r.kind in ("grpo", "repair"))
    return replace(run, gpus=gpus) if gpus else run


def checks(study: StudyShape, published: PublishedRun, profile_for, draws: int = DRAWS) -> list[PublishedCheck]:
    """Each published step (and rollout) time of a recipe beside the forecast of that phase on the
    GPUs it was published on; `profile_for(name)` loads a hardware profile."""
    out = []
    for pub in published.steps:
        profile = profile_for(pub.profile)
        parts = step_draws(study, profile, trained_run(study, pub.phase, pub.gpus), draws)
        where = f"on {pub.gpus} {pub.profile}"
        lo, mid, hi = quantiles([sum(p.values()) for p in parts])
        out.append(PublishedCheck(what=f"{pub.phase} s/step {where}", published=pub.step_s, band=pub.band,
                                  p10=lo, p50=mid, p90=hi, source=pub.source))
        if pub.gen_s:
            lo, mid, hi = quantiles([p["generate"] + p["prefill"] for p in parts])
            out.append(PublishedCheck(what=f"{pub.phase} rollout s {where}", published=pub.gen_s,
                                      p10=lo, p50=mid, p90=hi, source=pub.source))
    return out
