"""A spelled-out base_model takes what a registry entry takes: `hf_id` is the registry's spelling of a
hub id and plans as `path:` does; its size and response prior travel with the spec."""

from __future__ import annotations

from pathlib import Path

import yaml

from engine.isolation.validate import validate_spec
from engine.plan.expand import plan
from engine.train.launch import params_b_of

MINIMAL = Path(__file__).resolve().parents[1] / "specs" / "good" / "minimal.yaml"


def spelled(tmp_path: Path, name: str, base_model: dict) -> Path:
    data = yaml.safe_load(MINIMAL.read_text())
    data["base_model"] = base_model
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_hf_id_plans_as_the_same_hub_id_under_path(tmp_path):
    hub = "example/coder-3b"
    by_id = validate_spec(spelled(tmp_path, "a", {"hf_id": hub, "params_b": 3.1}), content=False)
    by_path = validate_spec(spelled(tmp_path, "b", {"path": hub, "params_b": 3.1}), content=False)
    assert by_id.spec.base_model.path == hub and by_id.spec.base_model.hf_id is None
    assert [r.id for r in plan(by_id).runs] == [r.id for r in plan(by_path).runs]


def test_the_declared_size_is_what_the_launch_reads(tmp_path):
    validated = validate_spec(spelled(tmp_path, "c", {"hf_id": "example/coder-3b", "params_b": 3.1}), content=False)
    assert params_b_of(validated.registry.models, validated.spec.base_model) == 3.1
