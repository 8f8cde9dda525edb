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
from typing import Any, Mapping, Optional, Sequence

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


def from_unit(spec: Mapping[str, Any], unit: str) -> Optional[str]:
    """The control of a unit's comparison with what it starts from, as the pages make it: a variant's
    own `from:` when it declares one (matrix.yaml's dpo_grpo is GRPO from dpo, not from grpo's sft),
    else its phase's; a variant named in `from:` is its phase/variant unit. Never the run a flywheel
    harvests: that is a second parent, not the model it starts from. None: no `from:` declared (the
    pages compare such a phase with nothing). `spec` is the spec as data (its `phases` and `variants`)."""
    phase, _, variant = unit.partition("/")
    variants = spec.get("variants") or {}
    declared = (variants.get(variant) or {}) if variant else {}
    parent = declared.get("from") or ((spec.get("phases") or {}).get(phase) or {}).get("from")
    if parent in variants:  # a variant's unit is phase/variant, as its cells are keyed
        return f"{(variants[parent] or {}).get('phase')}/{parent}"
    return parent


def controls(spec: Mapping[str, Any], unit: str) -> list[tuple[str, str]]:
    """(kind, control) of every comparison the pages make of `unit`: a variant against its phase
    ("ablation"), and any unit against the one it starts from ("parent", `from_unit`)."""
    out = [("ablation", unit.split("/")[0])] if "/" in unit else []
    parent = from_unit(spec, unit)
    return out + ([("parent", parent)] if parent else [])


def spec_data(spec: Any) -> dict[str, Any]:
    """A validated `Spec`'s phases and variants as the data `from_unit` reads (the pages read the
    recorded spec's YAML, which is the same data)."""
    return spec.model_dump(mode="json", by_alias=True, include={"phases", "variants"})


def comparisons(study: StudyShape, prior: PowerPrior, spec: Mapping[str, Any]) -> list[Comparison]:
    """Every comparison the result pages will make (`controls`), with its MDD under the prior."""
    units: dict[str, dict] = {}
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

    for unit in units:
        for kind, control in controls(spec, unit):
            add(kind, unit, control)
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
