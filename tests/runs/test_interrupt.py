"""A runner interrupted any way ends the same way: SIGINT, SIGTERM and SIGHUP (sent to it and its
reader, as a terminal does to a pipeline) and SIGPIPE (its reader, `| head`, gone) each stop its
children, record every run with its state (none left `running`), and say so in one line on
stderr; a runner killed outright shows as gone in `status` at once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from engine.runs.lineage import LINEAGE_FILE, RunState, open_lineage
from engine.runs.status import collect_status

DRIVER = Path(__file__).with_name("interrupt_driver.py")
S = RunState


def _jobs(runs: Path) -> Path:
    """Two long runs and one that ends a few seconds in (a state change after the reader left)."""
    entries = []
    for run_id, body in (("long1", "sleep 300"), ("long2", "sleep 300"), ("short", "sleep 4")):
        run_dir = runs / "t" / run_id
        run_dir.mkdir(parents=True)
        (run_dir / "launch.sh").write_text(f"echo $$ > {run_dir}/pid\n{body}\n")
        entries.append({"id": run_id, "run_dir": str(run_dir)})
    (runs / "jobs.json").write_text(json.dumps({"jobs": entries}))
    return runs / "jobs.json"


def _states(runs: Path) -> dict[str, RunState]:
    try:
        with open_lineage(runs / LINEAGE_FILE, readonly=True) as lineage:
            return {r.id: r.state for r in lineage.runs("t")}
    except Exception:  # not created yet
        return {}


def _wait(predicate, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _pid(runs: Path, run_id: str):
    """The pid its launch script wrote first thing, or None before it has (a loaded machine can
    be slower to start the script than the runner is to record the run as running)."""
    try:
        return int((runs / "t" / run_id / "pid").read_text())
    except (FileNotFoundError, ValueError):
        return None


def _start(tmp_path: Path):
    runs = tmp_path / "runs"
    jobs = _jobs(runs)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    runner = subprocess.Popen([sys.executable, str(DRIVER), str(jobs), str(runs)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env)
    reader = subprocess.Popen(["head", "-n", "100"], stdin=runner.stdout, stdout=subprocess.DEVNULL)
    runner.stdout.close()  # the reader's alone: when it goes, the runner's writes fail
    _wait(lambda: list(_states(runs).values()).count(S.running) == 3, "three runs running")
    _wait(lambda: all(_pid(runs, r) for r in ("long1", "long2", "short")), "three launch scripts started")
    pids = [_pid(runs, r) for r in ("long1", "long2")]
    return runs, runner, reader, pids


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE])
def test_an_interrupted_runner_whose_output_is_piped_to_head_leaves_no_run_running(tmp_path, sig):
    runs, runner, reader, pids = _start(tmp_path)
    try:
        if sig is signal.SIGPIPE:
            reader.kill()  # the reader goes; the runner learns it at its next line (the short run ending)
        else:
            reader.send_signal(sig)  # a terminal signals the whole pipeline
            runner.send_signal(sig)
        assert runner.wait(timeout=60) == 130
        stderr = runner.stderr.read()
    finally:
        runner.kill()
        reader.kill()
    states = _states(runs)
    assert states["long1"] is S.cancelled and states["long2"] is S.cancelled, states
    assert S.running not in states.values()
    assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"rlvr-run: t interrupted by {sig.name}: "), stderr
    assert ("2 cancelled" if sig is signal.SIGPIPE else "3 cancelled") in lines[0] and "no run left running" in lines[0]
    with open_lineage(runs / LINEAGE_FILE, readonly=True) as lineage:
        assert lineage.run("long1").reason == f"interrupted by {sig.name}"


def test_a_runner_killed_outright_shows_as_gone_in_status_at_once(tmp_path):
    runs, runner, reader, pids = _start(tmp_path)
    try:
        runner.kill()
        runner.wait(timeout=30)
        report = collect_status(runs)
        gone = {r.id: r.runner for r in report.runs if r.state is S.running}
        assert set(gone) == {"long1", "long2", "short"}
        assert all(why and why.startswith("runner gone (last heartbeat") for why in gone.values()), gone
    finally:
        reader.kill()
        for pid in pids + [_pid(runs, "short")]:
            try:
                os.killpg(pid, signal.SIGKILL)  # the dead runner's children: each its own session
            except ProcessLookupError:
                pass


def test_a_rerun_says_what_it_resumes_and_from_where(tmp_path):
    from engine.runs.executors.base import Job
    from engine.runs.executors.local import LocalExecutor
    from engine.runs.lineage import PlanRecords, RunRecord
    from engine.runs.schedule import execute

    run_dir = tmp_path / "t" / "sft1"
    (run_dir / "checkpoints" / "checkpoint-40").mkdir(parents=True)
    (run_dir / "checkpoints" / "checkpoint-40" / "trainer_state.json").write_text("{}")
    (run_dir / "checkpoints" / "checkpoint-60").mkdir()  # no trainer_state.json: an unfinished save
    (run_dir / "launch.sh").write_text("mkdir -p outputs && echo '{\"run_id\": \"t\", \"datasets\": []}' > "
                                       "outputs/metrics.json\n")
    job = Job(id="sft1", run_dir=run_dir, kind="eval")
    said = []
    with open_lineage(tmp_path / LINEAGE_FILE) as lineage:
        lineage.record_plan_records(PlanRecords(runs=[RunRecord(id="sft1", spec_name="t", phase="sft", kind="eval",
                                                                run_dir=str(run_dir))]))
        lineage.set_state("sft1", S.queued)
        lineage.set_state("sft1", S.running, "attempt 1", attempt=1)
        lineage.set_state("sft1", S.cancelled, "interrupted by SIGINT")
        result = execute([job], lineage, LocalExecutor(gpus=0, cpus=1), heartbeat_s=0.2,
                         on_resume=lambda run_id, what: said.append(f"{run_id}: {what}"))
    assert result.states == {"sft1": S.succeeded}
    assert said == ["sft1: resuming from checkpoint-40, attempt 2"]
