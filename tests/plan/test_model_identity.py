"""A spelled-out base model's size and context only price it: they are in its runs' frozen config, not
in their ids, so adding them (as the dry run asks for a model the registry does not know) keeps an
existing study's runs, and a model spelled out plans the same runs as its registry name."""

from __future__ import annotations

from pathlib import Path

import yaml

from engine.isolation.validate import validate_spec
from engine.plan.expand import plan

MINIMAL = Path(__file__).resolve().parents[1] / "specs" / "good" / "minimal.yaml"
HUB = {"hf_id": "Qwen/Qwen2.5-Coder-7B-Instruct", "family": "qwen2", "chat": True}


def planned(tmp_path: Path, name: str, base_model) -> dict[str, tuple[str, dict]]:
    data = yaml.safe_load(MINIMAL.read_text())
    data["base_model"] = base_model
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return {r.label: (r.id, r.frozen_config()) for r in plan(validate_spec(path, content=False)).runs}


def test_size_and_context_leave_the_run_ids_and_stay_in_the_config(tmp_path):
    bare = planned(tmp_path, "bare", HUB)
    sized = planned(tmp_path, "sized", {**HUB, "params_b": 7.6, "context_len": 32768})
    prior = planned(tmp_path, "prior", {**HUB, "params_b": 7.6, "response_tokens": {"median": 4000, "sigma": 0.7}})
    registry = planned(tmp_path, "registry", "qwen2.5-coder-7b-instruct")
    ids = lambda runs: {label: run_id for label, (run_id, _) in runs.items()}  # noqa: E731
    assert ids(bare) == ids(sized) == ids(prior) == ids(registry)
    assert bare["base:every_phase"][0] == "0f608f3d477c"  # what these runs were planned as before
    frozen = sized["base:every_phase"][1]["base_model"]
    assert frozen["params_b"] == 7.6 and frozen["context_len"] == 32768  # the forecast and the launch read them


def test_what_the_model_is_stays_in_the_run_ids(tmp_path):
    bare = planned(tmp_path, "bare", HUB)
    assert planned(tmp_path, "base", {**HUB, "chat": False})["base:every_phase"][0] != bare["base:every_phase"][0]
