"""Pricing never changes what a study runs: the seed specs plan the run ids and protocol hashes they
planned before the rollout model, the hardware profiles and the published checks were added
(`seed_ids.json`, planned by the code before those changes), and a dry run on any profile, with a
user's hardware file, a price and a currency, plans the same runs. (specs/smoke.yaml and
specs/verl-cpu.yaml are left out: their tiny model is built under the cache folder, whose path is in
their ids.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.price.study import price_plan
from engine.runs.preflight import preflight
from engine.spec.validated import protocol_sha256

REPO = Path(__file__).resolve().parents[2]
GOLDEN = json.loads((Path(__file__).with_name("seed_ids.json")).read_text())


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("RLVR_RUN_CACHE_DIR", str(tmp_path / "cache"))


def planned(path: Path):
    checked = preflight(path, content=False)
    protocols = {}
    for run in checked.plan.runs:
        for use, protocol in (run.config.get("protocols") or {}).items():
            protocols[str(protocol.get("name") or use)] = protocol_sha256(protocol)
    return checked, {"ids": sorted(r.id for r in checked.plan.runs), "protocols": protocols}


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_the_seed_specs_plan_the_runs_they_planned_before(name):
    path = REPO / "specs" / ("recipes/" if name.startswith("deepcoder") else "") / name
    assert planned(path)[1] == GOLDEN[name]


def test_a_dry_run_on_other_hardware_with_a_price_plans_the_same_runs(tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text("profiles:\n  h100-x2:\n    description: twice the memory\n    slot: GPU\n    slots_per_node: 8\n"
                    "    params_b: 7.6\n    scaled_from: h100\n    datasheet: {memory_gb: 160, memory_tb_s: 6.7, "
                    "bf16_tflops: 1978, source: made up for the test}\n")
    checked, before = planned(REPO / "specs" / "recipes" / "deepcoder-14b.yaml")
    for gpu_type in ("h100", "h20", "h100-x2"):
        price_plan(checked.plan, checked.validated, gpu_type=gpu_type, price=2.5, currency="USD", draws=1,
                   hardware=mine)
    assert planned(REPO / "specs" / "recipes" / "deepcoder-14b.yaml")[1] == before == GOLDEN["deepcoder-14b.yaml"]
