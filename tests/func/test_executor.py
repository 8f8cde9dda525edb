"""Local executor + scheduler: real launch scripts, real process groups, real signals, real SQLite."""

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

from engine.runs.completion import check_completion
from engine.runs.executors.base import Executor, Job
from engine.runs.executors.local import LocalExecutor
from engine.runs.lineage import PlanRecords, RunRecord, RunState, open_lineage
from engine.runs.runlock import RunLock, RunnerBusy
from engine.runs.schedule import execute

sys.path.insert(0, str(Path(__file__).parent))
from fakes import FAKE_MODEL_SH  # noqa: E402  (tests/func/fakes.py)

DRIVER = Path(__file__).with_name("executor_driver.py")
S = RunState


def make_job(root: Path, run_id: str, body: str = "", *, kind: str = "eval", parents=(), gpus=0, cpus=1) -> Job:
    """A run dir whose launch.sh counts its executions, runs `body`, then writes eval outputs."""
    run_dir = root / "t" / run_id
    run_dir.mkdir(parents=True)
    (run_dir / "launch.sh").write_text(
        "set -e\n"
        'echo "$RLVR_RUN_ID attempt $RLVR_ATTEMPT" >> executions.txt\n'
        f"{body}\n"
        "mkdir -p outputs && echo '{\"run_id\": \"t\", \"datasets\": []}' > outputs/metrics.json\n"
    )
    return Job(id=run_id, run_dir=run_dir, kind=kind, parents=tuple(parents), gpus=gpus, cpus=cpus)


def record(lineage, jobs: list[Job]) -> None:
    runs = [RunRecord(id=j.id, spec_name="t", phase=j.id, kind=j.kind, run_dir=str(j.run_dir)) for j in jobs]
    lineage.record_plan_records(PlanRecords(runs=runs))


def executions(job: Job) -> list[str]:
    path = job.run_dir / "executions.txt"
    return path.read_text().splitlines() if path.exists() else []


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    return tmp_path / "runs"


@pytest.fixture
def lineage(runs: Path):
    with open_lineage(runs / "lineage.sqlite") as lin:
        yield lin


def run_all(jobs, lineage, **executor):
    record(lineage, jobs)
    return execute(jobs, lineage, LocalExecutor(**{"cpus": 2, **executor}), heartbeat_s=0.2, grace_s=1.0)


def test_runs_in_dag_order_and_streams_logs(runs, lineage):
    order = runs / "order.txt"
    a = make_job(runs, "a", f"echo a >> {order}; echo hello-from-a")
    b = make_job(runs, "b", f"echo b >> {order}", parents=["a"])
    c = make_job(runs, "c", f"echo c >> {order}", parents=["b"])
    result = run_all([a, b, c], lineage)
    assert result.exit_code == 0
    assert order.read_text().split() == ["a", "b", "c"]
    assert {lineage.run(j.id).state for j in (a, b, c)} == {S.succeeded}
    assert "hello-from-a" in (a.run_dir / "logs" / "attempt-1.log").read_text()
    assert [e.to_state for e in lineage.events("a")] == [S.planned, S.queued, S.running, S.succeeded]
    assert lineage.run("a").exit_code == 0 and lineage.run("a").pid > 0
    assert isinstance(LocalExecutor(cpus=1), Executor)


def test_failure_blocks_all_descendants_while_independent_branches_run(runs, lineage):
    a = make_job(runs, "a", "echo boom >&2; exit 3")
    b = make_job(runs, "b", parents=["a"])
    c = make_job(runs, "c", parents=["b"])
    d = make_job(runs, "d")
    result = run_all([a, b, c, d], lineage)
    assert result.exit_code == 1
    assert result.states == {"a": S.failed, "b": S.blocked, "c": S.blocked, "d": S.succeeded}
    assert "exited with 3: boom" in lineage.run("a").reason and "logs/attempt-1.log" in lineage.run("a").reason
    assert lineage.run("b").reason == "upstream a failed"
    assert lineage.run("c").reason == "upstream b blocked"
    assert "boom" in (a.run_dir / "logs" / "attempt-1.log").read_text()
    assert executions(b) == [] and executions(c) == []


MODEL = FAKE_MODEL_SH


@pytest.mark.parametrize(
    "body, state, reason",
    [
        ("true", S.failed, "trained zero steps"),  # exit 0, no checkpoint, no model
        (f"mkdir -p checkpoints/global_step_0; {MODEL}", S.failed, "global_step_N with N > 0"),
        (f"mkdir -p checkpoints/global_step_0 checkpoints/global_step_5; {MODEL}", S.succeeded, "outputs complete"),
        (MODEL, S.succeeded, "outputs complete"),  # trl trainers save model/ without verl checkpoints
    ],
)
def test_trained_run_needs_a_model_and_a_checkpoint_past_step_zero(runs, lineage, body, state, reason):
    job = make_job(runs, "g", body, kind="grpo")
    run_all([job], lineage)
    rec = lineage.run("g")
    assert rec.state is state and reason in rec.reason and rec.exit_code == 0


def test_eval_run_without_metrics_fails_its_completion_check(runs, lineage):
    job = make_job(runs, "e", kind="eval")
    (job.run_dir / "launch.sh").write_text("echo evaluated nothing\n")
    run_all([job], lineage)
    assert lineage.run("e").state is S.failed
    assert "wrote no outputs/metrics.json" in lineage.run("e").reason


def test_best_of_n_needs_samples_and_unknown_kinds_never_pass(tmp_path):
    assert "wrote no outputs/best_of_n.json" in check_completion("best_of_n", tmp_path)
    (tmp_path / "outputs" / "samples").mkdir(parents=True)
    (tmp_path / "outputs" / "best_of_n.json").write_text(
        '{"humaneval": {"problems": 2, "expected_samples": 4, "generated": 4}}')
    (tmp_path / "outputs" / "samples" / "humaneval.jsonl").write_text("{}\n")
    assert check_completion("best_of_n", tmp_path) == "humaneval: 1 of 2 problems have no choice"
    (tmp_path / "outputs" / "samples" / "humaneval.jsonl").write_text("{}\n{}\n")
    assert check_completion("best_of_n", tmp_path) is None
    assert "no completion check is registered for run kind 'mystery'" in check_completion("mystery", tmp_path)


def test_cpu_slots_bound_concurrency(runs, lineage):
    jobs = [make_job(runs, f"j{i}", "date +%s.%N > start; sleep 0.3; date +%s.%N > end") for i in range(4)]
    run_all(jobs, lineage, cpus=2)
    spans = [(float((j.run_dir / "start").read_text()), float((j.run_dir / "end").read_text())) for j in jobs]
    overlaps = [sum(1 for s, e in spans if s <= t < e) for t, _ in spans]
    assert max(overlaps) == 2


def test_gpu_slots_are_exclusive_and_oversized_jobs_fail_upfront(runs, lineage):
    g1 = make_job(runs, "g1", 'echo "$CUDA_VISIBLE_DEVICES" > gpus; sleep 0.2', gpus=1)
    g2 = make_job(runs, "g2", 'echo "$CUDA_VISIBLE_DEVICES" > gpus; sleep 0.2', gpus=1)
    cpu = make_job(runs, "cpu", 'echo "[$CUDA_VISIBLE_DEVICES]" > gpus')
    big = make_job(runs, "big", gpus=4)
    child = make_job(runs, "child", parents=["big"])
    result = run_all([g1, g2, cpu, big, child], lineage, gpus=2, cpus=4)
    seen = {(g1.run_dir / "gpus").read_text().strip(), (g2.run_dir / "gpus").read_text().strip()}
    assert seen == {"0", "1"}
    assert (cpu.run_dir / "gpus").read_text().strip() == "[]"
    assert result.states["big"] is S.failed and "needs 4 GPU(s)" in lineage.run("big").reason
    assert result.states["child"] is S.blocked and executions(big) == []


def test_resume_requeues_failures_with_a_new_attempt_log(runs, lineage):
    flag = runs / "fail-once"
    flag.parent.mkdir(parents=True, exist_ok=True)
    flag.touch()
    a = make_job(runs, "a", f"if [ -e {flag} ]; then echo first-try; exit 1; fi; echo second-try")
    b = make_job(runs, "b", parents=["a"])
    assert run_all([a, b], lineage).states == {"a": S.failed, "b": S.blocked}
    flag.unlink()
    assert run_all([a, b], lineage).states == {"a": S.succeeded, "b": S.succeeded}
    assert "first-try" in (a.run_dir / "logs" / "attempt-1.log").read_text()
    assert "second-try" in (a.run_dir / "logs" / "attempt-2.log").read_text()
    assert lineage.run("a").attempt == 2 and len(executions(b)) == 1
    assert any(e.reason.startswith("resumed after failed") for e in lineage.events("a"))
    # A third invocation finds nothing to do: succeeded runs are skipped.
    assert run_all([a, b], lineage).exit_code == 0 and len(executions(a)) == 2


# ---------------------------------------------------------------- a real runner process
SLEEPER = 'sleep 30 & echo $! > child.pid; echo $$ > leader.pid; wait'


def start_driver(runs: Path, jobs: list[Job], cpus: int = 2) -> subprocess.Popen:
    jobs_file = runs / "jobs.json"
    payload = {"cpus": cpus, "jobs": [{"id": j.id, "run_dir": str(j.run_dir), "kind": j.kind, "parents": list(j.parents)} for j in jobs]}
    jobs_file.write_text(json.dumps(payload))
    return subprocess.Popen(
        [sys.executable, str(DRIVER), str(jobs_file), str(runs)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


def wait_for(predicate, timeout=15.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


def pids_of(job: Job) -> list[int]:
    return [int((job.run_dir / name).read_text()) for name in ("leader.pid", "child.pid")]


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_sigint_kills_every_process_group_and_records_cancelled(runs):
    a, b = make_job(runs, "a", SLEEPER), make_job(runs, "b", SLEEPER)
    c = make_job(runs, "c", parents=["a"])
    runner = start_driver(runs, [a, b, c])
    wait_for(lambda: all((j.run_dir / "child.pid").exists() for j in (a, b)))
    pids = pids_of(a) + pids_of(b)
    assert all(alive(p) for p in pids)
    runner.send_signal(signal.SIGINT)
    assert runner.wait(timeout=15) == 130
    assert not any(alive(p) for p in pids)
    with open_lineage(runs / "lineage.sqlite", readonly=True) as lin:
        assert [lin.run(x).state for x in "abc"] == [S.cancelled, S.cancelled, S.queued]
        assert lin.run("a").reason == "interrupted by SIGINT"


def test_sigterm_cancels_like_ctrl_c(runs):
    a = make_job(runs, "a", SLEEPER)
    runner = start_driver(runs, [a])
    wait_for(lambda: (a.run_dir / "child.pid").exists())
    runner.send_signal(signal.SIGTERM)
    assert runner.wait(timeout=15) == 130
    assert not any(alive(p) for p in pids_of(a))
    with open_lineage(runs / "lineage.sqlite", readonly=True) as lin:
        assert lin.run("a").state is S.cancelled


def test_kill_9_then_resume_reaps_orphans_and_never_duplicates(runs):
    once = runs / "b-ran-once"
    a = make_job(runs, "a")
    b = make_job(runs, "b", f"if [ ! -e {once} ]; then touch {once}; {SLEEPER}; fi", parents=["a"])
    c = make_job(runs, "c", parents=["b"])
    runner = start_driver(runs, [a, b, c])
    wait_for(lambda: (b.run_dir / "child.pid").exists())
    lin = open_lineage(runs / "lineage.sqlite", readonly=True)
    # The heartbeat thread keeps stamping the running run.
    wait_for(lambda: lin.run("b").heartbeat_at > lin.run("b").started_at)
    orphans = pids_of(b)
    runner.kill()
    runner.wait()
    assert all(alive(p) for p in orphans)  # the scripts outlive a kill -9'd runner

    second = start_driver(runs, [a, b, c])
    out, _ = second.communicate(timeout=30)
    assert second.returncode == 0, out
    assert not any(alive(p) for p in orphans)
    assert [len(executions(j)) for j in (a, b, c)] == [1, 2, 1]
    assert [lin.run(x).state for x in "abc"] == [S.succeeded] * 3
    died = [e for e in lin.events("b") if e.to_state is S.failed]
    assert len(died) == 1 and died[0].reason.startswith("runner died: script pid")
    assert "killed 2 surviving process(es)" in died[0].reason
    assert lin.db["runs"].count == 3
    assert (b.run_dir / "logs" / "attempt-1.log").exists() and (b.run_dir / "logs" / "attempt-2.log").exists()
    lin.close()


def test_second_runner_is_refused_naming_the_holder_while_lineage_stays_readable(runs):
    a = make_job(runs, "a", SLEEPER)
    runner = start_driver(runs, [a])
    wait_for(lambda: (a.run_dir / "child.pid").exists())
    with pytest.raises(RunnerBusy, match=f"pid {runner.pid} on "):
        RunLock(runs).acquire()
    with open_lineage(runs / "lineage.sqlite", readonly=True) as lin:
        assert lin.run("a").state is S.running
    runner.send_signal(signal.SIGINT)
    assert runner.wait(timeout=15) == 130
    with RunLock(runs):  # released once the holder is gone
        pass


def test_lock_is_exclusive_within_one_process_too(tmp_path):
    with RunLock(tmp_path):
        with pytest.raises(RunnerBusy, match=f"pid {os.getpid()}"):
            RunLock(tmp_path).acquire()
