"""Pricing what researchers run: declared response lengths, any model's size, the published recipes in
specs/recipes/, and a step bound by its longest sample flattening as GPUs are added.

No network and no dataset is needed: the hub is off (HF_HUB_OFFLINE), sizes come from the registry's
splits, and the recipes declare their steps."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from engine.cli import main
from engine.errors import SpecError
from engine.price.forecast import context, forecast
from engine.price.kinds import run_cost
from engine.price.shapes import shape_of_plan, shape_of_records
from engine.price.profiles import load_profile
from engine.price.study import price_plan, resolve_profile
from engine.resources import shipped
from engine.runs.lineage.from_plan import plan_records
from engine.runs.preflight import preflight
from engine.spec.model import ResponsePrior

REPO = Path(__file__).resolve().parents[2]
RECIPES = sorted((REPO / "specs" / "recipes").glob("*.yaml"))
DEEPCODER = REPO / "specs" / "recipes" / "deepcoder-14b.yaml"
STEP_PARTS = ("generate", "judge", "logprob", "update", "overhead")


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("RLVR_RUN_CACHE_DIR", str(tmp_path / "cache"))


def variant(tmp_path: Path, edit, name: str = "variant.yaml") -> Path:
    """The DeepCoder recipe with `edit(data)` applied, written beside the test; its model spelled out
    under a hub id the registry does not know (so the registry's entry for it lends nothing)."""
    data = yaml.safe_load(DEEPCODER.read_text())
    data["base_model"]["hf_id"] = "example/distilled-14b"
    edit(data)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def priced(path: Path):
    checked = preflight(path, content=False)
    return checked, price_plan(checked.plan, checked.validated, draws=1)


def step_seconds(path: Path, phase: str, gpus: int | None = None) -> float:
    """Seconds per rollout step of `phase` at the median constants (on `gpus` when given)."""
    checked = preflight(path, content=False)
    study = shape_of_plan(checked.plan, checked.validated)
    profile = resolve_profile(study, None, checked.validated.registry)
    run = next(r for r in study.runs if r.unit == phase and r.kind == "grpo")
    cost = run_cost(context(study, profile, profile.median()), replace(run, gpus=gpus or run.gpus))
    return sum(cost.parts.get(p, 0.0) for p in STEP_PARTS) / cost.steps


def drop_priors(data: dict) -> None:
    for protocol in data["protocols"].values():
        protocol.pop("response_tokens", None)


# ---------------------------------------------------------------- the recipes (users start from them)


def test_there_are_recipes():
    assert DEEPCODER in RECIPES


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.name)
def test_every_recipe_validates_and_prices_in_a_dry_run(path, capsys):
    assert main([str(path), "--dry-run", "--json"]) == 0
    forecast = json.loads(capsys.readouterr().out)["forecast"]
    assert forecast["profile"] == "h100" and forecast["slot_hours"]["p50"] > 0
    # a recipe is a published setup: it declares what its model's answers are like
    assert {p["source"] for p in forecast["response_priors"].values()} <= {"protocol", "model"}


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.name)
def test_every_recipe_says_its_source_and_published_figure(path):
    head = path.read_text().split("\nname:")[0]
    assert "Source:" in head and "Published:" in head


# ---------------------------------------------------------------- declared response lengths


def test_a_reasoning_spec_is_priced_at_its_declared_lengths_not_the_short_default(tmp_path):
    """16K responses of a reasoning model: the step costs several times the 450-token default's."""
    declared = step_seconds(DEEPCODER, "grpo16k")
    default = step_seconds(variant(tmp_path, drop_priors), "grpo16k")
    assert declared > 3 * default


def test_the_forecast_says_which_prior_it_used_and_when_it_fell_back(tmp_path):
    _, declared = priced(DEEPCODER)
    use = declared.forecast.response_priors["rollout16k"]
    assert (use.source, use.median, use.sigma, use.max_tokens) == ("protocol", 7000, 0.6, 16384)
    assert any("rollout16k" in n and "declared on the protocol" in n for n in declared.forecast.notes)

    _, fallback = priced(variant(tmp_path, drop_priors))
    assert {u.source for u in fallback.forecast.response_priors.values()} == {"default"}
    said = [n for n in fallback.forecast.notes if "registry default" in n]
    assert len(said) == 1 and "rollout16k" in said[0] and "response_tokens" in said[0]


def test_a_model_entry_carries_the_prior_for_protocols_that_declare_none(tmp_path):
    def on_the_model(data):
        drop_priors(data)
        data["base_model"]["response_tokens"] = {"median": 7000, "sigma": 0.6}

    path = variant(tmp_path, on_the_model)
    _, with_model = priced(path)
    assert {u.source for u in with_model.forecast.response_priors.values()} == {"model"}
    assert step_seconds(path, "grpo16k") == pytest.approx(step_seconds(DEEPCODER, "grpo16k"))


def test_a_registry_model_entry_carries_its_prior(tmp_path):
    def named(data):
        drop_priors(data)
        data["base_model"] = "deepseek-r1-distill-qwen-14b"  # registry/models.yaml: median 7000, sigma 0.6

    _, with_registry = priced(variant(tmp_path, named))
    uses = with_registry.forecast.response_priors.values()
    assert {(u.source, u.median) for u in uses} == {("model", 7000)}
    assert any("deepseek-r1-distill-qwen-14b's prior" in n for n in with_registry.forecast.notes)


def test_a_registry_models_prior_is_frozen_with_its_runs_and_changes_no_run(tmp_path):
    """A recorded study is re-forecast (`price`, `--fit`, `status`) with the prior its runs were planned
    with, as a spelled-out model's is, not whatever the registry says now; and it changes no run id."""
    def named(data):
        drop_priors(data)
        data["base_model"] = "deepseek-r1-distill-qwen-14b"

    def spelled_without_prior(data):
        drop_priors(data)
        data["base_model"] = {"hf_id": "deepseek-ai/DeepSeek-R1-Distill-Qwen-14B", "family": "qwen2", "chat": True}

    checked = preflight(variant(tmp_path, named, "named.yaml"), content=False)
    plain = preflight(variant(tmp_path, spelled_without_prior, "plain.yaml"), content=False)
    assert [r.id for r in checked.plan.runs] == [r.id for r in plain.plan.runs]
    records = plan_records(checked.plan, checked.validated, {r.id: tmp_path / r.id for r in checked.plan.runs})
    registry = checked.validated.registry
    entry = registry.models["deepseek-r1-distill-qwen-14b"]
    edited = replace(registry, models={**registry.models, "deepseek-r1-distill-qwen-14b": entry.model_copy(
        update={"response_tokens": ResponsePrior(median=500, sigma=0.6)})})
    study = shape_of_records(checked.plan.spec_name, records.runs, records.datasets, edited)
    assert study.model_lengths == {"median": 7000, "sigma": 0.6}


def test_a_response_prior_prices_and_changes_no_run(tmp_path):
    """The prior is in each run's config (the forecast reads it back from lineage) but not its id."""
    declared, _ = priced(variant(tmp_path, lambda data: None, "declared.yaml"))
    plain, _ = priced(variant(tmp_path, drop_priors, "plain.yaml"))
    assert [r.id for r in declared.plan.runs] == [r.id for r in plain.plan.runs]
    assert declared.plan.runs[0].config["protocols"]["rollout"]["response_tokens"]["median"] == 7000


def test_a_longer_stage_chained_with_from_prices_longer_steps():
    """DeepCoder's 16K -> 32K: each stage is priced at its own protocol's cap and prior."""
    assert step_seconds(DEEPCODER, "grpo32k") > 1.5 * step_seconds(DEEPCODER, "grpo16k")


# ---------------------------------------------------------------- any model's size


def test_a_spelled_out_model_is_priced_at_the_size_it_declares(tmp_path):
    def small(data):
        data["base_model"]["params_b"] = 1.5

    _, big = priced(DEEPCODER)
    _, little = priced(variant(tmp_path, small))
    assert big.forecast.slot_hours.p50 > 3 * little.forecast.slot_hours.p50


def test_a_model_of_unknown_size_is_refused_naming_params_b(tmp_path, capsys):
    path = variant(tmp_path, lambda data: data["base_model"].pop("params_b"))
    with pytest.raises(SpecError) as raised:
        priced(path)
    (diagnostic,) = raised.value.diagnostics
    assert diagnostic.path == "base_model" and "params_b" in diagnostic.fix
    assert path.read_text().splitlines()[diagnostic.line - 1] == "base_model:"  # the spec's line
    assert main([str(path), "--dry-run"]) == 1
    assert "params_b" in capsys.readouterr().err


def test_a_registry_model_is_priced_at_its_registry_size(tmp_path):
    """Named from the registry, a 1.5B model is no longer priced as the profile's 7.6B."""
    def named(data, name):
        data["base_model"] = name
        drop_priors(data)

    small = step_seconds(variant(tmp_path, lambda d: named(d, "qwen2.5-coder-1.5b-instruct"), "a.yaml"), "grpo16k")
    seven = step_seconds(variant(tmp_path, lambda d: named(d, "qwen2.5-coder-7b-instruct"), "b.yaml"), "grpo16k")
    assert seven > 2 * small


def test_a_cpu_forecast_of_a_model_of_unknown_size_says_what_size_it_assumed(tmp_path):
    """Only a GPU forecast refuses a model of unknown size; a CPU one prices it at the cpu profile's
    size (the tiny model's), thousands of times below a 7B's: it must say so, naming the field."""
    def on_cpus(data):
        data["base_model"].pop("params_b")
        for phase in data["phases"].values():
            phase.pop("resources")

    _, price = priced(variant(tmp_path, on_cpus))
    assert price.forecast.profile == "cpu"
    notes = price.forecast.notes
    said = [n for n in notes if "size is unknown" in n]
    assert len(said) == 1 and "params_b" in said[0] and "cpu" in said[0]
    _, sized = priced(DEEPCODER)
    assert not any("size is unknown" in n for n in sized.forecast.notes)


def test_a_gpu_profile_without_memory_says_the_kv_cache_is_not_priced(tmp_path):
    """A hardware file written before profiles had `memory_gb` (a user's own, or a refit of one) prices
    no KV-cache overflow: DeepCoder's 32K stage comes out lower, and the forecast says why."""
    registry = tmp_path / "registry"
    registry.mkdir()
    data = yaml.safe_load((shipped("registry") / "hardware.yaml").read_text())
    data["profiles"] = {"h100": data["profiles"]["h100"]}
    for key in ("memory_gb", "datasheet"):
        data["profiles"]["h100"].pop(key)
    (registry / "hardware.yaml").write_text(yaml.safe_dump(data))
    checked = preflight(DEEPCODER, content=False)
    study = shape_of_plan(checked.plan, checked.validated)
    old, new = load_profile("h100", registry), resolve_profile(study, None, checked.validated.registry)
    assert old.entry.memory_gb is None and new.entry.memory_gb
    said = [n for n in forecast(study, old, draws=1).notes if "memory_gb" in n]
    assert len(said) == 1 and "h100" in said[0] and str(registry / "hardware.yaml") in said[0]
    assert not any("memory_gb" in n for n in forecast(study, new, draws=1).notes)


def test_a_gpu_study_priced_on_the_cpu_profile_is_refused_naming_the_option(capsys):
    assert main([str(DEEPCODER), "--dry-run", "--gpu-type", "cpu"]) == 2  # a usage error, not the spec's
    err = capsys.readouterr().err
    assert "needs 32 GPU(s)" in err and "--gpu-type" in err and "Traceback" not in err


# ---------------------------------------------------------------- strong scaling


def test_a_step_gets_faster_with_gpus_and_bends_as_its_longest_sample_binds():
    """Published per-step tables bend: more GPUs help until each engine is nearly empty, then the
    longest sample binds. DeepCoder's 16K step on 32 -> 256 GPUs: faster at each doubling, each
    doubling buying less than the one before, 8x the GPUs well under 8x the speed."""
    step = {g: step_seconds(DEEPCODER, "grpo16k", g) for g in (32, 64, 128, 256)}
    assert step[32] > step[64] > step[128] > step[256]
    assert step[32] / step[64] > step[128] / step[256] > 1.0
    assert step[32] / step[256] < 4
