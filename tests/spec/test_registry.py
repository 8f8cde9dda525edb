"""registry/ catalogs load, resolve spec names, and locate their own errors; matrix.yaml validates."""

from __future__ import annotations

import hashlib
import random
import shutil
from pathlib import Path

import pytest

from engine.errors import SpecError
from engine.isolation.validate import validate_spec
from engine.spec.model import ModelRef, PhaseKind, Role
from engine.spec.registry import find_registry, load_registry, project_registry
from engine.spec.validated import frozen_protocol, protocol_sha256

ROOT = Path(__file__).resolve().parents[2]
MATRIX = ROOT / "specs" / "matrix.yaml"


def test_registry_loads_with_the_benchmarks_roles():
    reg = load_registry()
    assert {"humaneval", "mbpp", "mbpp_sanitized", "codecontests", "local_jsonl", "local_json",
            "local_parquet", "toy"} <= set(reg.datasets)
    assert reg.datasets["humaneval"].splits["test"].test_only
    assert reg.datasets["codecontests"].splits["test"].test_only
    assert not reg.datasets["codecontests"].splits["valid"].test_only
    assert Role.regression in reg.datasets["mbpp"].splits["test"].roles
    assert reg.models["qwen2.5-coder-7b-instruct"].hf_id == "Qwen/Qwen2.5-Coder-7B-Instruct"
    assert {"greedy", "passk_10", "rollout_8"} <= set(reg.protocols)


def test_every_preset_resolves_to_a_complete_protocol(tmp_path: Path):
    reg = load_registry()
    spec = tmp_path / "s.yaml"
    names = sorted(reg.protocols)
    spec.write_text((ROOT / "tests" / "specs" / "good" / "minimal.yaml").read_text().replace(
        "protocols:\n", "protocols:\n" + "".join(f"  p_{n}: {{preset: {n}}}\n" for n in names)))
    validated = validate_spec(spec, content=False)
    for name in names:
        proto = validated.spec.protocols[f"p_{name}"]
        assert proto.preset is None and None not in (proto.temperature, proto.top_p, proto.top_k,
                                                     proto.max_tokens, proto.n, proto.stop, proto.seed)


def test_registry_errors_point_into_the_catalog(tmp_path: Path):
    root = tmp_path / "registry"
    shutil.copytree(project_registry(), root)
    text = (root / "datasets.yaml").read_text().replace("    id_field: name\n", "    id_feild: name\n", 1)
    (root / "datasets.yaml").write_text(text)
    with pytest.raises(SpecError) as info:
        load_registry(root)
    found = {d.path: d for d in info.value.diagnostics}
    assert set(found) == {"datasets.codecontests.id_feild", "datasets.codecontests.id_field"}
    assert found["datasets.codecontests.id_feild"].file == str(root / "datasets.yaml")
    assert "did you mean 'id_field'" in found["datasets.codecontests.id_feild"].message


def test_the_nearest_registry_wins(tmp_path: Path):
    shutil.copytree(project_registry(), tmp_path / "registry")
    (tmp_path / "specs").mkdir()
    assert find_registry(tmp_path / "specs") == tmp_path / "registry"
    assert find_registry(Path("/")) == project_registry()


def test_mbpp_regression_list_follows_the_documented_algorithm():
    ids = sorted(random.Random(20261122).sample(list(range(11, 511)), 200))
    expected = "".join(f"{i}\n" for i in ids).encode()
    assert (ROOT / "registry" / "idlists" / "mbpp_reg_200.txt").read_bytes() == expected


def test_matrix_validates_and_resolves():
    validated = validate_spec(MATRIX, content=False)
    spec = validated.spec
    assert validated.waivers == [] and validated.warnings == []
    assert spec.base_model == ModelRef(path="Qwen/Qwen2.5-Coder-7B-Instruct", family="qwen2", chat=True)
    assert {n: d.role for n, d in spec.datasets.items()} == {
        "cc_train": Role.train, "cc_valid": Role.valid, "cc_test": Role.test,
        "humaneval": Role.test, "mbpp_reg": Role.regression}
    assert spec.datasets["humaneval"].test_only and spec.datasets["cc_test"].test_only
    listed = (ROOT / "registry" / "idlists" / "mbpp_reg_200.txt").read_bytes()
    assert validated.idlist_hashes == {"mbpp_reg": hashlib.sha256(listed).hexdigest()}
    assert set(validated.dataset_fingerprints) == set(spec.datasets)
    assert (spec.protocols["greedy"].temperature, spec.protocols["passk"].n,
            (spec.protocols["rollout"].temperature, spec.protocols["rollout"].n)) == (0.0, 10, (1.0, 8))
    kinds = {n: p.kind for n, p in spec.phases.items()}
    assert kinds == {"base": PhaseKind.eval, "sft": PhaseKind.sft, "dpo": PhaseKind.dpo, "grpo": PhaseKind.grpo,
                     "best_of_n": PhaseKind.best_of_n, "repair": PhaseKind.repair}
    assert set(spec.variants) == {"grpo_sparse", "dpo_grpo", "grpo_curriculum", "repair_3", "dpo_flywheel"}
    assert spec.seeds == [1, 2]
    assert protocol_sha256(frozen_protocol("greedy", validated.spec.protocols["greedy"])) != protocol_sha256(frozen_protocol("passk", validated.spec.protocols["passk"]))
