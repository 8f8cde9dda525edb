"""Progress that means something: the current attempt's steps (before it logged one, the
checkpoint it resumes from), out of the declared `max_steps` until the trainer says; an ETA that
is unknown shown unknown, never 0 s; the study's time left never shorter than a running run's ETA;
`status --watch` waits for a study whose runner has not written its first run yet."""

from __future__ import annotations

import json
import shutil
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from engine.runs.lineage import PlanRecords, RunRecord, RunState, SpecRecord, open_lineage

S = RunState
CONFIG = {"trainer": "verl", "kind": "sft", "datasets": {"train": {"uses": ["train"], "source": "mbpp",
                                                                  "split": "train"}},
          "hparams": {"max_steps": 40, "train_batch_size": 16}, "resources": {"gpus": 8}}


def _study(tmp_path: Path, *, started_ago_s: float, attempts: int = 1) -> Path:
    run_dir = tmp_path / "runs" / "s" / "train1"
    (run_dir / "logs").mkdir(parents=True)
    path = tmp_path / "runs" / "lineage.sqlite"
    at = (datetime.now(timezone.utc) - timedelta(seconds=started_ago_s)).isoformat(timespec="milliseconds")
    with open_lineage(path) as lineage:
        lineage.record_spec(SpecRecord(name="s", path=str(tmp_path / "s.yaml"), sha256="s" * 64, text="name: s\n"))
        lineage.record_plan_records(PlanRecords(runs=[RunRecord(
            id="train1", spec_name="s", phase="sft", seed=1, kind="sft", config_json=json.dumps(CONFIG),
            run_dir=str(run_dir))]))
        for n in range(1, attempts + 1):
            lineage.set_state("train1", S.queued)
            lineage.set_state("train1", S.running, f"attempt {n}", attempt=n, at=at if n == attempts else None)
            if n < attempts:
                lineage.set_state("train1", S.failed, "runner died")
    from engine.resources import shipped

    (tmp_path / "registry").mkdir()
    shutil.copy(shipped("registry") / "hardware.yaml", tmp_path / "registry" / "hardware.yaml")
    return run_dir


def _eta(tmp_path: Path):
    from engine.price.progress import study_eta

    with open_lineage(tmp_path / "runs" / "lineage.sqlite", readonly=True) as lineage:
        return study_eta(lineage, "s", gpu_type="h100", draws=5)


def test_steps_are_of_the_declared_max_steps_and_of_the_current_attempt_only(tmp_path):
    run_dir = _study(tmp_path, started_ago_s=5, attempts=2)
    # Attempt 1 logged up to step 57 and saved a checkpoint at 40; attempt 2 has logged nothing yet.
    (run_dir / "logs" / "metrics.1.jsonl").write_text("\n".join(json.dumps({"step": s}) for s in range(1, 58)))
    (run_dir / "checkpoints" / "checkpoint-40").mkdir(parents=True)
    (run_dir / "checkpoints" / "checkpoint-40" / "trainer_state.json").write_text("{}")
    (row,) = _eta(tmp_path).runs
    assert (row.done, row.total, row.what) == (40, 40, "steps")  # not 57 of ?
    (run_dir / "logs" / "metrics.2.jsonl").write_text(json.dumps({"step": 41}))
    (row,) = _eta(tmp_path).runs
    assert row.done == 41


def test_an_eta_past_its_forecast_with_no_pace_is_unknown_and_the_time_left_covers_every_known_eta(tmp_path):
    _study(tmp_path, started_ago_s=10 * 24 * 3600)  # far past any forecast, and no step logged
    eta = _eta(tmp_path)
    (row,) = eta.runs
    assert row.eta_s is None and eta.unknown == 1

    from rich.console import Console

    from engine.cli.status_view import render_eta

    console = Console(width=200, record=True)
    console.print(render_eta(eta))
    text = console.export_text()
    assert "│ unknown │" in text and "time left on 8 h100 slot(s): unknown;" in text and " 0s" not in text


def test_the_time_left_is_never_shorter_than_a_running_runs_eta(tmp_path):
    run_dir = _study(tmp_path, started_ago_s=600)
    (run_dir / "logs" / "metrics.1.jsonl").write_text("\n".join(json.dumps({"step": s}) for s in range(1, 5)))
    eta = _eta(tmp_path)
    (row,) = eta.runs
    assert row.eta_s is not None and row.eta_s > 0  # 4 of 40 steps in 10 min: its own pace
    assert eta.remaining_s.p10 >= row.eta_s and eta.remaining_s.p50 >= row.eta_s


def test_status_watch_waits_for_a_study_that_has_not_written_its_first_run(tmp_path):
    from engine.cli import main

    result = {}
    watcher = threading.Thread(target=lambda: result.setdefault(
        "rc", main(["status", "s", "--runs-dir", str(tmp_path / "runs"), "--watch", "--every", "0.1"])), daemon=True)
    watcher.start()
    time.sleep(1.5)
    assert watcher.is_alive() and "rc" not in result  # before: "no runs of spec" and exit at once
    with open_lineage(tmp_path / "runs" / "lineage.sqlite") as lineage:
        lineage.record_plan_records(PlanRecords(runs=[RunRecord(id="r", spec_name="s", phase="p", kind="eval")]))
        lineage.set_state("r", S.queued)
        lineage.set_state("r", S.running, "attempt 1", attempt=1)
        lineage.set_state("r", S.succeeded, "done")
    watcher.join(timeout=30)
    assert result.get("rc") == 0
