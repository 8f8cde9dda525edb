"""A recorded study priced from lineage: the forecast the pages show, forecast against actual,
a profile refitted from finished runs, and the time left while runs are running."""

from __future__ import annotations

import dataclasses
import json
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from engine.price.fit import fit_factors, fitted_entry, write_profile
from engine.price.forecast import forecast
from engine.price.profiles import load_profile
from engine.price.progress import study_eta
from engine.price.shapes import RunShape, StudyShape
from engine.price.study import forecast_records, observed_slots, versus_lineage
from engine.resources import shipped
from engine.runs.lineage import Attempt, PlanRecords, RunRecord, RunState, RunTime, SpecRecord, open_lineage
from tests.report import synthetic

H100 = "h100"


@pytest.fixture(scope="module")
def lineage_path(tmp_path_factory) -> Path:
    return synthetic.build(tmp_path_factory.mktemp("synth"), seeds=2, problems=10)


def test_the_pages_forecast_has_ordered_bands(lineage_path):
    with open_lineage(lineage_path, readonly=True) as lineage:
        records = lineage.runs("synth")
        f = forecast_records("synth", records, lineage.datasets("synth"), lineage.run_times(r.id for r in records),
                             gpu_type=H100, draws=30)
    assert f.slot_hours.p10 <= f.slot_hours.p50 <= f.slot_hours.p90
    assert f.wall_s.p10 <= f.wall_s.p50 <= f.wall_s.p90
    assert f.critical_path and f.critical_path_s.p50 <= f.wall_s.p50 + 1e-6


def test_every_finished_run_stands_beside_its_forecast(lineage_path):
    with open_lineage(lineage_path, readonly=True) as lineage:
        v = versus_lineage(lineage, "synth", gpu_type=H100, draws=10)
    assert v.total == len(v.runs) and v.finished == v.total - 1  # one evaluation was left failed
    assert {k.kind for k in v.kinds} >= {"eval", "sft", "grpo"}
    assert v.actual_wall_s is None  # not every run succeeded: no whole-study figure


def _shape(runs: list[RunShape]) -> StudyShape:
    return StudyShape(name="fit", runs=runs, sizes={"train": 64, "valid": 20}, sources={}, params_b=None)


def _eval(i: int) -> RunShape:
    return RunShape(id=f"e{i}", label=f"e{i}", kind="eval", phase="base", variant=None, seed=i, parents=(),
                    evaluates=None, gpus=1, cpus=1,
                    config={"datasets": {"valid": {"uses": ["evaluate"]}},
                            "protocols": {"evaluate": {"n": 1 + i, "max_tokens": 512}}})


def _sft(i: int) -> RunShape:
    return RunShape(id=f"s{i}", label=f"s{i}", kind="sft", phase="sft", variant=None, seed=i, parents=(),
                    evaluates=None, gpus=8, cpus=1,
                    config={"trainer": "verl", "datasets": {"train": {"uses": ["train"]}},
                            "hparams": {"epochs": 1 + i, "train_batch_size": 16}})


T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _finished(run_id: str, seconds: float) -> RunRecord:
    return RunRecord(id=run_id, spec_name="fit", phase="p", kind="eval", state=RunState.succeeded,
                     started_at=T0.isoformat(), finished_at=(T0 + timedelta(seconds=seconds)).isoformat())


def _attempt(begin: float, end: float, process: str | None = None, number: int = 1) -> Attempt:
    return Attempt(number=number, start=T0 + timedelta(seconds=begin), end=T0 + timedelta(seconds=end),
                   ended=RunState.succeeded, process=process)


def _times(**attempts: list[Attempt]) -> dict[str, RunTime]:
    return {run_id: RunTime(run_id=run_id, attempts=tuple(a)) for run_id, a in attempts.items()}


def test_evaluations_run_in_one_process_held_one_slot_between_them():
    """The local executor runs a checkpoint's evaluations together (the runner's `running` event
    names the process's run): they held one CPU slot, so the study ran on two, not three."""
    records = [_finished(x, 1) for x in "abcd"] + [_finished("train", 1)]
    grouped = _times(a=[_attempt(0, 20)], b=[_attempt(0, 21, process="a")], train=[_attempt(5, 30)])
    assert observed_slots(records, "CPU", grouped) == 2
    more = {**grouped, **_times(c=[_attempt(25, 40)], d=[_attempt(26, 40)])}
    assert observed_slots(records, "CPU", more) == 3
    assert observed_slots(records, "CPU", _times(a=[_attempt(0, 10)], b=[_attempt(0, 10)], c=[_attempt(0, 10)])) == 3


def test_a_refit_profile_moves_the_forecast_onto_what_the_runs_took(tmp_path):
    registry = tmp_path / "registry"
    registry.mkdir()
    shutil.copy(shipped("registry") / "hardware.yaml", registry / "hardware.yaml")
    profile = load_profile(H100, registry)
    # of a known size: one of unknown size is not fitted (tests/price/test_fit.py)
    study = dataclasses.replace(_shape([_eval(i) for i in range(3)] + [_sft(i) for i in range(3)]), params_b=14.8)
    median = {r.id: r.seconds.p50 for r in forecast(study, profile, draws=1).runs}
    # this cluster is twice as slow as the published figures
    records = [_finished(run_id, 2 * seconds) for run_id, seconds in median.items()]
    fit = fit_factors(study, profile, records, _times(**{r: [_attempt(0, 2 * s)] for r, s in median.items()}))
    assert fit.error_after < 0.05 < fit.error_before
    write_profile(registry, "mine", fitted_entry(profile, fit, "fit"))
    mine = load_profile("mine", registry)
    refit = {r.id: r.seconds.p50 for r in forecast(study, mine, draws=1).runs}
    assert all(abs(refit[k] / (2 * v) - 1) < 0.1 for k, v in median.items())
    assert "fitted on 6 finished runs of fit" in mine.entry.constants["sft_tok_s"].source
    assert "# Hardware profiles" in (registry / "hardware.yaml").read_text()  # comments kept


def test_time_left_reads_a_running_runs_own_logs(tmp_path):
    run_dir = tmp_path / "runs" / "s" / "train1"
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "outputs").mkdir()
    (run_dir / "logs" / "metrics.1.jsonl").write_text("\n".join(json.dumps({"step": s, "data": {}}) for s in (1, 2, 3, 4, 5)))
    (run_dir / "outputs" / "training.json").write_text(json.dumps({"trainer": "trl", "expected_steps": 10}))
    config = {"trainer": "verl", "kind": "sft", "datasets": {"train": {"uses": ["train"], "source": "mbpp",
                                                                        "split": "train"}},
              "hparams": {"epochs": 1, "train_batch_size": 16}, "resources": {"gpus": 8}}
    eval_config = {"kind": "eval", "parents": ["train1"], "evaluates": "train1", "resources": {"gpus": 1},
                   "datasets": {"valid": {"uses": ["evaluate"], "source": "mbpp", "split": "validation"}},
                   "protocols": {"evaluate": {"n": 1, "max_tokens": 512}}}
    runs = [RunRecord(id="train1", spec_name="s", phase="sft", seed=1, kind="sft", config_json=json.dumps(config),
                      run_dir=str(run_dir)),
            RunRecord(id="eval1", spec_name="s", phase="sft", seed=1, kind="eval", config_json=json.dumps(eval_config),
                      run_dir=str(tmp_path / "runs" / "s" / "eval1"))]
    path = tmp_path / "runs" / "lineage.sqlite"
    with open_lineage(path) as lineage:
        lineage.record_spec(SpecRecord(name="s", path=str(tmp_path / "s.yaml"), sha256="s" * 64, text="name: s\n"))
        lineage.record_plan_records(PlanRecords(runs=runs))
        lineage.set_state("train1", RunState.queued)
        lineage.set_state("train1", RunState.running)
    with open_lineage(path, readonly=True) as lineage:
        eta = study_eta(lineage, "s", gpu_type=H100, draws=5)
    (row,) = eta.runs
    assert (row.done, row.total, row.what) == (5, 10, "steps")
    assert row.eta_s >= 0
    assert eta.remaining_s.p50 > 0  # the evaluation still waits
    assert eta.finished == 0 and eta.total == 2
