"""The minimum detectable difference against a simulation: synthetic paired studies with a known
effect, judged by the pages' own paired bootstrap (engine.report.stats)."""

from __future__ import annotations

import numpy as np
import pytest

from engine.price.power import comparisons, from_matrices, mdd, undetectable
from engine.price.profiles import PowerPrior
from engine.price.shapes import RunShape, StudyShape
from engine.report import stats

P, RHO = 0.3, 0.6


def synthetic(rng, seeds: int, problems: int, delta: float, seed_sd: float) -> tuple[np.ndarray, np.ndarray]:
    """seeds × problems outcomes of a variant and its control: each seed's models shifted by
    N(0, seed_sd²), one problem's two outcomes correlated by RHO."""
    a, b = np.zeros((seeds, problems)), np.zeros((seeds, problems))
    for s in range(seeds):
        pa = float(np.clip(P + delta + rng.normal(0, seed_sd), 0.01, 0.99))
        pb = float(np.clip(P + rng.normal(0, seed_sd), 0.01, 0.99))
        both = pa * pb + RHO * np.sqrt(pa * (1 - pa) * pb * (1 - pb))
        both = min(max(both, pa + pb - 1, 0.0), pa, pb)
        cell = rng.choice(4, size=problems, p=[both, pa - both, pb - both, 1 - pa - pb + both])
        a[s], b[s] = (cell == 0) | (cell == 1), (cell == 0) | (cell == 2)
    return a, b


def rejections(rng, seeds: int, problems: int, delta: float, seed_sd: float, studies: int) -> float:
    hits = 0
    for _ in range(studies):
        a, b = synthetic(rng, seeds, problems, delta, seed_sd)
        d = stats.paired_delta(a, b)
        hits += d.low > 0 or d.high < 0
    return hits / studies


@pytest.mark.parametrize("seeds,problems,seed_sd", [(2, 117, 0.015), (4, 200, 0.015)])
def test_an_effect_of_the_mdd_is_found_four_times_in_five(monkeypatch, seeds, problems, seed_sd):
    monkeypatch.setattr(stats, "REPS", 500)  # the interval's width, not its third digit
    rng = np.random.default_rng(7)
    effect = mdd(problems=problems, samples=1, seeds=seeds, accepted=P, seed_sd=seed_sd, pair_correlation=RHO,
                 sample_correlation=0.5)
    power = rejections(rng, seeds, problems, effect, seed_sd, studies=150)
    assert 0.68 <= power <= 0.92, f"power at the MDD {effect:.3f}: {power:.2f}"
    assert rejections(rng, seeds, problems, 0.0, seed_sd, studies=80) <= 0.12


def test_more_seeds_and_problems_detect_smaller_differences():
    base = dict(samples=1, accepted=P, seed_sd=0.015, pair_correlation=RHO, sample_correlation=0.5)
    assert mdd(problems=400, seeds=2, **base) < mdd(problems=100, seeds=2, **base)
    assert mdd(problems=100, seeds=5, **base) < mdd(problems=100, seeds=2, **base)
    assert mdd(problems=100, seeds=2, **{**base, "samples": 10}) < mdd(problems=100, seeds=2, **base)


def test_finished_runs_give_their_own_mdd():
    rng = np.random.default_rng(3)
    a, b = synthetic(rng, 2, 150, 0.05, 0.01)
    ours = from_matrices(a, b, PowerPrior())
    assert 0.02 < ours < 0.2


def _run(id_, kind, phase, variant=None, seed=1, parents=(), evaluates=None, datasets=()):
    config = {"datasets": {d: {"uses": ["evaluate"]} for d in datasets}, "protocols": {"evaluate": {"n": 1}}}
    return RunShape(id=id_, label=id_, kind=kind, phase=phase, variant=variant, seed=seed, parents=tuple(parents),
                    evaluates=evaluates, gpus=0, cpus=1, config=config)


def test_the_spec_implies_a_comparison_per_phase_and_per_variant_and_warns_below_its_threshold():
    runs = [_run("b", "eval", "base", seed=None, datasets=["valid"]),
            _run("s", "sft", "sft"), _run("se", "eval", "sft", parents=["s"], evaluates="s", datasets=["valid"]),
            _run("v", "sft", "sft", variant="lr"),
            _run("ve", "eval", "sft", variant="lr", parents=["v"], evaluates="v", datasets=["valid"])]
    study = StudyShape(name="t", runs=runs, sizes={"valid": 50}, sources={}, params_b=None)
    spec = {"phases": {"base": {"kind": "eval"}, "sft": {"kind": "sft", "from": "base"}},
            "variants": {"lr": {"phase": "sft"}}}
    found = comparisons(study, PowerPrior(), spec)
    assert {(c.kind, c.unit, c.control) for c in found} == {
        ("parent", "sft", "base"), ("ablation", "sft/lr", "sft"), ("parent", "sft/lr", "base")}
    assert len(undetectable(found, 0.01)) == 1  # the ablation only: parent comparisons are not declared ablations
    assert undetectable(found, 0.9) == []
