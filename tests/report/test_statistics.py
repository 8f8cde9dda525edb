"""One statistic per cell: the point estimate and its interval from the same metric on the same
records (of the full keys), a variant compared with the unit it starts from, and the bootstrap
against scipy's on the same data."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from scipy import stats

from engine.evaluate.records import Keys, SampleRecord, append
from engine.evaluate.eval_run import METRICS_FILE, DatasetMetrics, EvalOutput
from engine.report.ablation import parent_of
from engine.report.main_table import cell_estimate, per_problem
from engine.report.stats import estimate, paired_delta
from engine.report.study import Cell, Context, Study
from engine.runs.lineage import RunRecord, SpecRecord

KEYS = Keys(model="m", protocol="p", idlist="i", decoding_seed=11)


def _record(problem: str, sample: int, accepted: bool, keys: Keys = KEYS) -> SampleRecord:
    return SampleRecord(dataset="d", problem_id=problem, sample=sample, keys=keys, prompt_tokens=1,
                        completion_tokens=1, finish_reason="stop", latency_s=0.0, seed=keys.decoding_seed,
                        completion="", verdict="ACCEPTED" if accepted else "WRONG_ANSWER", accepted=accepted,
                        pass_ratio=float(accepted), passed=int(accepted), total=1, format_ok=True, judge_s=0.0,
                        judge_version="j")


def _cell(tmp_path: Path, seed: int, records: list[SampleRecord], metrics: dict[str, float]) -> Cell:
    run_dir = tmp_path / f"run{seed}"
    append(run_dir / "outputs" / "samples" / "d.jsonl", records)
    summary = DatasetMetrics(dataset="d", protocol="passk", protocol_sha256="p", idlist_sha256="i", judge_version="j",
                             seed=seed, expected_samples=12, model="m", decoding_seed=11, metrics=metrics)
    (run_dir / "outputs" / METRICS_FILE).write_text(EvalOutput(run_id="r", datasets=[summary]).model_dump_json())
    run = RunRecord(id=f"r{seed}", spec_name="s", phase="grpo", seed=seed, kind="eval", run_dir=str(run_dir))
    return Cell(run=run, dataset="d", context=Context("p", "i", "j"), metrics=metrics, protocol="passk")


def test_the_point_estimate_and_its_interval_are_one_metric_on_one_set_of_records(tmp_path):
    # n = 3 per problem: every first sample accepted, the other two not (accepted@1 = 1, mean@n = 1/3)
    records = [_record(f"p{i}", s, s == 0) for i in range(4) for s in range(3)]
    stray = [_record("p0", s, False, Keys(model="other", protocol="p", idlist="i", decoding_seed=11)) for s in range(3)]
    cell = _cell(tmp_path, 1, records + stray, {"accepted@1": 1.0, "mean@n": 1 / 3})
    first = cell_estimate([cell], "accepted@1")
    assert first.mean == 1.0 and first.low == first.high == 1.0  # the interval of accepted@1, not of mean@n
    mean = cell_estimate([cell], "mean@n")
    assert abs(mean.mean - 1 / 3) < 1e-12 and mean.low <= mean.mean <= mean.high
    assert per_problem([cell]).values.shape == (1, 4)  # the other model's records are not this cell's


def test_the_bootstrap_agrees_with_scipy_on_the_same_data():
    rng = np.random.default_rng(3)
    values = rng.random(200) < 0.4
    ours = estimate([float(values.mean())], values[None, :].astype(float))
    theirs = stats.bootstrap((values.astype(float),), np.mean, n_resamples=20000, method="percentile",
                             random_state=np.random.default_rng(1)).confidence_interval
    assert abs(ours.low - theirs.low) < 0.015 and abs(ours.high - theirs.high) < 0.015
    a, b = (rng.random(150) < 0.55).astype(float), (rng.random(150) < 0.45).astype(float)
    delta = paired_delta(a[None, :], b[None, :])
    paired = stats.bootstrap((a, b), lambda x, y: np.mean(x - y), paired=True, vectorized=False, n_resamples=5000,
                             method="percentile", random_state=np.random.default_rng(2)).confidence_interval
    assert abs(delta.low - paired.low) < 0.02 and abs(delta.high - paired.high) < 0.02


def test_a_variant_with_its_own_from_is_compared_with_that_parent():
    spec = {"phases": {"sft": {"from": "base"}, "dpo": {"from": "sft"}, "grpo": {"from": "sft"}},
            "variants": {"dpo_grpo": {"phase": "grpo", "from": "dpo"}, "grpo_sparse": {"phase": "grpo"}}}
    record = SpecRecord(name="s", path="s.yaml", sha256="0" * 64, text=json.dumps(spec))  # JSON is YAML
    study = Study(name="s", spec=record, runs=[], configs={}, metrics={}, events=[], waivers=[], datasets=[],
                  artifacts={})
    assert parent_of(study, "grpo/dpo_grpo") == "dpo"
    assert parent_of(study, "grpo/grpo_sparse") == "sft" and parent_of(study, "grpo") == "sft"
    spec["variants"]["fly"] = {"phase": "dpo", "from": "grpo_sparse"}  # from a variant: its unit, as cells are keyed
    study.spec = record.model_copy(update={"text": json.dumps(spec)})
    assert parent_of(study, "dpo/fly") == "grpo/grpo_sparse"


def test_sampled_evaluations_of_training_seeds_draw_independent_decoding_seeds():
    from engine.evaluate.eval_run import decoding_of

    sampled = {"temperature": 0.8, "n": 4, "seed": 7}
    seeds = {decoding_of(sampled, s).seed for s in (1, 2, 3)}
    assert len(seeds) == 3 and decoding_of(sampled, 1).seed == decoding_of(sampled, 1).seed  # a variant's seed 1 = its control's
    assert decoding_of({"temperature": 0.0, "seed": 7}, 2).seed == 7  # greedy: no randomness to draw
    assert decoding_of(sampled, None).seed == 7  # an unseeded run keeps the protocol's
