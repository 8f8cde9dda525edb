"""The Ray executor against a real loopback Ray head: real eval runs of the tiny model (on shared
storage, and sent as the job's working_dir with the outputs coming back), jobs dying on the cluster,
Ctrl-C, a kill -9-ed runner that re-attaches by job id mid-study, an unreachable cluster."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Optional

import httpx
import psutil
import pytest

from engine.cli import main
from engine.errors import UserError
from engine.runs.executors.base import RUN_ID_ENV, Executor, Job
from engine.runs.executors.ray import RayExecutor, auth_token_from_env, submission_id_of
from engine.runs.lineage import (
    LINEAGE_FILE,
    PlanRecords,
    RunRecord,
    RunState,
    open_lineage,
)
from engine.runs.pipeline import ExecutorChoice, run_spec
from engine.runs.schedule import execute
from engine.spec.model import ExecutorSpec
from tests.runs.executors.ray_head import _free_port

S = RunState
DRIVER = Path(__file__).with_name("ray_driver.py")
# A handful of toy problems and few tokens: the runs are real, the minutes are not.
SPEC = """\
name: tiny-eval
base_model: {{path: {model}}}
datasets:
  toy_train: {{source: toy, split: train, role: train}}
  toy_valid: {{source: toy, split: valid, role: valid, ids: {root}/valid.txt}}
  toy_test: {{source: toy, split: test, role: test, test_only: true, ids: {root}/test.txt}}
protocols:
  greedy: {{preset: greedy, max_tokens: 8}}
phases:
  base: {{kind: eval}}
seeds: [1]
evaluate:
  every_phase: {{datasets: [toy_valid], protocol: greedy}}
{more}"""
IDS = {"valid.txt": ["toy/count_above_14", "toy/count_above_2", "toy/count_above_24"],
       "test.txt": ["toy/count_above_17", "toy/count_above_8"]}


FINAL = "  final: {datasets: [toy_test], protocol: greedy}\n"  # a second, independent eval run


def write_spec(root: Path, model: Path, more: str = "") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, ids in IDS.items():
        (root / name).write_text("\n".join(ids) + "\n")
    spec = root / "spec.yaml"
    spec.write_text(SPEC.format(model=model, root=root, more=more))
    return spec


def make_job(root: Path, run_id: str, body: str = "", *, parents=(), cpus: int = 1) -> Job:
    """A run dir whose launch.sh runs `body`, then writes (empty) eval outputs."""
    run_dir = root / "t" / run_id
    run_dir.mkdir(parents=True)
    (run_dir / "launch.sh").write_text(
        f"set -e\ncd {run_dir}\necho \"$RLVR_RUN_ID attempt $RLVR_ATTEMPT OMP=$OMP_NUM_THREADS\"\n{body}\n"
        "mkdir -p outputs && echo '{\"run_id\": \"t\", \"datasets\": []}' > outputs/metrics.json\n"
    )
    return Job(id=run_id, run_dir=run_dir, kind="eval", parents=tuple(parents), cpus=cpus)


def client(head) -> httpx.Client:
    return httpx.Client(base_url=head.address, headers={"Authorization": f"Bearer {head.token_path.read_text()}"})


def ray_status(head, submission_id: str) -> Optional[str]:
    with client(head) as http:
        response = http.get(f"/api/jobs/{submission_id}")
    return response.json()["status"] if response.status_code == 200 else None


def wait_for(predicate, timeout_s: float = 60.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def lineage_row(runs: Path, run_id: str):
    if not (runs / LINEAGE_FILE).exists():
        return None
    try:
        with open_lineage(runs / LINEAGE_FILE, readonly=True) as lineage:
            return lineage.run(run_id)
    except (KeyError, UserError):  # not recorded yet, or the runner is still creating the schema
        return None


@pytest.mark.slow  # a real Ray head and jobs on it: `make test-all` and CI run it
def test_an_eval_run_on_ray_records_metrics_job_id_and_log(ray_env, tiny_model, tmp_path, capsys):
    spec, runs = write_spec(tmp_path, tiny_model), tmp_path / "runs"
    # The spec has no executor: block; the command line alone sends it to the cluster.
    assert main(["run", str(spec), "--runs-dir", str(runs), "--executor", "ray", "--address", ray_env.address]) == 0
    with open_lineage(runs / LINEAGE_FILE, readonly=True) as lineage:
        recs = lineage.runs("tiny-eval")
        samples = {r.id: {m.name: m.value for m in lineage.metrics(r.id)}["samples"] for r in recs}
        events = {r.id: [e.to_state for e in lineage.events(r.id)] for r in recs}
    assert list(samples.values()) == [3]
    for rec in recs:
        assert rec.state is S.succeeded and rec.job_id == submission_id_of(rec.id, 1) and rec.pid is None
        assert events[rec.id] == [S.planned, S.queued, S.running, S.succeeded]
        log = (runs / "tiny-eval" / rec.id / "logs" / "attempt-1.log").read_text()
        assert f"as Ray job {rec.job_id}" in log and "Running entrypoint" in log and "judge toy_" in log
        assert ray_status(ray_env, rec.job_id) == "SUCCEEDED"
    assert isinstance(RayExecutor(address=ray_env.address, shared_dir=runs), Executor)


def kill_processes_of(run_id: str) -> int:
    """SIGKILL every process of a run, as the OOM killer or a lost node would."""
    procs = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(RUN_ID_ENV) == run_id:
                procs.append(proc)
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    for proc in procs:
        proc.kill()
    return len(procs)


@pytest.mark.slow  # a real Ray head and jobs on it: `make test-all` and CI run it
def test_jobs_dying_on_the_cluster_fail_with_their_reason_and_independent_branches_go_on(ray_env, tmp_path):
    runs = tmp_path / "runs"
    stopped = make_job(runs, "stopped", "sleep 120")
    child = make_job(runs, "child", parents=["stopped"])
    oom = make_job(runs, "oom", "sleep 120")
    empty = make_job(runs, "empty", "exit 0")  # exits 0 before writing its outputs
    fine = make_job(runs, "fine", "nproc", cpus=2)
    jobs = [stopped, child, oom, empty, fine]
    executor = RayExecutor(address=ray_env.address, shared_dir=runs, auth_token=auth_token_from_env(),
                           status_every_s=0.2, log_retry_s=0.5)
    results = {}

    def runner() -> None:
        with open_lineage(runs / LINEAGE_FILE) as lineage:
            lineage.record_plan_records(PlanRecords(runs=[
                RunRecord(id=j.id, spec_name="t", phase=j.id, kind=j.kind, run_dir=str(j.run_dir)) for j in jobs]))
            results["result"] = execute(jobs, lineage, executor, heartbeat_s=0.5, grace_s=5.0)

    thread = threading.Thread(target=runner)
    thread.start()
    stopped_id, oom_id = submission_id_of("stopped", 1), submission_id_of("oom", 1)
    wait_for(lambda: ray_status(ray_env, stopped_id) == "RUNNING" and ray_status(ray_env, oom_id) == "RUNNING"
             and "attempt 1" in (oom.run_dir / "logs" / "attempt-1.log").read_text(), what="both jobs to run")
    with client(ray_env) as http:  # the jobs die on the cluster, not through the runner
        http.post(f"/api/jobs/{stopped_id}/stop").raise_for_status()
    assert kill_processes_of("oom") >= 1
    thread.join(timeout=90)
    assert not thread.is_alive()
    states = results["result"].states
    assert states == {"stopped": S.failed, "child": S.blocked, "oom": S.failed, "empty": S.failed, "fine": S.succeeded}
    with open_lineage(runs / LINEAGE_FILE, readonly=True) as lineage:
        reasons = {j.id: lineage.run(j.id).reason for j in jobs}
    assert "killed by SIGTERM" in reasons["stopped"] and f"Ray job {stopped_id} STOPPED" in reasons["stopped"]
    assert reasons["child"] == "upstream stopped failed"
    assert f"Ray job {oom_id} FAILED" in reasons["oom"] and "see " in reasons["oom"], reasons["oom"]
    assert reasons["empty"].startswith("completion check failed")
    # A job submitted with entrypoint_num_cpus gets its CPUs' worth of threads, not OMP_NUM_THREADS=1.
    assert "fine attempt 1 OMP=2" in (fine.run_dir / "logs" / "attempt-1.log").read_text()


@pytest.mark.slow  # a real Ray head and jobs on it: `make test-all` and CI run it
def test_a_running_jobs_log_is_followed_not_downloaded_again_and_again(ray_env, tmp_path):
    """While the job prints, its lines reach the attempt log through the tail stream; the whole
    log is fetched once, when the job has ended, and nothing is doubled."""
    runs = tmp_path / "runs"
    job = make_job(runs, "ticks", "for k in $(seq 1 12); do echo \"tick $k\"; sleep 0.5; done")
    executor = RayExecutor(address=ray_env.address, shared_dir=runs, auth_token=auth_token_from_env(),
                           status_every_s=0.2, log_retry_s=0.2)
    whole_log_gets = []
    executor._client.event_hooks["request"].append(
        lambda request: whole_log_gets.append(request.url.path) if request.url.path.endswith("/logs") else None)
    log = job.run_dir / "logs" / "attempt-1.log"
    started = executor.start(job, attempt=1, log_path=log)
    wait_for(lambda: "tick 3\n" in log.read_text(),
             what=f"the job's first lines in the attempt log ({started.handle.tail.last_error})")
    assert "tick 12" not in log.read_text() and whole_log_gets == []  # it is still running
    code = None
    while code is None:
        code = executor.poll(started)
        time.sleep(0.1)
    executor.close()
    text = log.read_text()
    assert code == 0 and len(whole_log_gets) == 1
    assert [line for line in text.splitlines() if line.startswith("tick ")] == [f"tick {k}" for k in range(1, 13)]


@pytest.mark.slow  # a real Ray head and jobs on it: `make test-all` and CI run it
def test_ctrl_c_stops_the_jobs_it_submitted(ray_env, tmp_path):
    runs = tmp_path / "runs"
    job = make_job(runs, "long", "sleep 120")
    jobs_file = tmp_path / "jobs.json"
    jobs_file.write_text(json.dumps({"jobs": [{"id": "long", "run_dir": str(job.run_dir), "kind": "eval", "parents": []}]}))
    runner = subprocess.Popen([sys.executable, str(DRIVER), str(jobs_file), str(runs), ray_env.address],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    job_id = submission_id_of("long", 1)
    wait_for(lambda: (rec := lineage_row(runs, "long")) is not None and rec.job_id == job_id
             and ray_status(ray_env, job_id) == "RUNNING", what="the job to run")
    runner.send_signal(signal.SIGINT)
    assert runner.wait(timeout=60) == 130, runner.stdout.read()
    rec = lineage_row(runs, "long")
    assert rec.state is S.cancelled and rec.reason == "interrupted by SIGINT"
    assert ray_status(ray_env, job_id) == "STOPPED"


@pytest.mark.slow  # a real Ray head and jobs on it: `make test-all` and CI run it
def test_a_runner_killed_mid_study_reattaches_by_job_id_and_gets_the_outputs_back(ray_env, tiny_model, tmp_path):
    # No shared storage: each run directory travels as its job's working_dir, the outputs in its log.
    executor = f"executor: {{kind: ray, address: {ray_env.address}, transfer: working_dir}}\n"
    spec, runs = write_spec(tmp_path, tiny_model, FINAL + executor), tmp_path / "runs"
    runner = subprocess.Popen([sys.executable, "-m", "engine.cli", "run", str(spec), "--runs-dir", str(runs)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=os.environ.copy())
    holder = {}

    def submitted() -> bool:
        try:
            with open_lineage(runs / LINEAGE_FILE, readonly=True) as lineage:
                holder["recs"] = {r.id: r for r in lineage.runs("tiny-eval") if r.job_id}
        except UserError:  # not created yet, or the runner is still creating the schema
            return False
        return len(holder["recs"]) == 2

    wait_for(submitted, timeout_s=90, what="both eval runs' job ids in lineage")
    runner.kill()  # kill -9 mid-study: the jobs go on on the cluster
    runner.wait()
    before = holder["recs"]
    moved = sorted(before)[0]  # as if its runner had been on another node (the last SLURM allocation's head)
    with sqlite3.connect(runs / LINEAGE_FILE) as db:
        db.execute("UPDATE runs SET host = 'previous-head', heartbeat_at = '2000-01-01T00:00:00+00:00' WHERE id = ?",
                   (moved,))
    assert all(not (runs / "tiny-eval" / run_id / "outputs" / "metrics.json").exists() for run_id in before)
    outcome = run_spec(spec, runs_dir=runs, heartbeat_s=0.5)
    assert set(outcome.result.states.values()) == {S.succeeded}
    with open_lineage(runs / LINEAGE_FILE, readonly=True) as lineage:
        after = {run_id: lineage.run(run_id) for run_id in before}
        events = {run_id: [e.to_state for e in lineage.events(run_id)] for run_id in before}
        samples = sorted({m.name: m.value for m in lineage.metrics(run_id)}["samples"] for run_id in before)
    assert samples == [2, 3]
    with client(ray_env) as http:
        submitted_ids = [(j.get("metadata") or {}).get("rlvr_run_id") for j in http.get("/api/jobs/").json()]
    for run_id, rec in before.items():
        assert after[run_id].attempt == 1 and after[run_id].job_id == rec.job_id and S.failed not in events[run_id]
        assert submitted_ids.count(run_id) == 1, "a run was submitted twice"
        run_dir = runs / "tiny-eval" / run_id
        log = (run_dir / "logs" / "attempt-1.log").read_text()
        assert f"re-attached to Ray job {rec.job_id}" in log and "Running entrypoint" in log
        assert "# rlvr-run: outputs-begin" not in log, "the outputs tarball leaked into the attempt log"
        # The job ran in Ray's copy of the run directory, not in the runner's.
        ran_in = log.split("# rlvr-run: working_dir ", 1)[1].split("\n", 1)[0].split(":", 1)[1]
        assert Path(ran_in) != run_dir and "working_dir_files" in ran_in
        assert not (run_dir / ".rlvr-attempt").exists()


def test_an_unreachable_cluster_is_refused_before_anything_starts(tiny_model, tmp_path):
    spec, runs = write_spec(tmp_path, tiny_model), tmp_path / "runs"
    with pytest.raises(UserError, match="is unreachable"):
        run_spec(spec, runs_dir=runs, executor="ray", address=f"http://127.0.0.1:{_free_port()}")
    assert not (runs / LINEAGE_FILE).exists()


def test_a_cluster_gone_mid_study_fails_the_run_with_the_reason(tmp_path):
    job = make_job(tmp_path / "runs", "lost")
    executor = RayExecutor(address=f"http://127.0.0.1:{_free_port()}", shared_dir=tmp_path, unreachable_after_s=0.0,
                           timeout_s=1.0)
    started = executor._started(job, 1, job.run_dir / "logs" / "attempt-1.log", "rlvr-lost-a1")
    assert executor.poll(started) == 1
    assert "was unreachable" in started.detail and "rlvr-lost-a1's fate is unknown" in started.detail


def test_a_run_outside_the_shared_dir_is_refused(tmp_path):
    job = make_job(tmp_path / "elsewhere", "x")
    executor = RayExecutor(address="http://127.0.0.1:1", shared_dir=tmp_path / "shared")
    assert "is not under the shared directory" in executor.refusal(job)
    with pytest.raises(UserError, match="not under the executor's shared_dir"):
        ExecutorChoice.of(ExecutorSpec(kind="ray", shared_dir=str(tmp_path / "shared")), kind=None, address=None,
                          runs_dir=tmp_path / "elsewhere")
    sent = ExecutorChoice.of(ExecutorSpec(kind="ray", transfer="working_dir"), kind=None, address=None,
                             runs_dir=tmp_path / "elsewhere")
    assert sent.shared_dir is None


def test_the_token_comes_from_the_explicit_auth_mode(tmp_path):
    token = tmp_path / "token"
    token.write_text("abc\n")
    assert auth_token_from_env({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}) == "abc"
    assert auth_token_from_env({"RAY_AUTH_MODE": "disabled", "RAY_AUTH_TOKEN_PATH": str(token)}) is None
    with pytest.raises(UserError, match="cannot be read"):
        auth_token_from_env({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(tmp_path / "none")})
