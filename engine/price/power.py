"""What a design can detect: the minimum detectable difference (MDD) in accepted@1 of each
comparison the spec implies, for the paired design the result pages use.

The pages compare two units on the same problems, seed by seed, with a bootstrap that draws
seeds and then problems (shared by the seeds): `engine.report.stats.paired_delta`. Its
interval's standard error, derived for that two-stage draw (and checked against it by
simulation in tests/price/test_power.py), is

    SE² = (S − 1)/S² · (seed_var + w/N) + (2S − 1)/S² · w/N,
    w   = 2·p·(1 − p)·(1 − ρ) · (1 + (n − 1)·ρ_w) / n

with S seeds, N problems, n samples per problem, p the control's accepted rate, ρ the
correlation of one problem's outcome under the two models, ρ_w the correlation of one
problem's samples under one model, and seed_var = 2·seed_sd² when both sides are trained
per seed (seed_sd² when the control is one unseeded run, the base evaluation). Then
MDD = (z₁₋α/₂ + z_power)·SE. With one seed the pages cannot see seed-to-seed variation at
all, and neither does this. The priors come from registry/hardware.yaml (`power:`);
`from_matrices` estimates them from finished runs instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Optional, Sequence

from pydantic import BaseModel

from engine.price.profiles import PowerPrior
from engine.price.shapes import StudyShape

_NORMAL = NormalDist()


def mdd(*, problems: int, samples: int, seeds: int, accepted: float, seed_sd: float, pair_correlation: float,
        sample_correlation: float, alpha: float = 0.05, power: float = 0.8, control_seeded: bool = True) -> float:
    p = min(max(accepted, 1e-3), 1 - 1e-3)
    n = max(samples, 1)
    within = 2 * p * (1 - p) * (1 - pair_correlation) * (1 + (n - 1) * sample_correlation) / n
    seed_var = (2 if control_seeded else 1) * seed_sd ** 2
    s, per_problem = max(seeds, 1), within / max(problems, 1)
    se = math.sqrt((s - 1) / s ** 2 * (seed_var + per_problem) + (2 * s - 1) / s ** 2 * per_problem)
    return (_NORMAL.inv_cdf(1 - alpha / 2) + _NORMAL.inv_cdf(power)) * se


class Comparison(BaseModel):
    kind: str  # "parent" (a phase against the one it starts from) | "ablation" (a variant against its phase)
    unit: str
    control: str
    dataset: str
    problems: int
    samples: int
    seeds: int
    mdd: float


def comparisons(study: StudyShape, prior: PowerPrior) -> list[Comparison]:
    """Every comparison the result pages will make, with its MDD under the prior."""
    units: dict[str, dict] = {}
    parent_unit: dict[str, str] = {}
    by_id = study.by_id()
    for run in study.runs:
        if run.kind == "eval":
            target = by_id.get(run.evaluates) if run.evaluates else None
            unit = target.unit if target else run.unit
            entry = units.setdefault(unit, {"datasets": {}, "seeds": set()})
            protocol = run.protocol("evaluate")
            for name in run.datasets("evaluate"):
                entry["datasets"][name] = int(protocol.get("n") or 1)
            if run.seed is not None:
                entry["seeds"].add(run.seed)
        else:
            parent = by_id.get(run.parents[0]) if run.parents else None
            parent_unit.setdefault(run.unit, parent.unit if parent else "base")
    out: list[Comparison] = []

    def add(kind: str, unit: str, control: str) -> None:
        ours, theirs = units.get(unit), units.get(control)
        if not ours or not theirs:
            return
        seeds = len(ours["seeds"] & theirs["seeds"]) or len(ours["seeds"]) or 1
        for name, n in ours["datasets"].items():
            if name not in theirs["datasets"]:
                continue
            out.append(Comparison(kind=kind, unit=unit, control=control, dataset=name,
                                  problems=study.sizes.get(name, 0), samples=n, seeds=seeds,
                                  mdd=mdd(problems=study.sizes.get(name, 0), samples=n, seeds=seeds,
                                          accepted=prior.accepted, seed_sd=prior.seed_sd,
                                          pair_correlation=prior.pair_correlation,
                                          sample_correlation=prior.sample_correlation, alpha=prior.alpha,
                                          power=prior.power, control_seeded=bool(theirs["seeds"]))))

    for unit, parent in parent_unit.items():
        if "/" not in unit:
            add("parent", unit, parent)
    for unit in parent_unit:
        if "/" in unit:
            add("ablation", unit, unit.split("/")[0])
    return out


def undetectable(found: Sequence[Comparison], min_effect: Optional[float]) -> list[str]:
    """Warnings for declared ablations that cannot see a difference of `min_effect`."""
    if not min_effect:
        return []
    return [f"{c.unit} vs {c.control} on {c.dataset}: the smallest difference in accepted@1 this design detects "
            f"(80 % power, 5 % two-sided) is {c.mdd:.3f}, above detect.min_effect {min_effect:g} "
            f"({c.problems} problems × {c.samples} sample(s) × {c.seeds} seed(s)); add seeds or problems, "
            "or raise detect.min_effect"
            for c in found if c.kind == "ablation" and c.mdd > min_effect]


@dataclass(frozen=True)
class Observed:
    accepted: float
    pair_correlation: float
    seed_sd: Optional[float]  # None with fewer than 3 seeds: too few to estimate


def observed(variant, control) -> Observed:
    """The priors' place-holders estimated from seeds × problems matrices of accepted rates."""
    import numpy as np

    a, b = np.asarray(variant, dtype=float), np.asarray(control, dtype=float)
    rho = 0.0
    if a.std() > 0 and b.std() > 0:
        rho = float(np.corrcoef(a.ravel(), b.ravel())[0, 1])
    seed_sd = float(np.std(a.mean(axis=1), ddof=1)) if a.shape[0] >= 3 else None
    return Observed(accepted=float(b.mean()), pair_correlation=max(0.0, min(rho, 0.99)), seed_sd=seed_sd)


def from_matrices(variant, control, prior: PowerPrior, *, samples: int = 1, control_seeded: bool = True) -> float:
    """MDD of a finished comparison: its own accepted rate and pairing, the prior where data is too thin."""
    seen = observed(variant, control)
    seeds, problems = len(variant), len(variant[0]) if len(variant) else 0
    return mdd(problems=problems, samples=samples, seeds=seeds, accepted=seen.accepted,
               seed_sd=seen.seed_sd if seen.seed_sd is not None else prior.seed_sd,
               pair_correlation=seen.pair_correlation, sample_correlation=prior.sample_correlation,
               alpha=prior.alpha, power=prior.power, control_seeded=control_seeded)
