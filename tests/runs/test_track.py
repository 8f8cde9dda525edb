"""A run's numbers reach the user's trackers once it is ingested: its config (phase, variant, seed,
run id, spec hash), its training curves and its evaluation metrics per dataset, grouped by study
and tagged phase/variant/seed. Each tracker is read back from its own storage: W&B's offline run
files, a real MLflow tracking server on loopback (sqlite backend), TensorBoard's event files."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from engine.runs.lineage import open_lineage
from engine.runs.track import TRACKING_LOG, track, track_quietly

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "report"))
from synthetic import SPEC_TEXT, build  # noqa: E402  (tests/report/synthetic.py)
from wandb_files import read_run  # noqa: E402  (tests/runs/wandb_files.py)

TRAINED, EVALUATED, SPARSE = "grpo--1", "eval-grpo--1-final", "eval-grpo-grpo_sparse-1-final"


def _study(root: Path, tracking: str) -> Path:
    build(root, seeds=1, problems=4, phases=("sft", "grpo"), spec_text=SPEC_TEXT + "tracking:\n" + tracking)
    return root / "lineage.sqlite"


def _track(lineage_path: Path, *run_ids: str) -> None:
    with open_lineage(lineage_path) as lineage:
        for rid in run_ids:
            assert track(lineage, rid, lineage.run(rid).run_dir and Path(lineage.run(rid).run_dir))


def test_wandb_offline_runs_hold_config_curves_and_evaluations(tmp_path):
    lineage = _study(tmp_path, f"  wandb: {{mode: offline, dir: {tmp_path / 'wb'}}}\n")
    _track(lineage, TRAINED, EVALUATED, SPARSE)
    runs = _offline_runs(tmp_path / "wb" / "wandb", {TRAINED, EVALUATED, SPARSE})
    trained, evaluated, sparse = runs[TRAINED], runs[EVALUATED], runs[SPARSE]
    assert trained.group == evaluated.group == "synth" and trained.name == "grpo seed 1 (grpo)"
    assert {"phase:grpo", "variant:none", "seed:1"} <= set(trained.tags)
    assert {"phase:grpo", "variant:grpo_sparse", "seed:1", "kind:eval"} <= set(sparse.tags)
    config = trained.config
    assert (config["phase"], config["variant"], config["seed"], config["run_id"]) == ("grpo", "none", "1", TRAINED)
    assert config["spec_sha256"] == "s" * 64 and config["reward"] == "dense"
    assert [trained.history[s]["reward_mean"] for s in (1, 10)] == pytest.approx([0.11, 1.01])
    assert evaluated.summary["test/accepted@1"] == pytest.approx(_recorded(lineage, EVALUATED, "test", "accepted@1"))
    assert "test/errors/WRONG_ANSWER" in evaluated.summary


def _offline_runs(folder: Path, expected: set[str], wait_s: float = 60.0) -> dict:
    """The offline runs in `folder`: W&B's service writes a run's file after `finish()` returns
    (seconds later on a loaded machine), so the last one may need a moment to appear whole."""
    deadline = time.monotonic() + wait_s
    while True:
        runs = {r.run_id: r for r in map(read_run, folder.glob("offline-run-*/run-*.wandb"))}
        if expected <= set(runs) and all(runs[i].config for i in expected) or time.monotonic() > deadline:
            return runs
        time.sleep(0.5)


def _recorded(lineage_path: Path, run_id: str, dataset: str, name: str) -> float:
    with open_lineage(lineage_path, readonly=True) as lineage:
        return next(m.value for m in lineage.metrics(run_id) if m.dataset == dataset and m.name == name)


def test_tensorboard_event_files_hold_curves_and_evaluations_per_run(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    lineage = _study(tmp_path, "  tensorboard: {}\n")
    _track(lineage, TRAINED, EVALUATED, SPARSE)
    root = tmp_path / "synth" / "tensorboard"  # one folder per study, a run per phase/variant/seed
    [trained] = (root / "grpo" / "none" / "seed-1").glob("grpo-*")
    [sparse] = (root / "grpo" / "grpo_sparse" / "seed-1").glob("eval-*")
    curves = EventAccumulator(str(trained)).Reload()
    assert [e.value for e in curves.Scalars("reward_mean")][:2] == pytest.approx([0.11, 0.21])
    assert "grpo--1" in curves.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    scores = EventAccumulator(str(sparse)).Reload()
    [accepted] = scores.Scalars("test/accepted@1")
    assert accepted.value == pytest.approx(_recorded(lineage, SPARSE, "test", "accepted@1"))


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """A real MLflow tracking server on loopback with a sqlite backend (~30 s to start here)."""
    root = tmp_path_factory.mktemp("mlflow")
    port = _port()
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{root / 'mlflow.sqlite'}",
         "--default-artifact-root", str(root / "artifacts"), "--host", "127.0.0.1", "--port", str(port),
         "--workers", "1"], stdout=(root / "server.log").open("w"), stderr=subprocess.STDOUT,
        env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"})
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{uri}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert server.poll() is None and time.monotonic() < deadline, (root / "server.log").read_text()[-2000:]
            time.sleep(0.5)
        yield uri
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.mark.slow
def test_mlflow_runs_on_a_real_server_hold_config_curves_and_evaluations(tmp_path, mlflow_server):
    from mlflow.tracking import MlflowClient

    lineage = _study(tmp_path, f"  mlflow: {{tracking_uri: '{mlflow_server}'}}\n")
    _track(lineage, TRAINED, EVALUATED, SPARSE)
    _track(lineage, EVALUATED)  # ingested again: the same MLflow run, not a second one
    client = MlflowClient(tracking_uri=mlflow_server)
    experiment = client.get_experiment_by_name("synth")
    runs = {r.data.tags["rlvr_run_id"]: r for r in client.search_runs([experiment.experiment_id])}
    assert set(runs) == {TRAINED, EVALUATED, SPARSE}
    trained, sparse = runs[TRAINED], runs[SPARSE]
    assert trained.info.run_name == "grpo seed 1 (grpo)"
    assert (trained.data.tags["phase"], trained.data.tags["variant"], trained.data.tags["seed"]) == ("grpo", "none", "1")
    assert sparse.data.tags["variant"] == "grpo_sparse"
    assert trained.data.params["spec_sha256"] == "s" * 64 and trained.data.params["reward"] == "dense"
    history = client.get_metric_history(trained.info.run_id, "reward_mean")
    assert sorted((m.step, round(m.value, 6)) for m in history)[:2] == [(1, 0.11), (2, 0.21)]
    assert sparse.data.metrics["test/accepted_at_1"] == pytest.approx(_recorded(lineage, SPARSE, "test", "accepted@1"))
    # the tracker's own compare view: dense against sparse, by tag
    found = client.search_runs([experiment.experiment_id], filter_string="tags.variant = 'grpo_sparse' and tags.kind = 'eval'")
    assert [r.data.tags["rlvr_run_id"] for r in found] == [SPARSE]


def test_a_tracker_that_refuses_is_kept_in_the_run_log_not_a_failed_run(tmp_path):
    lineage = _study(tmp_path, "  mlflow: {experiment_name: x}\n")  # no tracking_uri
    with open_lineage(lineage) as db:
        why = track_quietly(db, EVALUATED, Path(db.run(EVALUATED).run_dir))
    assert why and "tracking_uri" in why
    assert "tracking_uri" in (tmp_path / "synth" / EVALUATED / TRACKING_LOG).read_text()
    # the user reads the pages (and the tracker), not every run's logs: the index says which run is missing
    from engine.report.generate import write_reports

    [report] = write_reports(tmp_path, failures=False)
    index = (report.dir / "index.md").read_text()
    assert "Not in the spec's trackers: 1 run(s)" in index, index
    line = next(line for line in index.splitlines() if EVALUATED in line and "tracking_uri" in line)
    assert line.startswith("- [") and "mlflow" in line and str(tmp_path) not in line, line


def test_a_run_that_reaches_its_trackers_again_is_no_longer_said_missing(tmp_path):
    lineage = _study(tmp_path, f"  tensorboard: {{log_dir: {tmp_path / 'tb'}}}\n")
    log = tmp_path / "synth" / EVALUATED / TRACKING_LOG
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("2026-01-01T00:00:00Z tensorboard: could not log run x: OSError: disk full\n")
    with open_lineage(lineage) as db:
        assert track_quietly(db, EVALUATED, Path(db.run(EVALUATED).run_dir)) is None
    assert not log.exists()


def test_the_trainers_live_runs_are_grouped_and_tagged_like_the_record():
    """trl's own W&B / MLflow run while it trains: the study's group, the run's tags, marked live."""
    import json

    from engine.plan.frozen import FrozenRun
    from engine.train.session import live_names

    frozen = FrozenRun.model_validate({"run_id": "grpo-abc", "kind": "grpo", "spec": "synth", "phase": "grpo",
                                       "variant": "grpo_sparse", "seed": 2, "base_model": {"path": "m"},
                                       "datasets": {}})
    names = live_names(frozen)
    assert names["WANDB_NAME"] == "grpo/grpo_sparse seed 2 (grpo, live)" and names["WANDB_RUN_GROUP"] == "synth"
    assert names["WANDB_TAGS"].split(",") == ["phase:grpo", "variant:grpo_sparse", "seed:2", "kind:grpo", "live:true"]
    assert names["MLFLOW_EXPERIMENT_NAME"] == "synth"
    assert json.loads(names["MLFLOW_TAGS"])["run_id"] == "grpo-abc"
