"""The Ray executor against a real loopback Ray head: real eval runs of the tiny model, a job killed
on the cluster, Ctrl-C, a kill -9-ed runner that re-attaches by job id, an unreachable cluster."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from engine.cli import main
from engine.errors import UserError
from engine.runs.executors.base import Executor, Job, Started
from engine.runs.executors.ray import RayExecutor, auth_token_from_env, submission_id_of
from engine.runs.lineage import LINEAGE_FILE, PlanRecords, RunRecord, RunState, open_lineage
from engine.runs.pipeline import run_spec
from engine.runs.schedule import execute
from tests.runs.executors.ray_head import _free_port

S = RunState
DRIVER = Path(__file__).with_name("ray_driver.py")
SPEC = """\
name: tiny-eval
base_model: {{path: {model}}}
datasets:
  toy_train: {{source: toy, split: train, role: train}}
  toy_valid: {{source: toy, split: valid, role: valid}}
protocols:
  greedy: {{preset: greedy, max_tokens: {tokens}}}
phases:
  base: {{kind: eval}}
seeds: [1]
evaluate:
  every_phase: {{datasets: [toy_valid], protocol: greedy}}
"""


def write_spec(root: Path, model: Path, tokens: int = 24) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    spec = root / "spec.yaml"
    spec.write_text(SPEC.format(model=model, tokens=tokens))
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


def ray_status(head, submission_id: str) -> str:
    with client(head) as http:
        return http.get(f"/api/jobs/{submission_id}").json()["status"]


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


def test_an_eval_run_on_ray_records_metrics_job_id_and_log(ray_env, tiny_model, tmp_path, capsys):
    spec, runs = write_spec(tmp_path, tiny_model), tmp_path / "runs"
    assert main(["run", str(spec), "--runs-dir", str(runs), "--executor", "ray", "--address", ray_env.address]) == 0
    with open_lineage(runs / LINEAGE_FILE, readonly=True) as lineage:
        [rec] = lineage.runs("tiny-eval")
        metrics = {m.name: m.value for m in lineage.metrics(rec.id)}
        events = [e.to_state for e in lineage.events(rec.id)]
    assert rec.state is S.succeeded and rec.job_id == submission_id_of(rec.id, 1) and rec.pid is None
    assert metrics["samples"] == 42 and "accepted@1" in metrics
    assert events == [S.planned, S.queued, S.running, S.succeeded]
    log = (runs / "tiny-eval" / rec.id / "logs" / "attempt-1.log").read_text()
    assert f"as Ray job {rec.job_id}" in log and "Running entrypoint" in log and "generate toy_valid" in log
    assert ray_status(ray_env, rec.job_id) == "SUCCEEDED"
    assert isinstance(RayExecutor(address=ray_env.address, shared_dir=runs), Executor)


def test_a_killed_job_fails_with_its_reason_and_independent_branches_go_on(ray_env, tmp_path):
    runs = tmp_path / "runs"
    slow = make_job(runs, "slow", "sleep 120")
    child = make_job(runs, "child", parents=["slow"])
    empty = make_job(runs, "empty", "exit 0")  # exits 0 before writing its outputs
    fine = make_job(runs, "fine", "nproc", cpus=2)
    jobs = [slow, child, empty, fine]
    executor = RayExecutor(address=ray_env.address, shared_dir=runs, auth_token=auth_token_from_env(),
                           status_every_s=0.2, log_every_s=0.5)
    results = {}

    def runner() -> None:
        with open_lineage(runs / LINEAGE_FILE) as lineage:
            lineage.record_plan_records(PlanRecords(runs=[
                RunRecord(id=j.id, spec_name="t", phase=j.id, kind=j.kind, run_dir=str(j.run_dir)) for j in jobs]))
            results["result"] = execute(jobs, lineage, executor, heartbeat_s=0.5, grace_s=5.0)

    thread = threading.Thread(target=runner)
    thread.start()
    slow_id = submission_id_of("slow", 1)
    wait_for(lambda: (runs / "t" / "slow" / "logs" / "attempt-1.log").exists()
             and ray_status(ray_env, slow_id) == "RUNNING", what="the slow job to run")
    with client(ray_env) as http:  # the job dies on the cluster, not through the runner
        http.post(f"/api/jobs/{slow_id}/stop").raise_for_status()
    thread.join(timeout=90)
    assert not thread.is_alive()
    states = results["result"].states
    assert states == {"slow": S.failed, "child": S.blocked, "empty": S.failed, "fine": S.succeeded}
    with open_lineage(runs / LINEAGE_FILE, readonly=True) as lineage:
        slow_reason = lineage.run("slow").reason
        assert "killed by SIGTERM" in slow_reason and f"Ray job {slow_id} STOPPED" in slow_reason
        assert lineage.run("child").reason == "upstream slow failed"
        assert lineage.run("empty").reason.startswith("completion check failed")
    # A job submitted with entrypoint_num_cpus gets its CPUs' worth of threads, not OMP_NUM_THREADS=1.
    assert "fine attempt 1 OMP=2" in (fine.run_dir / "logs" / "attempt-1.log").read_text()


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


def test_a_restarted_runner_reattaches_by_job_id_without_a_duplicate(ray_env, tiny_model, tmp_path):
    spec, runs = write_spec(tmp_path, tiny_model, tokens=32), tmp_path / "runs"
    command = [sys.executable, "-m", "engine.cli", "run", str(spec), "--runs-dir", str(runs),
               "--executor", "ray", "--address", ray_env.address]
    runner = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=os.environ.copy())
    holder = {}

    def submitted() -> bool:
        try:
            with open_lineage(runs / LINEAGE_FILE, readonly=True) as lineage:
                recs = [r for r in lineage.runs("tiny-eval") if r.job_id]
        except UserError:  # not created yet, or the runner is still creating the schema
            return False
        holder.update(rec=recs[0] if recs else None)
        return bool(recs)

    wait_for(submitted, timeout_s=90, what="the eval run's job id in lineage")
    runner.kill()  # kill -9 mid-study: the job goes on on the cluster
    runner.wait()
    rec = holder["rec"]
    outcome = run_spec(spec, runs_dir=runs, executor="ray", address=ray_env.address, heartbeat_s=0.5)
    assert outcome.result.states[rec.id] is S.succeeded
    with open_lineage(runs / LINEAGE_FILE, readonly=True) as lineage:
        after = lineage.run(rec.id)
        events = [e.to_state for e in lineage.events(rec.id)]
        samples = {m.name: m.value for m in lineage.metrics(rec.id)}["samples"]
    assert after.attempt == 1 and after.job_id == rec.job_id and S.failed not in events
    assert samples == 42
    with client(ray_env) as http:
        ours = [j for j in http.get("/api/jobs/").json() if (j.get("metadata") or {}).get("rlvr_run_id") == rec.id]
    assert len(ours) == 1, "the run was submitted twice"
    log = (runs / "tiny-eval" / rec.id / "logs" / "attempt-1.log").read_text()
    assert f"re-attached to Ray job {rec.job_id}" in log and "Running entrypoint" in log


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


def test_the_token_comes_from_the_explicit_auth_mode(tmp_path):
    token = tmp_path / "token"
    token.write_text("abc\n")
    assert auth_token_from_env({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}) == "abc"
    assert auth_token_from_env({"RAY_AUTH_MODE": "disabled", "RAY_AUTH_TOKEN_PATH": str(token)}) is None
    with pytest.raises(UserError, match="cannot be read"):
        auth_token_from_env({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(tmp_path / "none")})
