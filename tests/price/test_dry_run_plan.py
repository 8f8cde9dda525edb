"""A dry run a planner can act on: the cost in the user's currency per phase, runs that cannot fit
their GPUs refused at their line with the fix, the checkpoint disk a study writes, a recipe's published
figures beside the forecast; profiles for the GPUs people rent, and one of the user's own outside the
package; a refit on clean attempts only."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from engine.cli import main
from engine.errors import UserError
from engine.price.fit import fit_factors, write_profile, fitted_entry
from engine.price.forecast import forecast
from engine.price.profiles import load_profile
from engine.price.study import price_plan
from engine.runs.preflight import preflight
from tests.price.test_study import _attempt, _eval, _finished, _sft, _shape, _times

REPO = Path(__file__).resolve().parents[2]
DEEPCODER = REPO / "specs" / "recipes" / "deepcoder-14b.yaml"


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("RLVR_RUN_CACHE_DIR", str(tmp_path / "cache"))


def edited(tmp_path: Path, edit) -> Path:
    data = yaml.safe_load(DEEPCODER.read_text())
    edit(data)
    path = tmp_path / "deepcoder-14b.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_the_cost_is_in_the_users_currency_per_phase(capsys):
    assert main([str(DEEPCODER), "--dry-run", "--price", "2.5", "--currency", "USD", "--json"]) == 0
    f = json.loads(capsys.readouterr().out)["forecast"]
    assert f["currency"] == "USD" and f["cost"]["p50"] == pytest.approx(2.5 * f["slot_hours"]["p50"])
    for phase in f["phases"]:
        assert phase["cost"]["p50"] == pytest.approx(2.5 * phase["slot_hours"]["p50"])
    assert main([str(DEEPCODER), "--dry-run", "--price", "2.5", "--currency", "USD"]) == 0
    out = capsys.readouterr().out
    assert "USD" in out and "cost (USD)" in out


def test_a_currency_without_a_price_is_refused(capsys):
    assert main([str(DEEPCODER), "--dry-run", "--currency", "USD"]) == 2
    assert "--price" in capsys.readouterr().err


@pytest.mark.parametrize("bad", [["--price", "-1"], ["--price", "nan"], ["--price", "inf"],
                                 ["--price", "2", "--currency", " "]])
def test_a_price_that_is_no_cost_is_refused_not_printed(bad, capsys):
    # a negative, NaN or infinite price (or a blank currency) would print a cost that is no number
    assert main([str(DEEPCODER), "--dry-run", *bad]) == 2
    err = capsys.readouterr().err
    assert "--price" in err or "--currency" in err
    assert "Traceback" not in err


def test_a_run_whose_training_state_does_not_fit_its_gpus_is_refused_at_its_line(tmp_path, capsys):
    def one_gpu(data):
        data["phases"]["grpo16k"]["resources"] = {"gpus": 1}

    path = edited(tmp_path, one_gpu)
    assert main([str(path), "--dry-run"]) == 1
    err = capsys.readouterr().err
    assert "does not fit h100's memory" in err and "grpo16k" in err and "resources" in err
    lines = path.read_text().splitlines()
    phase = lines.index("  grpo16k:")
    line = next(i for i, l in enumerate(lines[phase:], phase + 1) if l.strip().startswith("resources:"))
    assert f"{path.name}:{line}:" in err
    # the same run on 8 GPUs: FSDP shards its state over them, and it fits
    assert main([str(edited(tmp_path, lambda d: d["phases"]["grpo16k"].update(resources={"gpus": 8}))),
                 "--dry-run", "--json"]) == 0


def test_an_engine_with_no_room_for_one_sequence_is_refused(tmp_path, capsys):
    def tight(data):
        data["phases"]["grpo16k"]["overrides"]["actor_rollout_ref.rollout.tensor_model_parallel_size"] = 1
        data["phases"]["grpo16k"]["overrides"]["actor_rollout_ref.rollout.gpu_memory_utilization"] = 0.3

    assert main([str(edited(tmp_path, tight)), "--dry-run"]) == 1
    err = capsys.readouterr().err
    assert "KV room" in err and "tensor_model_parallel_size" in err


def test_the_fix_for_an_engine_that_does_not_fit_is_a_size_that_fits(tmp_path, capsys):
    # a 14B model at 0.15 of an 80 GB GPU: two GPUs hold 14 GB of weights each in 12 GB, so doubling
    # tp is not enough; four do, with room for a 16K sequence
    def tighter(data):
        data["phases"]["grpo16k"]["overrides"]["actor_rollout_ref.rollout.tensor_model_parallel_size"] = 1
        data["phases"]["grpo16k"]["overrides"]["actor_rollout_ref.rollout.gpu_memory_utilization"] = 0.15

    assert main([str(edited(tmp_path, tighter)), "--dry-run"]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "tensor_model_parallel_size (overrides) to 4" in err


def test_the_checkpoint_disk_a_study_writes():
    checked = preflight(DEEPCODER, content=False)
    f = price_plan(checked.plan, checked.validated, draws=1).forecast
    # each stage: a save at the end (no save_freq) of fp32 weights and Adam moments, and one merged folder
    per_stage = 12 * 14.8 + 2 * 14.8
    assert f.checkpoint_gb == pytest.approx(2 * per_stage)
    assert {p.name: round(p.checkpoint_gb, 1) for p in f.phases}["grpo16k"] == round(per_stage, 1)


def test_a_recipes_dry_run_prints_its_published_figure_and_the_ratio(capsys):
    assert main([str(DEEPCODER), "--dry-run", "--json"]) == 0
    published = json.loads(capsys.readouterr().out)["published"]
    assert [p["what"] for p in published] == ["grpo16k s/step on 32 h100", "grpo32k s/step on 32 h100"]
    assert all(p["published"] == 2000 and p["p10"] <= p["p50"] <= p["p90"] for p in published)
    assert main([str(DEEPCODER), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "published: grpo16k s/step on 32 h100 2,000" in out and "forecast/published ×" in out


# ---------------------------------------------------------------- profiles


@pytest.mark.parametrize("name", ["h200", "b200", "h800", "h20", "l40s"])
def test_rented_gpus_have_profiles_scaled_from_the_measured_h100(name):
    h100, other = load_profile("h100"), load_profile(name)
    sheet = other.entry.datasheet
    assert sheet is not None and sheet.source and other.entry.memory_gb == sheet.memory_gb
    for constant, band in other.entry.constants.items():
        assert "h100" in band.source and h100.entry.constants[constant].source in band.source
    # an empty engine's step follows memory bandwidth, training follows FLOP/s (in part)
    bw, fl = sheet.memory_tb_s / 3.35, sheet.bf16_tflops / 989
    assert other.median().tail_ms == pytest.approx(h100.median().tail_ms / bw)
    ratio = other.median().update_tok_s / h100.median().update_tok_s
    assert min(1.0, fl) <= ratio <= max(1.0, fl)


# The datasheets' own figures (memory GB, memory TB/s, dense bf16 TFLOP/s without sparsity): a profile
# scaled by a sparse figure, or by a node's total, would be off by 2x or 8x without an error.
DATASHEETS = {"h100": (80, 3.35, 989), "h200": (141, 4.8, 989), "b200": (180, 8.0, 2250),
              "h800": (80, 3.35, 989), "h20": (96, 4.0, 148), "l40s": (48, 0.864, 362)}


@pytest.mark.parametrize("name", sorted(DATASHEETS))
def test_each_rented_gpu_carries_its_datasheets_dense_figures(name):
    sheet = load_profile(name).entry.datasheet
    assert (sheet.memory_gb, sheet.memory_tb_s, sheet.bf16_tflops) == DATASHEETS[name]


def test_an_h20_decodes_about_as_an_h100_and_trains_several_times_slower():
    h100, h20 = load_profile("h100").median(), load_profile("h20").median()
    assert h20.tail_ms < h100.tail_ms and h20.rollout_tok_s > 0.2 * h100.rollout_tok_s
    assert h20.update_tok_s < h100.update_tok_s / 3


def test_a_users_hardware_file_outside_the_package_adds_profiles(tmp_path, capsys):
    mine = tmp_path / "my-gpus.yaml"
    mine.write_text(yaml.safe_dump({"profiles": {"h100-cluster": {
        "description": "our H100s", "slot": "GPU", "slots_per_node": 8, "params_b": 7.6, "scaled_from": "h100",
        "datasheet": {"memory_gb": 80, "memory_tb_s": 3.35, "bf16_tflops": 989, "source": "ours"},
        "constants": {"trainer_start_s": {"p10": 60, "p50": 90, "p90": 120, "source": "measured here"}}}}}))
    profile = load_profile("h100-cluster", extra=mine)
    assert profile.path == mine and profile.entry.constants["trainer_start_s"].p50 == 90
    assert profile.median().tail_ms == load_profile("h100").median().tail_ms
    assert main([str(DEEPCODER), "--dry-run", "--json", "--gpu-type", "h100-cluster", "--hardware", str(mine)]) == 0
    assert json.loads(capsys.readouterr().out)["forecast"]["profile"] == "h100-cluster"
    with pytest.raises(UserError, match="no such file"):
        load_profile("h100", extra=tmp_path / "missing.yaml")


def test_a_refit_lands_in_the_users_file_not_the_package(tmp_path):
    study = dataclasses.replace(_shape([_eval(i) for i in range(3)] + [_sft(i) for i in range(3)]), params_b=7.6)
    profile = load_profile("h100")
    median = {r.id: r.seconds.p50 for r in forecast(study, profile, draws=1).runs}
    records = [_finished(run_id, 2 * s) for run_id, s in median.items()]
    fit = fit_factors(study, profile, records, _times(**{r: [_attempt(0, 2 * s)] for r, s in median.items()}))
    mine = tmp_path / "mine.yaml"
    write_profile(mine, "cluster", fitted_entry(profile, fit, "fit"))
    assert load_profile("cluster", extra=mine).entry.fitted_from == "fit"


# ---------------------------------------------------------------- a refit on like with like


def test_a_refit_leaves_out_runs_resumed_after_a_crash_and_names_them():
    """A run killed after an hour and resumed took its attempts' sum; its forecast is one clean attempt.
    Fitted on, the crash would be priced as slower hardware: the fit leaves it out and says so."""
    study = dataclasses.replace(_shape([_eval(i) for i in range(3)] + [_sft(i) for i in range(3)]), params_b=7.6)
    profile = load_profile("h100")
    median = {r.id: r.seconds.p50 for r in forecast(study, profile, draws=1).runs}
    attempts = {r: [_attempt(0, s)] for r, s in median.items()}
    attempts["s2"] = [_attempt(0, 5 * median["s2"]), _attempt(6 * median["s2"], 7 * median["s2"], number=2)]
    records = [_finished(run_id, s) for run_id, s in median.items()]
    fit = fit_factors(study, profile, records, _times(**attempts))
    assert fit.skipped == ("s2",) and "s2" not in fit.used and fit.runs == 5
    assert fit.error_after < 0.05  # the clean runs took their forecast: nothing is mistaken for slow hardware


def test_every_recipe_has_its_published_figures_on_file():
    """registry/published.yaml holds a figure for every recipe, each for a phase the recipe trains, on a
    profile the registry has."""
    from engine.price.published import load_published
    from engine.resources import shipped

    published = load_published(shipped("registry"))
    recipes = {p.stem: p for p in (REPO / "specs" / "recipes").glob("*.yaml")}
    assert set(published) == set(recipes)
    for name, run in published.items():
        phases = yaml.safe_load(recipes[name].read_text())["phases"]
        for step in run.steps:
            assert phases[step.phase]["kind"] == "grpo"
            load_profile(step.profile)
