"""A run's time is the sum of its attempts, read from lineage's events: the cost page, `price
--fit`, forecast against actual and the ETA read it there, never the last attempt's stamps alone."""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timedelta, timezone

from engine.price.study import attributed_seconds
from engine.runs.lineage import (
    AttemptRecord,
    Event,
    PlanRecords,
    RunRecord,
    RunState,
    SpecRecord,
    open_lineage,
    run_times,
)

S = RunState
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _at(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat()


def _event(run_id: str, seconds: float, before, after, reason: str = "") -> Event:
    return Event(run_id=run_id, time=_at(seconds), from_state=before, to_state=after, reason=reason)


def _resumed(run_id: str = "r") -> list[Event]:
    """Attempt 1 ran 100 s and was killed; the study sat stopped for an hour; attempt 2 ran 60 s."""
    return [_event(run_id, 0, None, S.planned), _event(run_id, 0, S.planned, S.queued),
            _event(run_id, 0, S.queued, S.running, "attempt 1"), _event(run_id, 100, S.running, S.cancelled),
            _event(run_id, 3700, S.cancelled, S.queued), _event(run_id, 3700, S.queued, S.running, "attempt 2"),
            _event(run_id, 3760, S.running, S.succeeded)]


def test_a_resumed_runs_time_is_the_sum_of_its_attempts():
    times = run_times(_resumed(), [AttemptRecord(run_id="r", attempt=1), AttemptRecord(run_id="r", attempt=2)])
    (first, second) = times["r"].attempts
    assert (first.number, first.seconds(), first.ended) == (1, 100, S.cancelled)
    assert (second.number, second.seconds(), second.ended) == (2, 60, S.succeeded)
    assert times["r"].seconds() == 160  # not 60 (the last attempt), nor 3760 (first start to last finish)
    # what forecast against actual and `price --fit` compare with a forecast
    record = RunRecord(id="r", spec_name="s", phase="p", kind="eval", state=S.succeeded,
                       started_at=_at(3700), finished_at=_at(3760))
    assert attributed_seconds([record], {"r": 100.0}, times) == {"r": 160}


def test_a_running_attempt_counts_until_now_and_a_process_shared_attempt_names_its_process():
    events = [_event("a", 0, S.queued, S.running, "attempt 3"),
              _event("b", 0, S.queued, S.running, "attempt 1 in the process of a")]
    times = run_times(events, [AttemptRecord(run_id="a", attempt=3), AttemptRecord(run_id="b", attempt=1, leader="a")])
    assert times["a"].current.end is None and times["a"].current.number == 3
    assert times["a"].seconds(now=T0 + timedelta(seconds=42)) == 42
    assert times["b"].current.process == "a"


def test_a_dead_runners_run_ends_at_its_last_heartbeat(tmp_path):
    """The run reaped after its runner died failed when it stopped beating, not when the next runner
    found it: the hours between hold no work."""
    path = tmp_path / "lineage.sqlite"
    with open_lineage(path) as lineage:
        lineage.record_plan_records(PlanRecords(runs=[RunRecord(id="r", spec_name="s", phase="p", kind="eval")]))
        lineage.set_state("r", S.queued)
        started = lineage.set_state("r", S.running, "attempt 1")
        beat = (datetime.fromisoformat(started.started_at) + timedelta(seconds=30)).isoformat()
        rec = lineage.set_state("r", S.failed, "runner died", at=beat)
        assert rec.finished_at == beat
        assert abs(lineage.run_times(["r"])["r"].seconds() - 30) < 1e-6


def test_the_runner_reaping_a_dead_runners_run_ends_its_attempt_at_its_last_heartbeat(tmp_path):
    from engine.runs.executors.local import LocalExecutor
    from engine.runs.schedule import recover_dead_runs

    with open_lineage(tmp_path / "lineage.sqlite") as lineage:
        lineage.record_plan_records(PlanRecords(runs=[RunRecord(id="dead-run-x", spec_name="s", phase="p", kind="eval")]))
        lineage.set_state("dead-run-x", S.queued)
        started = datetime.fromisoformat(lineage.set_state("dead-run-x", S.running, "attempt 1").started_at)
        beat = (started + timedelta(seconds=12)).isoformat()
        lineage.db["runs"].update("dead-run-x", {"heartbeat_at": beat})  # then the runner died, long ago
        recover_dead_runs(lineage, LocalExecutor(cpus=1), stale_s=60, grace_s=0.1)
        assert lineage.run("dead-run-x").finished_at == beat
        assert abs(lineage.run_times(["dead-run-x"])["dead-run-x"].seconds() - 12) < 1e-6


def test_the_eta_paces_a_resumed_run_on_what_this_attempt_did(tmp_path):
    """Attempt 1 logged steps 1-5 of 10; attempt 2 resumed from the checkpoint at step 3 and has
    logged steps 4-5. Its pace is 2 steps in its own seconds, not 5 (earlier work counted against
    this attempt's time made a resumed run look fast)."""
    from engine.price.progress import study_eta
    from engine.resources import shipped

    run_dir = tmp_path / "runs" / "s" / "train1"
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "outputs").mkdir()
    log = lambda steps: "\n".join(json.dumps({"step": s, "data": {}}) for s in steps)  # noqa: E731
    (run_dir / "logs" / "metrics.1.jsonl").write_text(log(range(1, 6)))
    (run_dir / "logs" / "metrics.2.jsonl").write_text(log((4, 5)))
    (run_dir / "outputs" / "training.json").write_text(json.dumps({"trainer": "trl", "expected_steps": 10}))
    config = {"trainer": "verl", "kind": "sft", "datasets": {"train": {"uses": ["train"], "source": "mbpp",
                                                                        "split": "train"}},
              "hparams": {"epochs": 1, "train_batch_size": 16}, "resources": {"gpus": 8}}
    path = tmp_path / "runs" / "lineage.sqlite"
    with open_lineage(path) as lineage:
        lineage.record_spec(SpecRecord(name="s", path=str(tmp_path / "s.yaml"), sha256="s" * 64, text="name: s\n"))
        lineage.record_plan_records(PlanRecords(runs=[RunRecord(
            id="train1", spec_name="s", phase="sft", seed=1, kind="sft", config_json=json.dumps(config),
            run_dir=str(run_dir))]))
        lineage.set_state("train1", S.queued)
        lineage.set_state("train1", S.running, "attempt 1", attempt=1)
        lineage.set_state("train1", S.cancelled, "interrupted")
        lineage.set_state("train1", S.queued)
        lineage.set_state("train1", S.running, "attempt 2", attempt=2)
    registry = tmp_path / "registry"
    registry.mkdir()
    shutil.copy(shipped("registry") / "hardware.yaml", registry / "hardware.yaml")
    with open_lineage(path, readonly=True) as lineage:
        (row,) = study_eta(lineage, "s", gpu_type="h100", draws=5).runs
    assert (row.done, row.done_at_start, row.total) == (5, 3, 10)
    assert abs(row.eta_s - row.elapsed_s * 5 / 2) < 1e-6


def test_status_shows_a_resumed_runs_time_as_the_sum_of_its_attempts(tmp_path):
    """`status` read the last attempt's stamps: a run killed after 100 s and resumed for 60 s read 60 s."""
    from engine.runs.status import collect_status

    with open_lineage(tmp_path / "lineage.sqlite") as lineage:
        lineage.record_plan_records(PlanRecords(runs=[RunRecord(id="r", spec_name="s", phase="p", kind="eval")]))
        lineage.db["events"].insert_all([e.model_dump(mode="json") for e in _resumed()[2:]])
        lineage.db["runs"].update("r", {"state": "succeeded", "started_at": _at(3700), "finished_at": _at(3760)})
    [row] = collect_status(tmp_path, "s").runs
    assert row.duration_s == 160


def test_a_process_shared_with_a_run_of_an_older_plan_is_split_with_it():
    """Two evaluations of one checkpoint ran in one 60 s process; an edit then replaced the one whose
    process it was (its final protocol changed). The current evaluation holds its share of the
    process, not the whole: the replaced run, with no forecast of its own, weighs as the others do."""
    events = [_event("leader", 0, S.queued, S.running, "attempt 1"),
              _event("follower", 0, S.queued, S.running, "attempt 1 in the process of leader"),
              _event("follower", 60, S.running, S.succeeded), _event("leader", 60, S.running, S.succeeded)]
    follower = RunRecord(id="follower", spec_name="s", phase="p", kind="eval", state=S.succeeded,
                         started_at=_at(0), finished_at=_at(60))
    rows = [AttemptRecord(run_id="leader", attempt=1), AttemptRecord(run_id="follower", attempt=1, leader="leader")]
    assert attributed_seconds([follower], {"follower": 100.0}, run_times(events, rows)) == {"follower": 30.0}
    # without the older run's events (what the callers passed before), the follower was charged all 60 s
    assert attributed_seconds([follower], {"follower": 100.0},
                              run_times([e for e in events if e.run_id == "follower"], rows)) == {"follower": 60.0}


def test_the_pages_read_an_attempts_queue_and_process_from_its_row_never_from_its_events_words(tmp_path):
    """An attempt's queue wait and its process are typed rows of lineage's `attempts`; the words of
    its `running` event are for people. A Slurm attempt cancelled after six hours PENDING held no
    work, whatever its event says: with the next attempt's hour on a node, one hour of wall."""
    from engine.report.panels import training_cost_table
    from engine.report.study import load_study

    with open_lineage(tmp_path / "lineage.sqlite") as lineage:
        lineage.record_plan_records(PlanRecords(runs=[RunRecord(id="t", spec_name="s", phase="sft", kind="sft")]))
        lineage.set_state("t", S.queued, at=_at(0))
        lineage.set_state("t", S.running, "submitted to Slurm", attempt=1, queued=True, at=_at(0))
        lineage.set_state("t", S.cancelled, "Ctrl-C", at=_at(6 * 3600))
        lineage.set_state("t", S.queued, at=_at(6 * 3600))
        lineage.set_state("t", S.running, "submitted to Slurm", attempt=2, queued=True, at=_at(6 * 3600))
        lineage.record_began("t", _at(7 * 3600), "its job began")
        lineage.set_state("t", S.succeeded, "exit 0", at=_at(8 * 3600))
        study = load_study(lineage, "s")
    [row] = training_cost_table(study).rows
    assert row[3] == "60.0 min", row  # not 7.0 h: the six hours PENDING held no work
