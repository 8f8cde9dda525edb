"""What the forecast counts: the GPUs a run holds (none for a CPU-only run) and the nodes it is
told of, so GPU-hours, cost and wall time match the cluster the researcher names."""

from __future__ import annotations

from engine.price.forecast import forecast
from engine.price.profiles import load_profile
from engine.price.shapes import RunShape, StudyShape
from engine.resources import shipped


def _eval(i: int, gpus: int) -> RunShape:
    return RunShape(id=f"e{i}", label=f"e{i}", kind="eval", phase="base", variant=None, seed=i, parents=(),
                    evaluates=None, gpus=gpus, cpus=1,
                    config={"datasets": {"valid": {"uses": ["evaluate"]}},
                            "protocols": {"evaluate": {"n": 4, "max_tokens": 512}}})


def _sft(i: int) -> RunShape:
    return RunShape(id=f"s{i}", label=f"s{i}", kind="sft", phase="sft", variant=None, seed=i, parents=(),
                    evaluates=None, gpus=8, cpus=1,
                    config={"trainer": "verl", "datasets": {"train": {"uses": ["train"]}},
                            "hparams": {"epochs": 1, "train_batch_size": 16}})


def _study(runs: list[RunShape]) -> StudyShape:
    return StudyShape(name="acct", runs=runs, sizes={"train": 64, "valid": 20}, sources={}, params_b=None)


def test_a_run_holding_no_gpu_adds_no_gpu_hours():
    h100 = load_profile("h100", shipped("registry"))
    with_gpu = forecast(_study([_sft(0), _eval(1, gpus=1)]), h100, draws=1)
    cpu_only = forecast(_study([_sft(0), _eval(1, gpus=0)]), h100, draws=1)
    sft_hours = next(k for k in cpu_only.kinds if k.name == "sft").slot_hours.p50
    # an evaluation on a served endpoint (resources.gpus 0) holds no GPU: the bill is the SFT's alone
    assert abs(cpu_only.slot_hours.p50 - sft_hours) < 1e-9
    assert next(k for k in cpu_only.kinds if k.name == "eval").slot_hours.p50 == 0
    assert with_gpu.slot_hours.p50 > sft_hours
    assert next(r for r in cpu_only.runs if r.id == "e1").slots == 0


def test_nodes_without_gpus_price_that_many_whole_nodes():
    h100 = load_profile("h100", shipped("registry"))
    study = _study([_sft(i) for i in range(3)])
    one = forecast(study, h100, draws=1)
    three = forecast(study, h100, nodes=3, draws=1)  # used to raise: 8 GPUs do not split over 3 nodes
    assert (three.slots, three.nodes) == (24, 3)
    two = forecast(study, h100, nodes=2, draws=1)
    assert two.slots == 16  # was 8: two nodes of four, half the cluster named
    assert three.wall_s.p50 < two.wall_s.p50 < one.wall_s.p50


def test_a_cluster_the_study_cannot_fit_is_refused_with_the_option_to_change():
    import pytest

    from engine.errors import UserError

    h100 = load_profile("h100", shipped("registry"))
    study = _study([_sft(0)])
    with pytest.raises(UserError, match="--gpus 8 does not split evenly over --nodes 3"):
        forecast(study, h100, gpus=8, nodes=3, draws=1)  # was a bare ValueError from the simulator
    with pytest.raises(UserError, match="needs 8 GPUs"):
        forecast(study, h100, gpus=4, draws=1)


def _bon() -> RunShape:
    return RunShape(id="b", label="b", kind="best_of_n", phase="bon", variant=None, seed=1, parents=(),
                    evaluates=None, gpus=1, cpus=1,
                    config={"n": 10, "datasets": {"valid": {"uses": ["generate"]}},
                            "protocols": {"generate": {"max_tokens": 512}}})


def _eval_of(target: str, i: int, seed=None) -> RunShape:
    return RunShape(id=f"x{i}", label=f"x{i}", kind="eval", phase="bon", variant=None, seed=seed,
                    parents=(target,) if target else (), evaluates=target, gpus=1, cpus=1,
                    config={"datasets": {"valid": {"uses": ["evaluate"]}}, "resources": {"gpus": 1, "cpus": 1},
                            "protocols": {"evaluate": {"n": 1, "max_tokens": 512}}})


def test_an_evaluation_of_best_of_n_samples_loads_no_model_and_generates_nothing():
    from engine.price.shapes import mark_sample_scoring

    h100 = load_profile("h100", shipped("registry"))
    runs = mark_sample_scoring([_bon(), _eval_of("b", 1), _eval_of("b", 2)])
    f = forecast(_study(runs), h100, draws=1)
    rows = {r.id: r for r in f.runs}
    # the executor imports the chosen samples and judges them: no engine start, no generation,
    # and each such evaluation is its own job (engine.runs.pipeline.evaluation_group)
    for i in (1, 2):
        assert set(rows[f"x{i}"].parts) <= {"judge"}
        assert rows[f"x{i}"].job == f"x{i}"


def test_base_evaluations_of_several_seeds_share_one_model_load_like_the_executor():
    h100 = load_profile("h100", shipped("registry"))
    f = forecast(_study([_eval_of(None, 1, seed=1), _eval_of(None, 2, seed=2)]), h100, draws=1)
    jobs = {r.job for r in f.runs}
    assert len(jobs) == 1  # one process, one model load, whatever the sampling seed


def test_on_ray_each_evaluation_is_its_own_job_and_pays_its_own_load():
    from dataclasses import replace

    h100 = load_profile("h100", shipped("registry"))
    study = _study([_eval_of(None, 1, seed=1), _eval_of(None, 2, seed=2)])
    local, ray = forecast(study, h100, draws=1), forecast(replace(study, groups_evals=False), h100, draws=1)
    assert len({r.job for r in ray.runs}) == 2  # the Ray executor submits one job per run
    assert all("start" in r.parts for r in ray.runs)
    assert ray.slot_hours.p50 > local.slot_hours.p50  # was priced as if it shared one load


def test_a_study_with_ray_submission_ids_in_lineage_is_priced_as_ungrouped(tmp_path):
    from engine.price.shapes import shape_of_records
    from engine.runs.lineage import RunRecord
    from engine.spec.registry import load_registry

    registry = load_registry(shipped("registry"))
    local = [RunRecord(id=f"e{i}", spec_name="s", phase="base", kind="eval", run_dir=str(tmp_path)) for i in (1, 2)]
    ray = [r.model_copy(update={"job_id": f"rlvr-{r.id}-a1"}) for r in local]
    assert shape_of_records("s", local, [], registry).groups_evals
    assert not shape_of_records("s", ray, [], registry).groups_evals


def test_a_refit_never_replaces_a_shipped_profile(tmp_path):
    import shutil

    import pytest

    from engine.errors import UserError
    from engine.price.fit import write_profile

    registry = tmp_path / "registry"
    registry.mkdir()
    shutil.copy(shipped("registry") / "hardware.yaml", registry / "hardware.yaml")
    before = (registry / "hardware.yaml").read_text()
    entry = load_profile("h100", registry).entry.model_dump(exclude_none=True)
    for name in ("h100", "cpu"):
        with pytest.raises(UserError, match="shipped"):
            write_profile(registry, name, entry)  # `price --fit --as h100` silently replaced the published figures
    assert (registry / "hardware.yaml").read_text() == before


def test_evaluations_done_in_one_process_share_its_time_in_forecast_vs_actual():
    from datetime import datetime, timedelta, timezone

    from engine.price.study import attributed_seconds
    from engine.runs.lineage import Attempt, RunRecord, RunState, RunTime

    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)

    def rec(run_id):
        return RunRecord(id=run_id, spec_name="s", phase="p", kind="eval", state=RunState.succeeded)

    def attempt(start, end, process=None):
        return Attempt(number=1, start=t0 + timedelta(seconds=start), end=t0 + timedelta(seconds=end),
                       ended=RunState.succeeded, process=process)

    # three evaluations ran in a's process for 300 s; each member's attempt spans the whole process,
    # so each used to count 300 s against its own ~100 s forecast
    times = {"a": RunTime("a", (attempt(0, 300),)), "b": RunTime("b", (attempt(0.01, 300.02, "a"),)),
             "c": RunTime("c", (attempt(0.02, 300.03, "a"),)), "d": RunTime("d", (attempt(400, 460),))}
    got = attributed_seconds([rec(x) for x in "abcd"], {"a": 150.0, "b": 75.0, "c": 75.0, "d": 50.0}, times)
    assert abs(sum(got[k] for k in "abc") - 300.03) < 0.1
    assert abs(got["a"] / got["b"] - 2) < 1e-6
    assert got["d"] == 60  # later, alone: its own time


def test_a_flywheel_dpo_reuses_the_harvested_samples_and_samples_nothing():
    h100 = load_profile("h100", shipped("registry"))
    base = {"datasets": {"train": {"uses": ["pairs", "harvest"]}}, "protocols": {"rollout": {"n": 8, "max_tokens": 512}},
            "hparams": {"epochs": 1}}
    plain = RunShape(id="d", label="d", kind="dpo", phase="dpo", variant=None, seed=1, parents=(), evaluates=None,
                     gpus=8, cpus=1, config=base)
    wheel = RunShape(id="w", label="w", kind="dpo", phase="dpo", variant=None, seed=1, parents=(), evaluates=None,
                     gpus=8, cpus=1, config={**base, "flywheel": {"use": "pairs_from", "of": "grpo", "of_run": "g",
                                                                   "of_kind": "grpo", "classes": ["wrong"]}})
    rows = {r.id: r for r in forecast(_study([plain, wheel]), h100, draws=1).runs}
    assert rows["d"].parts.get("generate", 0) > 0
    # engine.train.dpo.hard_negative_pairs reads the source run's judged samples: no sampling pass
    assert "generate" not in rows["w"].parts and "judge" not in rows["w"].parts
