"""`price --fit` fits and writes the same thing: every second of a forecast is filed under the
constant group that drives it (`RunCost.add` takes the group), so a profile fitted on measured
times re-forecasts those times; the registry file is validated before it is replaced, written
atomically, and two fits at once both land."""

from __future__ import annotations

import multiprocessing
import shutil

import pytest

from engine.errors import UserError
from engine.price.fit import fit_seconds, fitted_entry, group_seconds, write_profile
from engine.price.model import GROUPS, RunCost
from engine.price.profiles import load_profile, load_profiles
from engine.price.shapes import RunShape, StudyShape
from engine.resources import shipped

# what this imaginary cluster takes, per group, against the published h100 figures
TRUE = {"engine": 1.3, "trainer": 0.7, "generation": 2.0, "rollout": 1.5, "judge": 3.0, "logprob": 1.2,
        "update": 0.8, "sft": 1.7, "save": 0.5, "merge": 1.1, "overhead": 2.5}


@pytest.fixture
def registry(tmp_path):
    folder = tmp_path / "registry"
    folder.mkdir()
    shutil.copy(shipped("registry") / "hardware.yaml", folder / "hardware.yaml")
    return folder


def _run(id_: str, kind: str, config: dict, gpus: int = 1) -> RunShape:
    return RunShape(id=id_, label=id_, kind=kind, phase=kind, variant=None, seed=1, parents=(), evaluates=None,
                    gpus=gpus, cpus=1, config=config)


def _study() -> StudyShape:
    evaluate = lambda n, t: {"datasets": {"valid": {"uses": ["evaluate"]}},  # noqa: E731
                             "protocols": {"evaluate": {"n": n, "max_tokens": t}}, "judge": {"timeout_s": 4}}
    runs = [_run(f"e{i}", "eval", evaluate(n, t)) for i, (n, t) in enumerate([(1, 256), (8, 1024), (4, 2048)])]
    runs.append(_run("me", "eval", {**evaluate(2, 512), "parents": []}) )
    runs[-1] = RunShape(**{**runs[-1].__dict__, "evaluates": "s0"})  # a trained checkpoint: merged first
    for i, steps in enumerate((50, 400)):
        runs.append(_run(f"s{i}", "sft", {"datasets": {"train": {"uses": ["train"]}, "valid": {"uses": ["select"]}},
                                          "protocols": {"select": {"n": 1, "max_tokens": 512}},
                                          "hparams": {"max_steps": steps, "save_steps": 25 * (i + 1)}}, gpus=2))
    for i, (steps, timeout, beta) in enumerate([(20, 2, 0.0), (60, 12, 0.05), (10, 6, 0.0)]):
        runs.append(_run(f"g{i}", "grpo", {
            "trainer": "trl", "datasets": {"train": {"uses": ["train"]}},
            "protocols": {"rollout": {"n": 8, "max_tokens": 1024 * (i + 1)}}, "judge": {"timeout_s": timeout},
            "hparams": {"max_steps": steps, "beta": beta, "per_device_train_batch_size": 16}}, gpus=4))
    runs.append(_run("v", "grpo", {
        "trainer": "verl", "datasets": {"train": {"uses": ["train"]}},
        "protocols": {"rollout": {"n": 16, "max_tokens": 4096, "tests": {"most_demanding": 15}}},
        "judge": {"timeout_s": 10}, "hparams": {"total_steps": 30, "train_batch_size": 32}}, gpus=8))
    runs.append(_run("d", "dpo", {"datasets": {"train": {"uses": ["pairs"]}}, "pairs": {"k": 4},
                                  "protocols": {"rollout": {"n": 4, "max_tokens": 512}},
                                  "hparams": {"max_steps": 40}}, gpus=2))
    runs.append(_run("r", "raft", {"datasets": {"train": {"uses": ["train"]}}, "cycles": 3,
                                   "protocols": {"rollout": {"n": 4, "max_tokens": 768}}}, gpus=2))
    return StudyShape(name="fit", runs=runs, sizes={"train": 64, "valid": 20}, sources={}, params_b=None,
                      groups_evals=False)


def test_a_profile_fitted_on_measured_times_reforecasts_them(registry):
    study, profile = _study(), load_profile("h100", registry)
    forecast = group_seconds(study, profile)
    used = {g for groups in forecast.values() for g, seconds in groups.items() if seconds > 0}
    assert used == set(GROUPS)  # every group is exercised (judging with its timeouts included)
    measured = {run_id: sum(TRUE[g] * s for g, s in groups.items()) for run_id, groups in forecast.items()}
    fit = fit_seconds(study, forecast, measured)
    assert fit.error_after < 1e-6 < 0.1 < fit.error_before
    write_profile(registry, "mine", fitted_entry(profile, fit, "fit"))
    again = group_seconds(study, load_profile("mine", registry))
    for run_id, seconds in measured.items():
        assert sum(again[run_id].values()) == pytest.approx(seconds, rel=1e-4), run_id
    assert {g: round(f, 3) for g, f in fit.factors.items()} == TRUE


def test_every_second_names_the_group_that_drives_it():
    cost = RunCost(run_id="r", slots=1)
    cost.add("judge", 3.0, "judge")
    cost.add("select", 2.0, "generation")
    cost.add("select", 1.0, "judge")
    assert cost.parts == {"judge": 3.0, "select": 3.0}
    assert cost.by_group == {("judge", "judge"): 3.0, ("select", "generation"): 2.0, ("select", "judge"): 1.0}
    with pytest.raises(ValueError, match="unknown constant group"):
        cost.add("judge", 1.0, "judging")


def test_a_profile_that_would_not_load_never_replaces_the_file(registry):
    before = (registry / "hardware.yaml").read_text()
    entry = load_profile("h100", registry).entry.model_dump(exclude_none=True)
    entry["constants"]["save_s"] = {"p10": 5.0, "p50": 50.0, "p90": 10.0, "source": "a broken fit"}
    with pytest.raises(UserError, match="unchanged"):
        write_profile(registry, "mine", entry)
    assert (registry / "hardware.yaml").read_text() == before
    assert not [p.name for p in registry.iterdir() if p.name.endswith(".partial")]


def _write_many(registry, prefix: str, count: int) -> None:
    entry = load_profile("h100", registry).entry.model_dump(exclude_none=True)
    for i in range(count):
        write_profile(registry, f"{prefix}-{i}", entry)


@pytest.mark.slow  # tens of seconds (a real study, server or trainer): `make test-all` and CI run it
def test_two_fits_at_once_both_land(registry):
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_write_many, args=(registry, name, 12)) for name in ("a", "b")]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
        assert worker.exitcode == 0
    profiles = load_profiles(registry).profiles
    assert {f"{p}-{i}" for p in "ab" for i in range(12)} <= set(profiles)


def test_every_duration_constant_is_in_exactly_one_group():
    from engine.price.profiles import NAMES

    grouped = [name for members in GROUPS.values() for name in members]
    assert len(grouped) == len(set(grouped))
    # judge_overlap is a share of judging hidden behind generation, not a duration: no factor moves it
    assert set(NAMES) - set(grouped) == {"judge_overlap"} and set(grouped) <= set(NAMES)


def test_a_study_of_unknown_model_size_is_not_fitted(registry):
    """Priced at the profile's size, its times over the forecast are the size ratio too: refused,
    pointing at the spec's base_model line, before any profile is written."""
    from engine.price.fit import fit_factors
    from engine.runs.lineage import SpecRecord

    study, profile = _study(), load_profile("h100", registry)
    spec = SpecRecord(name="fit", path="specs/fit.yaml", sha256="0" * 64,
                      text="name: fit\nbase_model: {hf_id: example/coder, family: qwen2}\nseeds: [1]\n")
    with pytest.raises(UserError) as err:
        fit_factors(study, profile, [], {}, spec=spec)
    assert "params_b" in str(err.value) and "specs/fit.yaml:2" in str(err.value)
    with pytest.raises(UserError, match="a fit needs at least two"):  # a known size gets to the fit itself
        fit_factors(StudyShape(**{**study.__dict__, "params_b": 7.6}), profile, [], {}, spec=spec)
