"""`--dry-run --executor slurm`: priced as the Slurm executor runs the study, one single-node job per
run with evaluations of one checkpoint sharing a job, on whole nodes, the queue wait left out."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from engine.errors import UserError
from engine.price.slurm import QUEUE_NOTE
from engine.price.study import price_plan
from engine.runs.preflight import preflight

REPO = Path(__file__).resolve().parents[2]
DEEPCODER = REPO / "specs" / "recipes" / "deepcoder-14b.yaml"


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("RLVR_RUN_CACHE_DIR", str(tmp_path / "cache"))


def checked_recipe(tmp_path: Path, gpus: int):
    data = yaml.safe_load(DEEPCODER.read_text())
    for phase in data["phases"].values():
        if "resources" in phase:
            phase["resources"]["gpus"] = gpus
    # Two evaluations of each checkpoint under one protocol: the executor runs them as one job.
    data["datasets"]["cc_valid"] = {"source": "codecontests", "split": "valid", "role": "valid"}
    data["evaluate"]["every_phase"] = {"datasets": ["cc_valid"], "protocol": "eval"}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return preflight(path, content=False)


def test_slurm_pricing_groups_evaluations_per_job_and_says_the_queue_is_left_out(tmp_path):
    checked = checked_recipe(tmp_path, gpus=8)
    on = {kind: price_plan(checked.plan, checked.validated, draws=1, executor=kind, gpu_type="h100").forecast
          for kind in ("slurm", "ray")}
    evals = [r for r in on["slurm"].runs if r.kind == "eval"]
    assert len(evals) == 4 and len({r.job for r in evals}) == 2  # a checkpoint's evaluations: one job
    assert len({r.job for r in on["ray"].runs if r.kind == "eval"}) == 4
    assert QUEUE_NOTE in on["slurm"].notes and QUEUE_NOTE not in on["ray"].notes
    # --gpus is whole nodes: 16 GPUs of 8-GPU nodes is two nodes, each run on one of them.
    two = price_plan(checked.plan, checked.validated, draws=1, executor="slurm", gpus=16, gpu_type="h100").forecast
    assert two.nodes == 2 and two.slots == 16
    with pytest.raises(UserError, match="is not whole h100 nodes"):
        price_plan(checked.plan, checked.validated, draws=1, executor="slurm", gpus=12, gpu_type="h100")


def test_a_run_larger_than_one_node_is_refused_as_the_executor_refuses_it(tmp_path):
    checked = checked_recipe(tmp_path, gpus=32)
    with pytest.raises(UserError, match="a Slurm job of the executor holds one node"):
        price_plan(checked.plan, checked.validated, draws=1, executor="slurm", gpu_type="h100")


def test_a_study_with_slurm_job_ids_in_lineage_is_priced_as_grouped(tmp_path):
    from engine.price.shapes import shape_of_records
    from engine.resources import shipped
    from engine.runs.lineage import RunRecord
    from engine.spec.registry import load_registry

    registry = load_registry(shipped("registry"))
    runs = [RunRecord(id=f"e{i}", spec_name="s", phase="base", kind="eval", run_dir=str(tmp_path), job_id="4711")
            for i in (1, 2)]
    assert shape_of_records("s", runs, [], registry).groups_evals


def test_a_dry_run_for_slurm_does_not_measure_the_cluster_by_this_machines_gpus(tmp_path):
    from engine.runs.pipeline import Planned, run_spec

    checked_recipe(tmp_path, gpus=8)
    planned = {}
    for kind in ("slurm", "local"):
        run_spec(tmp_path / "spec.yaml", runs_dir=tmp_path / "runs", dry_run=True, gpus=0, executor=kind,
                 on_event=lambda e, kind=kind: planned.update({kind: e}) if isinstance(e, Planned) else None)
    assert planned["slurm"].unmet == []  # a login node has no GPUs; its cluster's nodes do
    assert len(planned["local"].unmet) == 6
