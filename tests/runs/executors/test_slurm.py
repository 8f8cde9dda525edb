"""The Slurm executor against a real single-node Slurm on localhost (munged, slurmctld, slurmd from a
generated slurm.conf): a toy study end to end with its runner killed mid-SFT and restarted, Ctrl-C,
jobs Slurm ends (cancelled by someone else, time limit). Without slurm-wlm and munge installed
those tests skip, saying how to install them; the rest need no cluster."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Optional

import pytest

from engine.cli.status_view import render_status
from engine.errors import UserError
from engine.report.generate import write_reports
from engine.runs.executors import slurm_commands
from engine.runs.executors.base import Executor, Job
from engine.runs.executors.slurm import SlurmExecutor, job_name_of, submit_environment
from engine.runs.executors.slurm_script import batch_script, exit_file_name
from engine.runs.lineage import LINEAGE_FILE, AttemptRecord, Event, PlanRecords, RunRecord, RunState, open_lineage, run_times
from engine.runs.pipeline import ExecutorChoice, run_spec
from engine.runs.schedule import execute, recover_dead_runs
from engine.runs.status import collect_status
from engine.spec.model import ExecutorSpec

# Every test that needs the local cluster lives in this file, which one xdist worker runs whole
# (`--dist loadfile` in the Makefile): the cluster fixture is per session, so each worker would
# start a Slurm of its own, and their free ports could race.
S = RunState
DRIVER = Path(__file__).with_name("slurm_driver.py")
TRAIN = "toy/plus_k_12\ntoy/times_k_10\n"
VALID = "toy/plus_k_10\ntoy/times_k_5\n"
TEST = "toy/count_above_17\ntoy/count_above_8\n"
# The smallest study with an SFT: base and SFT evaluated on two datasets each (those of one
# checkpoint share one job), SFT long enough to be killed in the middle of.
SPEC = """\
name: tiny-slurm
base_model: {{path: {model}}}
datasets:
  toy_train: {{source: toy, split: train, role: train, ids: train.txt}}
  toy_valid: {{source: toy, split: valid, role: valid, ids: valid.txt}}
  toy_test: {{source: toy, split: test, role: test, test_only: true, ids: test.txt}}
protocols:
  greedy: {{preset: greedy, max_tokens: 8}}
phases:
  base: {{kind: eval}}
  sft:
    kind: sft
    trainer: trl
    train: toy_train
    hparams: {{learning_rate: 5.0e-3, max_steps: {steps}, per_device_train_batch_size: 2, save_steps: {save}}}
seeds: [1]
evaluate:
  every_phase: {{datasets: [toy_valid], protocol: greedy}}
  final: {{datasets: [toy_test], protocol: greedy}}
allow:
  - {{rule: 3, datasets: [toy_train, toy_valid], reason: "toy families share one statement template"}}
executor: {{kind: slurm}}
"""


def write_spec(root: Path, model: Path, steps: int = 40, save: int = 40) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in (("train.txt", TRAIN), ("valid.txt", VALID), ("test.txt", TEST)):
        (root / name).write_text(text)
    spec = root / "spec.yaml"
    spec.write_text(SPEC.format(model=model, steps=steps, save=save))
    return spec


def make_job(root: Path, run_id: str, body: str = "", *, gpus: int = 0, cpus: int = 1, **more) -> Job:
    """A run dir whose launch.sh runs `body`, then writes (empty) eval outputs."""
    run_dir = root / "t" / run_id
    run_dir.mkdir(parents=True)
    (run_dir / "launch.sh").write_text(
        f"set -e\ncd {run_dir}\necho \"$RLVR_RUN_ID attempt $RLVR_ATTEMPT OMP=$OMP_NUM_THREADS\"\n{body}\n"
        "mkdir -p outputs && echo '{\"run_id\": \"t\", \"datasets\": []}' > outputs/metrics.json\n"
    )
    return Job(id=run_id, run_dir=run_dir, kind="eval", gpus=gpus, cpus=cpus, **more)


def wait_for(predicate, timeout_s: float = 120.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def lineage_row(runs: Path, run_id: str) -> Optional[RunRecord]:
    if not (runs / LINEAGE_FILE).exists():
        return None
    try:
        with open_lineage(runs / LINEAGE_FILE, readonly=True) as lineage:
            return lineage.run(run_id)
    except (KeyError, UserError):  # not recorded yet, or the runner is still creating the schema
        return None


def state_of(job_id: str) -> Optional[str]:
    found = slurm_commands.job_states([job_id]).get(job_id)
    return found.state if found else None


def all_job_names() -> list[str]:
    done = subprocess.run(["squeue", "-h", "-t", "all", "-o", "%j"], capture_output=True, text=True, check=True)
    return done.stdout.split()


# ---------------------------------------------------------------- without a cluster


def test_a_job_asks_slurm_for_its_resources_and_the_specs_settings(tmp_path):
    job = make_job(tmp_path, "r1", gpus=2, cpus=4, memory_gb=1.5)
    member = make_job(tmp_path, "r2")
    executor = SlurmExecutor(shared_dir=tmp_path, partition="gpu", account="lab", qos="high",
                             time_limit_h={"eval": 0.5}, sbatch_args=("--exclusive",), python="/venv/bin/python")
    assert isinstance(executor, Executor) and executor.groups
    log = tmp_path / "attempt-1.log"
    options = executor._options(job, job_name_of(job.id, 1), log)
    assert options == [f"--job-name=rlvr-r1-a1", f"--output={log}", "--open-mode=append", f"--chdir={job.run_dir}",
                       "--nodes=1", "--ntasks=1", "--cpus-per-task=4", "--no-requeue", "--gres=gpu:2", "--mem=1536M",
                       "--time=30", "--partition=gpu", "--account=lab", "--qos=high", "--exclusive"]
    # The run's own time limit wins over the executor's per kind.
    assert "--time=120" in executor._options(make_job(tmp_path, "r3", time_limit_h=2.0), "x", log)
    script = batch_script(job, 1, [member], python="/venv/bin/python")
    assert "export RLVR_RUN_ID=r1" in script and "export RLVR_PYTHON=/venv/bin/python" in script
    assert f"export RLVR_EVAL_ALSO={member.run_dir}" in script and "export RLVR_GROUP_RUN_IDS=r2" in script
    assert "CUDA_VISIBLE_DEVICES=''" not in script  # a GPU job gets Slurm's own
    assert "export CUDA_VISIBLE_DEVICES=''" in batch_script(member, 1, [], python="/venv/bin/python")
    assert str(member.run_dir / "logs") in script.split("for dir in", 1)[1]  # each run gets the exit file
    assert 'echo "$code group"' in script and 'echo "$code"' in batch_script(member, 1, [], python="/venv/bin/python")
    # A runner inside an allocation (salloc on a login node) passes on none of that job's settings.
    env = submit_environment({"SLURM_CONF": "/etc/slurm/x.conf", "SLURM_MEM_PER_NODE": "1000", "SLURM_JOB_ID": "7",
                              "SBATCH_ACCOUNT": "lab", "PATH": "/bin"})
    assert env == {"SLURM_CONF": "/etc/slurm/x.conf", "SBATCH_ACCOUNT": "lab", "PATH": "/bin"}


def test_the_slurm_choice_needs_shared_storage_and_the_spec_block_parses(tmp_path):
    spec = ExecutorSpec(kind="slurm", partition="gpu", time_limit_h={"sft": 4}, sbatch_args=["--constraint=a100"])
    choice = ExecutorChoice.of(spec, kind=None, address=None, runs_dir=tmp_path / "runs")
    assert choice.kind == "slurm" and choice.shared_dir == (tmp_path / "runs").resolve()
    with pytest.raises(UserError, match="not under the executor's shared_dir"):
        ExecutorChoice.of(ExecutorSpec(kind="slurm", shared_dir=str(tmp_path / "shared")), kind=None, address=None,
                          runs_dir=tmp_path / "elsewhere")
    with pytest.raises(UserError, match="working_dir is for Ray"):
        ExecutorChoice.of(ExecutorSpec(kind="slurm", transfer="working_dir"), kind=None, address=None,
                          runs_dir=tmp_path)
    with pytest.raises(ValueError, match="greater than 0"):
        ExecutorSpec(kind="slurm", time_limit_h={"sft": 0})
    # A key that is no run kind is the spec checks' (tests/specs/bad/executor_slurm.yaml).


def test_node_gpus_read_every_gres_spelling():
    assert slurm_commands.gpus_in_gres("gpu:4") == 4
    assert slurm_commands.gpus_in_gres("gpu:a100:4(S:0-1)") == 4
    assert slurm_commands.gpus_in_gres("gpu:a100:2(S:0),gpu:v100:2(S:1),mps:200") == 4
    assert slurm_commands.gpus_in_gres("(null)") == 0


def test_partition_time_limits_read_every_sinfo_spelling():
    assert slurm_commands.hours_of("2:00:00") == 2 and slurm_commands.hours_of("1-12:00:00") == 36
    assert slurm_commands.hours_of("30:00") == 0.5 and slurm_commands.hours_of("1:30:00") == 1.5
    assert slurm_commands.hours_of("infinite") is None and slurm_commands.hours_of("n/a") is None


def test_without_the_clients_the_slurm_executor_says_how_to_get_them(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch here
    with pytest.raises(UserError, match="not found: run rlvr-run on a node with the Slurm client commands"):
        ExecutorChoice.of(ExecutorSpec(kind="slurm"), kind=None, address=None, runs_dir=tmp_path).open(gpus=0, cpus=None)


def test_without_slurm_installed_its_tests_say_how_to_install_it(monkeypatch, tmp_path):
    from tests.runs.executors.slurm_cluster import missing

    monkeypatch.setenv("PATH", str(tmp_path))
    assert "apt-get install -y slurm-wlm munge" in missing()


def test_a_queued_attempts_time_starts_when_its_job_began_not_when_it_was_submitted():
    def event(run_id, time, from_, to, reason=""):
        return Event(run_id=run_id, time=f"2026-01-01T{time}:00.000+00:00", from_state=from_, to_state=to, reason=reason)

    times = run_times([
        # Six hours PENDING, then one hour on a node.
        event("r", "00:00", S.queued, S.running, "attempt 1, queued"), event("r", "06:00", S.running, S.running,
                                                                             "attempt 1 began"),
        event("r", "07:00", S.running, S.succeeded),
        # Cancelled while PENDING: no time; a member of another run's process keeps its leader.
        event("m", "00:00", S.queued, S.running, "attempt 2 in the process of r, queued"),
        event("m", "03:00", S.running, S.cancelled),
        # The local executor and Ray: no queue, the attempt's time is from its `running` event.
        event("l", "00:00", S.queued, S.running, "attempt 1"), event("l", "02:00", S.running, S.failed),
        # Still PENDING: running, but no time yet.
        event("p", "00:00", S.queued, S.running, "attempt 1, queued"),
    ], [AttemptRecord(run_id="r", attempt=1, queued=True), AttemptRecord(run_id="m", attempt=2, leader="r", queued=True),
        AttemptRecord(run_id="l", attempt=1), AttemptRecord(run_id="p", attempt=1, queued=True)])
    assert times["r"].seconds() == 3600 and times["r"].first_start.hour == 6
    assert times["m"].seconds() == 0 and times["m"].current.process == "r" and times["m"].current.number == 2
    assert times["l"].seconds() == 7200
    assert times["p"].seconds() == 0 and times["p"].current.end is None and times["p"].current.queued


def test_a_run_waiting_in_slurms_queue_has_not_begun_for_the_eta_nor_for_status(tmp_path):
    from engine.price.progress import study_eta
    from engine.resources import shipped
    from engine.runs.lineage import SpecRecord

    run_dir = tmp_path / "runs" / "s" / "train1"
    (run_dir / "outputs").mkdir(parents=True)
    (run_dir / "outputs" / "training.json").write_text(json.dumps({"trainer": "trl", "expected_steps": 10}))
    config = {"trainer": "verl", "kind": "sft", "datasets": {"train": {"uses": ["train"], "source": "mbpp",
                                                                        "split": "train"}},
              "hparams": {"epochs": 1, "train_batch_size": 16}, "resources": {"gpus": 8}}
    path = tmp_path / "runs" / LINEAGE_FILE
    two_hours_ago = (datetime.now(timezone.utc) - timedelta(hours=2)).isoformat(timespec="milliseconds")
    with open_lineage(path) as lineage:
        lineage.record_spec(SpecRecord(name="s", path=str(tmp_path / "s.yaml"), sha256="s" * 64, text="name: s\n"))
        lineage.record_plan_records(PlanRecords(runs=[RunRecord(
            id="train1", spec_name="s", phase="sft", seed=1, kind="sft", config_json=json.dumps(config),
            run_dir=str(run_dir))]))
        lineage.set_state("train1", S.queued)
        lineage.set_state("train1", S.running, "attempt 1, queued", attempt=1, at=two_hours_ago, queued=True)  # PENDING since
    registry = tmp_path / "registry"
    registry.mkdir()
    shutil.copy(shipped("registry") / "hardware.yaml", registry / "hardware.yaml")

    def eta_row():
        with open_lineage(path, readonly=True) as lineage:
            (row,) = study_eta(lineage, "s", gpu_type="h100", draws=5).runs
        return row

    row = eta_row()
    assert row.elapsed_s == 0 and row.eta_s == row.forecast_s
    assert [r.duration_s for r in collect_status(tmp_path / "runs").runs] == [0.0]
    ten_minutes_ago = (datetime.now(timezone.utc) - timedelta(minutes=10)).isoformat(timespec="milliseconds")
    with open_lineage(path) as lineage:
        lineage.record_began("train1", ten_minutes_ago, "attempt 1 began")
        lineage.record_began("train1", ten_minutes_ago, "attempt 1 began")  # a re-attached job says it again
        assert [e.reason for e in lineage.events("train1")][-2:] == ["attempt 1, queued", "attempt 1 began"]
    assert 600 <= eta_row().elapsed_s < 700
    assert 600 <= collect_status(tmp_path / "runs").runs[0].duration_s < 700


def _fake_squeue(tmp_path: Path, monkeypatch, line: str) -> None:
    """A squeue that answers `line` for every question: a state no test controller gives on
    demand (OUT_OF_MEMORY after the script exited), injected in front of the real one."""
    shim = tmp_path / "fake-squeue"
    shim.mkdir()
    (shim / "squeue").write_text(f"#!/bin/bash\necho {shlex.quote(line)}\n")
    (shim / "squeue").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim}:{os.environ['PATH']}")


def test_launch_shs_exit_file_decides_and_slurms_end_state_is_detail(tmp_path, monkeypatch):
    job = make_job(tmp_path, "r1")
    _fake_squeue(tmp_path, monkeypatch, f"4242|OUT_OF_MEMORY|None|{job.run_dir}")
    executor = SlurmExecutor(shared_dir=tmp_path, status_every_s=0)
    log = job.run_dir / "logs" / "attempt-1.log"
    log.parent.mkdir(parents=True)
    log.write_text("")
    started = executor._started(job, 1, log, "4242", ())
    # No exit file: the batch script never got to write it, Slurm's state decides.
    assert executor.poll(started) == 1 and "OUT_OF_MEMORY" in started.detail
    # The script wrote its exit code 0 before Slurm called the job OUT_OF_MEMORY: a success, said.
    (job.run_dir / "logs" / "slurm-4242.exit").write_text("0\n")
    started = executor._started(job, 1, log, "4242", ())
    assert executor.poll(started) == 0
    assert started.detail == "Slurm job 4242 OUT_OF_MEMORY after launch.sh exited with 0"


def test_ci_finds_slurms_daemons_in_sbin_off_the_path_and_installs_nothing(tmp_path):
    from tests.runs.executors.slurm_cluster import missing

    if missing():
        pytest.skip(f"no local Slurm cluster: {missing()}")
    repo = Path(__file__).resolve().parents[3]
    (tmp_path / ".ci").mkdir()
    shutil.copy(repo / ".ci" / "run", tmp_path / ".ci" / "run")
    (tmp_path / "Makefile").write_text("test-all:\n\t@echo tests ran\n")
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "apt-get").write_text("#!/bin/sh\necho apt-get \"$@\"\n")
    (shim / "apt-get").chmod(0o755)
    # A user's PATH without /usr/sbin (where Debian puts slurmctld, slurmd and munged).
    done = subprocess.run(["bash", str(tmp_path / ".ci" / "run")], capture_output=True, text=True,
                          env={"PATH": f"{shim}:/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "tests ran" and "apt-get" not in done.stdout + done.stderr


def test_one_xdist_worker_runs_every_test_of_the_local_cluster():
    # `make test`/`test-all` run in workers; one file run whole by one worker keeps one cluster.
    here = Path(__file__).resolve()
    makefile = (here.parents[3] / "Makefile").read_text()
    assert [line for line in makefile.splitlines() if "-m pytest" in line and "--dist loadfile" not in line] == []
    users = {p.name for p in here.parents[2].rglob("test_*.py")
             if "slurm_env" in p.read_text() or "slurm_cluster" in p.read_text()}
    assert users == {here.name}


# ---------------------------------------------------------------- a real cluster


@pytest.mark.slow  # a real Slurm and a toy study with an SFT on it: `make test-all` and CI run it
def test_a_study_on_slurm_survives_its_runner_killed_mid_sft_and_submits_nothing_twice(slurm_env, tiny_model, tmp_path):
    spec, runs = write_spec(tmp_path, tiny_model), tmp_path / "runs"
    runner = subprocess.Popen([sys.executable, "-m", "engine.cli", "run", str(spec), "--runs-dir", str(runs),
                               "--executor", "slurm"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env=os.environ.copy())
    holder = {}

    def sft_training() -> bool:
        try:
            with open_lineage(runs / LINEAGE_FILE, readonly=True) as lineage:
                sft = [r for r in lineage.runs("tiny-slurm") if r.kind == "sft"]
        except UserError:
            return False
        if not sft or not sft[0].job_id or state_of(sft[0].job_id) != "RUNNING":
            return False
        holder["sft"] = sft[0]
        log = Path(sft[0].run_dir) / "logs" / "attempt-1.log"
        return log.is_file() and "step 1/" in log.read_text()  # training, not loading

    try:
        wait_for(sft_training, timeout_s=300, what="the SFT job to train on Slurm")
    finally:
        runner.kill()  # kill -9 mid-SFT: its job goes on on the cluster
        runner.wait()
    sft = holder["sft"]
    assert state_of(sft.job_id) in ("RUNNING", "COMPLETING", "COMPLETED")
    outcome = run_spec(spec, runs_dir=runs, executor="slurm", heartbeat_s=0.5)
    assert set(outcome.result.states.values()) == {S.succeeded}, outcome.result.states
    with open_lineage(runs / LINEAGE_FILE, readonly=True) as lineage:
        recs = {r.id: r for r in lineage.runs("tiny-slurm")}
        events = {run_id: [e.to_state for e in lineage.events(run_id)] for run_id in recs}
        samples = sorted({m.name: m.value for m in lineage.metrics(r.id)}["samples"]
                         for r in recs.values() if r.kind == "eval")
    assert samples == [2, 2, 2, 2]
    after = recs[sft.id]
    assert after.attempt == 1 and after.job_id == sft.job_id and S.failed not in events[sft.id]
    names = all_job_names()
    assert len(names) == len(set(names)), f"a job was submitted twice: {names}"
    assert all(name.endswith("-a1") for name in names)
    # Two evaluations of each checkpoint, one job each: base, SFT, and its two evaluations' job.
    job_ids = {r.job_id for r in recs.values()}
    assert len(job_ids) == 3 and all(j and j.isdigit() for j in job_ids)
    log = (Path(sft.run_dir) / "logs" / "attempt-1.log").read_text()
    assert f"as Slurm job rlvr-{sft.id}-a1" in log and f"re-attached to Slurm job {sft.job_id}" in log
    assert f"Slurm job {sft.job_id} started on" in log and "Slurm job" in log.split("re-attached", 1)[1]
    assert (Path(sft.run_dir) / "logs" / f"slurm-{sft.job_id}.exit").read_text().strip() == "0"


@pytest.mark.slow  # a real Slurm and a toy study with an SFT on it: `make test-all` and CI run it
def test_an_sft_job_slurm_ends_is_a_failed_attempt_and_resumes_from_its_checkpoint(slurm_env, tiny_model, tmp_path):
    spec, runs = write_spec(tmp_path, tiny_model, steps=60, save=10), tmp_path / "runs"
    results = {}
    thread = threading.Thread(target=lambda: results.update(first=run_spec(spec, runs_dir=runs, heartbeat_s=0.5)))
    thread.start()
    holder = {}

    def checkpointed() -> bool:
        sft = next((r for r in (lineage_row(runs, run_id) for run_id in _run_ids(runs)) if r and r.kind == "sft"), None)
        if sft is None or not sft.job_id:
            return False
        holder["sft"] = sft
        return any(Path(sft.run_dir).rglob("checkpoint-*/trainer_state.json"))

    wait_for(checkpointed, timeout_s=300, what="the SFT's first checkpoint")
    sft = holder["sft"]
    slurm_commands.cancel([sft.job_id])  # as a preemption or an administrator would
    thread.join(timeout=120)
    assert not thread.is_alive()
    rec = lineage_row(runs, sft.id)
    assert rec.state is S.failed and f"Slurm job {sft.job_id} CANCELLED" in rec.reason, rec.reason
    first_log = (Path(sft.run_dir) / "logs" / "attempt-1.log").read_text()
    assert f"# rlvr-run: Slurm job {sft.job_id} CANCELLED" in first_log
    pages = write_reports(runs, "tiny-slurm", failures=False)[0].dir
    assert any(f"Slurm job {sft.job_id} CANCELLED" in page.read_text() for page in pages.glob("*.md"))
    again = run_spec(spec, runs_dir=runs, heartbeat_s=0.5)
    assert set(again.result.states.values()) == {S.succeeded}, again.result.states
    rec = lineage_row(runs, sft.id)
    assert rec.attempt == 2 and rec.job_id != sft.job_id
    assert "resuming from " in (Path(sft.run_dir) / "logs" / "attempt-2.log").read_text()


@pytest.mark.slow  # a real Slurm and a toy study with an SFT on it: `make test-all` and CI run it
def test_ctrl_c_cancels_a_study_on_slurm(slurm_env, tiny_model, tmp_path):
    spec, runs = write_spec(tmp_path, tiny_model, steps=200, save=200), tmp_path / "runs"
    runner = subprocess.Popen([sys.executable, "-m", "engine.cli", "run", str(spec), "--runs-dir", str(runs)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=os.environ.copy())
    holder = {}

    def sft_running() -> bool:
        sft = next((r for r in (lineage_row(runs, run_id) for run_id in _run_ids(runs)) if r and r.kind == "sft"), None)
        holder["sft"] = sft
        return bool(sft and sft.job_id) and state_of(sft.job_id) == "RUNNING"

    try:
        wait_for(sft_running, timeout_s=300, what="the SFT job to run")
        runner.send_signal(signal.SIGINT)
        out, _ = runner.communicate(timeout=90)
    finally:
        runner.kill()
    assert runner.returncode == 130, out
    sft = holder["sft"]
    assert lineage_row(runs, sft.id).state is S.cancelled and state_of(sft.job_id) == "CANCELLED"
    assert "(interrupted)" in out


def _run_ids(runs: Path) -> list[str]:
    folder = runs / "tiny-slurm"
    return sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []


@pytest.mark.slow  # a real Slurm and jobs on it: `make test-all` and CI run it
def test_status_shows_slurms_state_and_ctrl_c_cancels_the_jobs_it_submitted_and_nothing_else(slurm_env, tmp_path):
    runs = tmp_path / "runs"
    job = make_job(runs, "long", "sleep 300", gpus=1)

    def foreign(*options: str) -> str:  # someone else's job on the same cluster
        return subprocess.run(["sbatch", "--parsable", "--cpus-per-task=1", f"--output={tmp_path / 'foreign.log'}",
                               *options, "--wrap", "sleep 300"], capture_output=True, text=True, check=True).stdout.strip()

    gpu_holder, bystander = foreign("--gres=gpu:2"), foreign()
    jobs_file = tmp_path / "jobs.json"
    jobs_file.write_text(json.dumps({"jobs": [{"id": "long", "run_dir": str(job.run_dir), "kind": "eval", "parents": []}]}))
    runner = subprocess.Popen([sys.executable, str(DRIVER), str(jobs_file), str(runs)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    holder = {}

    def queue_of_long() -> Optional[str]:
        rows = [r for r in collect_status(runs).runs if r.id == "long"] if lineage_row(runs, "long") else []
        holder["queue"] = rows[0].queue if rows else None
        return holder["queue"]

    try:
        # Both GPUs are held by another job: Slurm keeps ours waiting, and says why.
        wait_for(lambda: queue_of_long() == "PENDING (Resources)", what=f"the job to wait ({holder})")
        time.sleep(2)  # a queue wait, which is no run time
        report = collect_status(runs)
        assert "queued · PENDING (Resources)" in _rendered(report), _rendered(report)
        assert [r.duration_s for r in report.runs] == [0.0]
        waited_until = datetime.now(timezone.utc)
        slurm_commands.cancel([gpu_holder])
        wait_for(lambda: queue_of_long() == "RUNNING", what="the job to run")
        wait_for(lambda: lineage_row(runs, "long").started_at > waited_until.isoformat(), what="its start recorded")
        with open_lineage(runs / LINEAGE_FILE, readonly=True) as lineage:
            attempt = lineage.run_times(["long"])["long"].current
            assert [e.reason for e in lineage.events("long")][-2:] == ["attempt 1, queued", "attempt 1 began"]
        assert attempt.start > waited_until and not attempt.queued
        assert "running · RUNNING" in _rendered(collect_status(runs))
        job_id = lineage_row(runs, "long").job_id
        runner.send_signal(signal.SIGINT)
        assert runner.wait(timeout=60) == 130, runner.stdout.read()
        rec = lineage_row(runs, "long")
        assert rec.state is S.cancelled and rec.reason == "interrupted by SIGINT"
        assert state_of(job_id) == "CANCELLED"
        assert state_of(bystander) in ("RUNNING", "PENDING")  # not the runner's: left alone
    finally:
        runner.kill()
        slurm_commands.cancel([gpu_holder, bystander])


def _rendered(report) -> str:
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(render_status(report))
    return console.export_text()


@pytest.mark.slow  # a real Slurm and jobs on it: `make test-all` and CI run it
def test_jobs_slurm_ends_are_failed_attempts_with_slurms_reason_and_resume(slurm_env, tmp_path):
    runs = tmp_path / "runs"
    cancelled = make_job(runs, "cancelled", "sleep 300")
    child = make_job(runs, "child", parents=("cancelled",))
    timed_out = make_job(runs, "timed_out", "sleep 300")
    jobs = [cancelled, child, timed_out]
    executor = SlurmExecutor(shared_dir=runs, status_every_s=0.3)
    results = {}

    def runner() -> None:
        with open_lineage(runs / LINEAGE_FILE) as lineage:
            lineage.record_plan_records(PlanRecords(runs=[
                RunRecord(id=j.id, spec_name="t", phase=j.id, kind=j.kind, run_dir=str(j.run_dir)) for j in jobs]))
            results["result"] = execute(jobs, lineage, executor, heartbeat_s=0.5, grace_s=5.0)

    thread = threading.Thread(target=runner)
    thread.start()
    ids = {}

    def both_running() -> bool:
        for run_id in ("cancelled", "timed_out"):
            rec = lineage_row(runs, run_id)
            ids[run_id] = rec.job_id if rec else None
        return all(ids.values()) and all(state_of(i) == "RUNNING" for i in ids.values())

    wait_for(both_running, what="both jobs to run")
    slurm_commands.cancel([ids["cancelled"]])  # someone else's scancel
    # The controller enforces time limits in its periodic sweep (about every 30 s).
    subprocess.run(["scontrol", "update", f"JobId={ids['timed_out']}", "TimeLimit=1"], check=True)
    thread.join(timeout=200)
    assert not thread.is_alive()
    assert results["result"].states == {"cancelled": S.failed, "child": S.blocked, "timed_out": S.failed}
    with open_lineage(runs / LINEAGE_FILE, readonly=True) as lineage:
        reasons = {j.id: lineage.run(j.id).reason for j in jobs}
    assert f"Slurm job {ids['cancelled']} CANCELLED" in reasons["cancelled"], reasons
    assert f"Slurm job {ids['timed_out']} TIMEOUT" in reasons["timed_out"], reasons
    assert reasons["child"] == "upstream cancelled failed"
    log = (timed_out.run_dir / "logs" / "attempt-1.log").read_text()
    assert f"# rlvr-run: Slurm job {ids['timed_out']} RUNNING" in log
    assert f"# rlvr-run: Slurm job {ids['timed_out']} TIMEOUT" in log
    # The next run is a second attempt in a new job (a real launch script resumes from its checkpoint).
    (timed_out.run_dir / "launch.sh").write_text((timed_out.run_dir / "launch.sh").read_text().replace("sleep 300", ""))
    with open_lineage(runs / LINEAGE_FILE) as lineage:
        again = execute([timed_out], lineage, executor, heartbeat_s=0.5)
        rec = lineage.run("timed_out")
    assert again.states == {"timed_out": S.succeeded}
    assert rec.attempt == 2 and rec.job_id != ids["timed_out"] and rec.reason.startswith("exit 0")


@pytest.mark.slow  # a real Slurm and jobs on it: `make test-all` and CI run it
def test_a_runner_that_died_before_recording_its_job_finds_its_own_by_name_never_another_studys(slurm_env, tmp_path):
    # The same study in two runs directories (a colleague's copy, a second try): the same run id
    # and attempt, so the same job name; a runner that died between sbatch and lineage must not
    # take the other directory's job for its own (nor cancel it on Ctrl-C).
    ours, theirs = make_job(tmp_path / "ours", "r1", "sleep 300"), make_job(tmp_path / "theirs", "r1", "sleep 300")
    submitter = SlurmExecutor(shared_dir=tmp_path)
    other = submitter.start(theirs, attempt=1, log_path=theirs.run_dir / "logs" / "attempt-1.log")
    record = RunRecord(id="r1", spec_name="t", phase="r1", kind="eval", run_dir=str(ours.run_dir), state=S.running,
                       attempt=1)
    log = ours.run_dir / "logs" / "attempt-1.log"
    mine = None
    try:
        assert SlurmExecutor(shared_dir=tmp_path).reattach(record, ours, log_path=log) is None
        mine = submitter.start(ours, attempt=1, log_path=log)
        found = SlurmExecutor(shared_dir=tmp_path).reattach(record, ours, log_path=log)
        assert found is not None and found.job_id == mine.job_id != other.job_id
    finally:
        slurm_commands.cancel([other.job_id, *([mine.job_id] if mine else [])])


@pytest.mark.slow  # a real Slurm and jobs on it: `make test-all` and CI run it
def test_a_group_left_by_a_runner_dead_after_sbatch_is_found_through_its_leader_and_ends_when_it_did(slurm_env, tmp_path):
    # The runner died after sbatch and after the leader's job id reached lineage but before its
    # member's: the member's job is its leader's (named after the leader), which its own name never
    # finds; it must not be submitted again. The job then ended while no runner watched: its
    # attempts end when its script did, not when the next runner came.
    runs = tmp_path / "runs"
    leader, member = make_job(runs, "leader", group="ckpt"), make_job(runs, "member", group="ckpt")
    (member.run_dir / "outputs").mkdir()
    (member.run_dir / "outputs" / "metrics.json").write_text('{"run_id": "t", "datasets": []}')  # its share of the work
    executor = SlurmExecutor(shared_dir=runs, status_every_s=0.3)
    with open_lineage(runs / LINEAGE_FILE) as lineage:
        lineage.record_plan_records(PlanRecords(runs=[
            RunRecord(id=j.id, spec_name="t", phase=j.id, kind=j.kind, run_dir=str(j.run_dir)) for j in (leader, member)]))
        for job, reason, by in ((leader, "attempt 1, queued", None),
                                (member, "attempt 1 in the process of leader, queued", "leader")):
            lineage.set_state(job.id, S.queued, "queued")
            lineage.set_state(job.id, S.running, reason, attempt=1, leader=by, queued=True)
        started = executor.start(leader, attempt=1, log_path=leader.run_dir / "logs" / "attempt-1.log", also=[member])
        lineage.record_launch("leader", None, started.job_id)
    exits = [j.run_dir / "logs" / f"slurm-{started.job_id}.exit" for j in (leader, member)]
    wait_for(lambda: all(p.is_file() for p in exits) and state_of(started.job_id) in (None, "COMPLETED"),
             what="the group's job to end")
    ended = datetime.fromtimestamp(exits[0].stat().st_mtime, timezone.utc)
    began = (leader.run_dir / "logs" / f"slurm-{started.job_id}.start").read_text().strip()
    time.sleep(2)  # no runner watches
    with open_lineage(runs / LINEAGE_FILE) as lineage:
        result = execute([leader, member], lineage, SlurmExecutor(shared_dir=runs, status_every_s=0.3),
                         heartbeat_s=0.5)
        records = {j.id: lineage.run(j.id) for j in (leader, member)}
        times = lineage.run_times(["leader", "member"])
    assert result.states == {"leader": S.succeeded, "member": S.succeeded}
    assert {r.attempt for r in records.values()} == {1} and records["member"].job_id == started.job_id
    assert not [n for n in all_job_names() if n.startswith(("rlvr-member-", "rlvr-leader-a2"))]
    for run_id in ("leader", "member"):
        finished = datetime.fromisoformat(records[run_id].finished_at)
        assert abs(finished - ended) < timedelta(seconds=0.01), (run_id, finished, ended)
        assert times[run_id].current.start == datetime.fromisoformat(began)
        assert times[run_id].seconds() == (finished - datetime.fromisoformat(began)).total_seconds()


@pytest.mark.slow  # a real Slurm: `make test-all` and CI run it
def test_a_run_wanting_more_cpus_than_any_node_has_is_refused_not_left_pending_forever(slurm_env, tmp_path):
    # sbatch takes such a job and Slurm keeps it PENDING (PartitionConfig) until an administrator
    # changes the partition: the runner would wait on it forever.
    executor = SlurmExecutor(shared_dir=tmp_path)
    cpus = slurm_env.cpus
    assert executor.refusal(make_job(tmp_path, "fits", cpus=cpus, gpus=slurm_env.gpus)) is None
    too_many = make_job(tmp_path, "too_many", cpus=cpus + 1)
    # No partition set: sbatch uses the default one, and that is the one checked.
    assert executor.refusal(too_many) == (f"needs {cpus + 1} CPU(s) but no node of partition debug (the default) "
                                          f"has that many (the most: {cpus})")


@pytest.mark.slow  # a real Slurm: `make test-all` and CI run it
def test_a_job_sbatch_queued_but_whose_answer_was_lost_is_followed_not_left_to_run_twice(slurm_env, tmp_path, monkeypatch):
    # A fault no idle test controller produces on demand, injected: the real sbatch queues the
    # job, then the answer is lost as on a busy controller ("Socket timed out", which Slurm says
    # may come after the job was queued). Unfollowed, that job would run beside the next attempt.
    shim = tmp_path / "lossy-sbatch"
    shim.mkdir()
    (shim / "sbatch").write_text(f"#!/bin/bash\n{shutil.which('sbatch')} \"$@\" > /dev/null\n"
                                 "echo 'sbatch: error: Batch job submission failed: Socket timed out on send/recv "
                                 "operation' >&2\nexit 1\n")
    (shim / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim}:{os.environ['PATH']}")
    job = make_job(tmp_path, "lost")
    executor = SlurmExecutor(shared_dir=tmp_path, status_every_s=0.3)
    started = executor.start(job, attempt=1, log_path=job.run_dir / "logs" / "attempt-1.log")
    assert started.job_id and started.job_id.isdigit()
    codes = []
    wait_for(lambda: codes.append(executor.poll(started)) or codes[-1] is not None, what="the job to end")
    assert codes[-1] == 0 and (job.run_dir / "outputs" / "metrics.json").is_file()
    assert [n for n in all_job_names() if n == "rlvr-lost-a1"] == ["rlvr-lost-a1"]


@pytest.mark.slow  # a real Slurm: `make test-all` and CI run it
def test_a_run_asking_more_time_than_its_partition_allows_is_refused_not_left_pending_forever(slurm_env, tmp_path):
    # Under Slurm's default EnforcePartLimits=NO, sbatch takes a --time over the partition's
    # MaxTime and keeps the job PENDING (PartitionTimeLimit) until an administrator raises it.
    subprocess.run(["scontrol", "update", "PartitionName=debug", "MaxTime=2:00:00"], check=True)
    try:
        executor = SlurmExecutor(shared_dir=tmp_path, partition="debug", time_limit_h={"sft": 3})
        assert executor.refusal(make_job(tmp_path, "two_hours", time_limit_h=2.0)) is None
        assert executor.refusal(make_job(tmp_path, "by_kind")) is None  # an eval: no limit asked, the partition's
        long = replace(make_job(tmp_path, "long"), kind="sft")
        assert executor.refusal(long) == ("asks for a time limit of 3 h (--time=180) but partition debug allows at "
                                          "most 2 h: lower its resources.time_limit_h or executor.time_limit_h.sft, "
                                          "or choose a partition that allows it")
    finally:
        subprocess.run(["scontrol", "update", "PartitionName=debug", "MaxTime=INFINITE"], check=True)


def _processes_under(folder: Path) -> list[int]:
    """Processes whose command line names `folder` (a job's batch script lies in its spool)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and str(folder) in (proc / "cmdline").read_bytes().decode(errors="replace"):
                found.append(int(proc.name))
        except OSError:
            continue
    return found


@pytest.mark.slow  # a real Slurm of its own: `make test-all` and CI run it
def test_stopping_the_test_cluster_leaves_no_job_running(tmp_path):
    # A test that fails with a job running leaves it to the fixture's teardown: stopping the daemons
    # at once would leave the job's slurmstepd and its script running on the machine.
    from tests.runs.executors.slurm_cluster import LocalSlurm, missing

    if missing():
        pytest.skip(f"no local Slurm cluster: {missing()}")
    cluster = LocalSlurm(tmp_path / "slurm")
    try:
        cluster.start()
        env = {**os.environ, **cluster.env}
        # A script that outlives SIGTERM (a trainer saving its checkpoint): only KillWait's SIGKILL ends it.
        job = subprocess.run(["sbatch", "--parsable", f"--output={tmp_path / 'job.log'}", "--wrap",
                              "trap '' TERM; sleep 300"],
                             env=env, capture_output=True, text=True, check=True).stdout.strip()
        wait_for(lambda: subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], env=env, capture_output=True,
                                        text=True).stdout.strip() == "RUNNING", what="the job to run")
        wait_for(lambda: _processes_under(tmp_path / "slurm" / "spool"), what="the job's script to start")
    finally:
        cluster.stop()
    left = _processes_under(tmp_path / "slurm" / "spool")
    for pid in left:  # this test's own job, so that a failure leaves nothing behind either
        os.kill(pid, signal.SIGKILL)
    assert left == []


def _shim(folder: Path, name: str, body: str) -> None:
    """A wrapper named like a Slurm command, first on the PATH: the real one with a fault injected."""
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(f"#!/bin/bash\nREAL={shutil.which(name)}\n{body}\n")
    (folder / name).chmod(0o755)


def _record(lineage, spec: str, jobs: list[Job]) -> None:
    lineage.record_plan_records(PlanRecords(runs=[
        RunRecord(id=j.id, spec_name=spec, phase=j.id, kind=j.kind, run_dir=str(j.run_dir)) for j in jobs]))


@pytest.mark.slow  # a real Slurm and jobs on it: `make test-all` and CI run it
def test_a_live_job_of_another_spec_left_by_a_dead_runner_is_cancelled_and_seen_ended_before_anything_runs(
        slurm_env, tmp_path):
    # A runner of spec "other" died with its job RUNNING; the next runner of this runs directory
    # runs another spec. Before, that job was marked "gone" with no scancel, and a rerun of
    # "other" put a second job into the same run directory while the first still trained.
    runs = tmp_path / "runs"
    theirs, ours = make_job(runs, "theirs", "sleep 300"), make_job(runs, "ours")
    executor = SlurmExecutor(shared_dir=runs, status_every_s=0.3)
    with open_lineage(runs / LINEAGE_FILE) as lineage:
        _record(lineage, "other", [theirs])
        _record(lineage, "t", [ours])
        lineage.set_state("theirs", S.queued, "queued")
        lineage.set_state("theirs", S.running, "attempt 1, queued", attempt=1, queued=True)
        job_id = executor.start(theirs, attempt=1, log_path=theirs.run_dir / "logs" / "attempt-1.log").job_id
        lineage.record_launch("theirs", None, job_id)
        wait_for(lambda: state_of(job_id) == "RUNNING", what="the other spec's job to run")
        result = execute([ours], lineage, SlurmExecutor(shared_dir=runs, status_every_s=0.3), heartbeat_s=0.5)
        rec = lineage.run("theirs")
    assert result.states == {"ours": S.succeeded}
    assert state_of(job_id) in ("CANCELLED", None) and rec.state is S.failed
    assert rec.reason.startswith(f"runner died: job {job_id} still alive: cancelled (1 job(s)) and seen ended"), \
        rec.reason


@pytest.mark.slow  # a real Slurm and jobs on it: `make test-all` and CI run it
def test_a_second_attempts_job_in_a_run_directory_another_job_holds_does_nothing(slurm_env, tmp_path):
    # Whatever the runners believe, the batch script itself holds its run directory's lock.
    job = make_job(tmp_path, "held", 'echo "working $SLURM_JOB_ID"; sleep 300')
    executor = SlurmExecutor(shared_dir=tmp_path, status_every_s=0.3)
    first = executor.start(job, attempt=1, log_path=job.run_dir / "logs" / "attempt-1.log")
    try:
        wait_for(lambda: "working" in (job.run_dir / "logs" / "attempt-1.log").read_text(), what="the first job")
        second = executor.start(job, attempt=2, log_path=job.run_dir / "logs" / "attempt-2.log")
        codes = []
        wait_for(lambda: codes.append(executor.poll(second)) or codes[-1] is not None, what="the second job to end")
        log = (job.run_dir / "logs" / "attempt-2.log").read_text()
        assert codes[-1] == 75 and "another attempt holds the lock" in log and "working" not in log, log
        assert state_of(first.job_id) == "RUNNING"
    finally:
        slurm_commands.cancel([first.job_id])


@pytest.mark.slow  # a real Slurm: `make test-all` and CI run it
@pytest.mark.parametrize("fault", [
    # stdout dropped: sbatch exits 0 and prints nothing (before: an IndexError out of the scheduler)
    '"$REAL" "$@" > /dev/null',
    # an answer lost with words no list of "lost answer" messages had
    '"$REAL" "$@" > /dev/null; echo "sbatch: error: Batch job submission failed: Zero Bytes were transmitted or '
    'received" >&2; exit 1',
])
def test_an_sbatch_answer_without_a_job_id_is_looked_up_by_name_before_it_counts_as_a_refusal(
        slurm_env, tmp_path, monkeypatch, fault):
    _shim(tmp_path / "shim", "sbatch", fault)
    monkeypatch.setenv("PATH", f"{tmp_path / 'shim'}:{os.environ['PATH']}")
    job = make_job(tmp_path, "lost")
    executor = SlurmExecutor(shared_dir=tmp_path, status_every_s=0.3)
    started = executor.start(job, attempt=1, log_path=job.run_dir / "logs" / "attempt-1.log")
    assert started.job_id and started.job_id.isdigit()
    codes = []
    wait_for(lambda: codes.append(executor.poll(started)) or codes[-1] is not None, what="the job to end")
    here = [s for s in slurm_commands.job_states(name="rlvr-lost-a1").values()
            if Path(s.work_dir).resolve() == job.run_dir.resolve()]
    assert codes[-1] == 0 and [s.job_id for s in here] == [started.job_id]  # one job, followed


@pytest.mark.slow  # a real Slurm: `make test-all` and CI run it
def test_an_sbatch_that_queued_nothing_and_said_nothing_is_an_error_with_its_command_and_output(
        slurm_env, tmp_path, monkeypatch):
    _shim(tmp_path / "shim", "sbatch", "exit 0")
    monkeypatch.setenv("PATH", f"{tmp_path / 'shim'}:{os.environ['PATH']}")
    job = make_job(tmp_path, "silent")
    with pytest.raises(slurm_commands.SlurmAnswerUnclear, match=r"`sbatch --parsable --job-name=rlvr-silent-a1 .*"
                                                                 r"` exited 0 without a job id; its output: \(none\)"):
        SlurmExecutor(shared_dir=tmp_path).start(job, attempt=1, log_path=job.run_dir / "logs" / "attempt-1.log")


@pytest.mark.slow  # a real Slurm and jobs on it: `make test-all` and CI run it
def test_a_failing_scancel_is_retried_and_a_job_that_survives_it_is_reported(slurm_env, tmp_path, monkeypatch):
    executor = SlurmExecutor(shared_dir=tmp_path, status_every_s=0.3)
    path = os.environ["PATH"]
    jobs = [make_job(tmp_path, name, "sleep 300") for name in ("flaky", "stuck")]
    started = [executor.start(j, attempt=1, log_path=j.run_dir / "logs" / "attempt-1.log") for j in jobs]
    try:
        wait_for(lambda: all(state_of(s.job_id) == "RUNNING" for s in started), what="both jobs to run")
        # Fails once, then works: retried, the job ends, nothing is reported.
        _shim(tmp_path / "flaky", "scancel", f'if [ ! -e {tmp_path}/failed-once ]; then touch {tmp_path}/failed-once; '
                                             'echo "scancel: error: Socket timed out" >&2; exit 1; fi; exec "$REAL" "$@"')
        monkeypatch.setenv("PATH", f"{tmp_path / 'flaky'}:{os.environ['PATH']}")
        executor.stop([started[0]], grace_s=20)
        assert started[0].detail is None and state_of(started[0].job_id) in ("CANCELLED", "COMPLETING", None)
        # Always fails: the job runs on, and its attempt says so.
        _shim(tmp_path / "broken", "scancel", 'echo "scancel: error: Unable to contact slurm controller" >&2; exit 1')
        monkeypatch.setenv("PATH", f"{tmp_path / 'broken'}:{os.environ['PATH']}")
        executor.stop([started[1]], grace_s=2)
        job_id = started[1].job_id
        assert started[1].detail.startswith(f"Slurm job {job_id} may still run: `scancel {job_id}` failed 3 times")
        assert state_of(job_id) == "RUNNING"
    finally:
        monkeypatch.setenv("PATH", path)
        slurm_commands.cancel([s.job_id for s in started])


def test_options_that_change_where_or_when_a_job_runs_are_reserved():
    from engine.spec.refs import reserved_sbatch_option

    for arg, option in (("--nodes=2", "--nodes"), ("-N2", "--nodes"), ("--hold", "--hold"), ("-H", "--hold"),
                        ("--test-only", "--test-only"), ("--begin=now+1hour", "--begin"), ("-p", "--partition"),
                        ("--clusters=b", "--clusters"), ("--time=5", "--time")):
        assert reserved_sbatch_option(arg) == option, arg
    assert reserved_sbatch_option("--constraint=h100") is None and reserved_sbatch_option("--exclusive") is None


@pytest.mark.slow  # a real Slurm and a job on it: `make test-all` and CI run it
def test_a_job_slurm_ended_while_no_runner_watched_is_timed_to_its_own_end_not_the_runners_return(
        slurm_env, tmp_path):
    # The runner died with the job RUNNING; Slurm ended the job (a scancel, as a time limit or a
    # preemption would) while no runner watched; the next runner came back later. The attempt
    # ended when the job did: the time away is no run time (cost, `--fit`, the ETA).
    runs = tmp_path / "runs"
    job = make_job(runs, "away", 'if [ "$RLVR_ATTEMPT" = 1 ]; then touch training; sleep 300; fi')
    with open_lineage(runs / LINEAGE_FILE) as lineage:
        _record(lineage, "t", [job])
        lineage.set_state("away", S.queued, "queued")
        lineage.set_state("away", S.running, "attempt 1, queued", attempt=1, queued=True)
        job_id = SlurmExecutor(shared_dir=runs).start(job, attempt=1, log_path=job.run_dir / "logs" / "attempt-1.log").job_id
        lineage.record_launch("away", None, job_id)
    # Its launch.sh runs: the batch script is past its TERM handler (Slurm says RUNNING before the
    # script starts; a scancel before the handler leaves no exit file, and Slurm's state decides).
    wait_for(lambda: (job.run_dir / "training").is_file(), what="the job's launch.sh to run")
    began = datetime.now(timezone.utc)
    slurm_commands.cancel([job_id])
    wait_for(lambda: (job.run_dir / "logs" / f"slurm-{job_id}.exit").is_file(), what="the job's exit file")
    ended = datetime.now(timezone.utc)
    time.sleep(6)  # the runner is away
    with open_lineage(runs / LINEAGE_FILE) as lineage:
        back = datetime.now(timezone.utc)
        result = execute([job], lineage, SlurmExecutor(shared_dir=runs, status_every_s=0.3), heartbeat_s=0.5)
        [failed] = [e for e in lineage.events("away") if e.to_state is S.failed]
        spent = lineage.run_times(["away"])["away"].seconds()
    assert result.states == {"away": S.failed}
    at = datetime.fromisoformat(failed.time)
    assert began - timedelta(seconds=2) <= at <= ended + timedelta(seconds=1) < back, (failed.time, ended, back)
    assert spent < (back - began).total_seconds() - 4, spent


@pytest.mark.slow  # a real Slurm and jobs on it: `make test-all` and CI run it
def test_an_earlier_attempts_job_still_running_is_cancelled_before_the_next_attempt_is_submitted(slurm_env, tmp_path):
    # Ctrl-C recorded the run cancelled but its scancel failed (or the controller went silent and
    # the run was failed, its job's fate unknown): the job still trains. The rerun's attempt 2 must
    # not be a second job beside it (whose batch script would find the lock held and do nothing).
    runs = tmp_path / "runs"
    job = make_job(runs, "stale", 'if [ "$RLVR_ATTEMPT" = 1 ]; then sleep 300; fi')
    with open_lineage(runs / LINEAGE_FILE) as lineage:
        _record(lineage, "t", [job])
        lineage.set_state("stale", S.queued, "queued")
        lineage.set_state("stale", S.running, "attempt 1, queued", attempt=1, queued=True)
        first = SlurmExecutor(shared_dir=runs).start(job, attempt=1, log_path=job.run_dir / "logs" / "attempt-1.log")
        lineage.record_launch("stale", None, first.job_id)
        wait_for(lambda: state_of(first.job_id) == "RUNNING", what="attempt 1's job to run")
        lineage.set_state("stale", S.cancelled, f"cancelled (Slurm job {first.job_id} may still run)")
        try:
            result = execute([job], lineage, SlurmExecutor(shared_dir=runs, status_every_s=0.3), heartbeat_s=0.5)
            rec = lineage.run("stale")
        finally:
            slurm_commands.cancel([first.job_id])
    assert result.states == {"stale": S.succeeded}, rec.reason
    assert rec.attempt == 2 and state_of(first.job_id) in ("CANCELLED", None)


def test_a_term_before_launch_sh_starts_still_leaves_the_jobs_exit_file(tmp_path):
    # Slurm says RUNNING before the batch script reaches launch.sh; a scancel (or a time limit) in
    # that window must still write the job's end, or a runner that was away would time the attempt
    # to its own return. The window is held open by a slow `date`; no Slurm is needed for this.
    job = make_job(tmp_path, "early", "touch ran")
    (job.run_dir / "logs").mkdir()
    script = tmp_path / "job.sh"
    script.write_text(batch_script(job, 1, [], python=sys.executable))
    shims = tmp_path / "bin"
    shims.mkdir()
    (shims / "date").write_text(f"#!/bin/sh\ntouch {tmp_path}/in-date\nsleep 30\n")
    (shims / "date").chmod(0o755)
    env = {**os.environ, "PATH": f"{shims}:{os.environ['PATH']}", "SLURM_JOB_ID": "4242"}
    proc = subprocess.Popen(["bash", str(script)], env=env, cwd=tmp_path, start_new_session=True)
    try:
        wait_for(lambda: (tmp_path / "in-date").is_file(), timeout_s=30, what="the script to begin")
        os.killpg(proc.pid, signal.SIGTERM)  # as slurmd signals the job's processes
        assert proc.wait(timeout=30) == 143
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert (job.run_dir / "logs" / exit_file_name("4242")).read_text().strip() == "143"
    assert not (job.run_dir / "ran").exists()
