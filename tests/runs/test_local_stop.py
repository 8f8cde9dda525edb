"""Ending a local run ends all of it: the processes its script started in groups and sessions of
their own (GNU `timeout`, which every verl script wraps its trainer in, leads one) included."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from engine.runs.executors.base import RUN_ID_ENV, Job
from engine.runs.executors.local import LocalExecutor
from engine.runs.lineage import RunRecord

# A trainer that ignores SIGTERM under `timeout` (its own process group), a child that made a
# session of its own, and one that also cleared its environment (found only as a descendant of
# the script, so only while the script lives): a signal to the script's group reaches none.
CHILDREN = {
    "trainer": """timeout --kill-after=120 100 bash -c 'trap "" TERM; sleep 1000 & echo $! > trainer.pid; wait' &""",
    "session": """setsid bash -c 'trap "" TERM; sleep 1001 & echo $! > session.pid; wait' &""",
    "bare": """setsid env -i bash -c 'trap "" TERM; sleep 1002 & echo $! > bare.pid; wait' &""",
}
ALL = tuple(CHILDREN)


def _run_dir(tmp_path: Path, children: tuple[str, ...], tail: str) -> Path:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "launch.sh").write_text("\n".join([*(CHILDREN[c] for c in children), tail, ""]))
    return run_dir


def _started_pids(run_dir: Path, children: tuple[str, ...]) -> list[int]:
    files = [run_dir / f"{name}.pid" for name in children]
    deadline = time.monotonic() + 5.0
    while not all(f.is_file() and f.read_text().strip() for f in files):
        assert time.monotonic() < deadline, "the script's children never started"
        time.sleep(0.02)
    return [int(f.read_text()) for f in files]


def _survivors(pids: list[int], run_id: str) -> list[str]:
    """What still runs of the run: the pids it wrote, and any process whose environment names it."""
    alive = []
    for proc in psutil.process_iter():
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if proc.pid in pids or proc.environ().get(RUN_ID_ENV) == run_id:
                alive.append(" ".join(proc.cmdline()))
        except psutil.Error:
            continue
    return alive


@pytest.fixture
def cleanup():
    """Whatever a failing test leaves running is killed after it."""
    left: list[int] = []
    yield left
    for pid in left:
        try:
            os.killpg(os.getpgid(pid), signal.SIGKILL)
        except OSError:
            pass


def test_stop_ends_the_processes_the_script_started_in_groups_and_sessions_of_their_own(tmp_path, cleanup):
    run_dir = _run_dir(tmp_path, ALL, "wait")
    job = Job(id="train", run_dir=run_dir, kind="grpo")
    executor = LocalExecutor(cpus=1)
    started = executor.start(job, attempt=1, log_path=run_dir / "logs" / "attempt-1.log")
    pids = _started_pids(run_dir, ALL)
    cleanup.extend(pids)
    executor.stop([started], grace_s=0.5)
    assert _survivors(pids, job.id) == []


def test_a_script_that_exits_leaves_nothing_of_its_run_running(tmp_path, cleanup):
    kept = ("trainer", "session")
    run_dir = _run_dir(tmp_path, kept, "until [ -s trainer.pid ] && [ -s session.pid ]; do sleep 0.02; done")
    job = Job(id="train", run_dir=run_dir, kind="grpo")
    executor = LocalExecutor(cpus=1)
    started = executor.start(job, attempt=1, log_path=run_dir / "logs" / "attempt-1.log")
    pids = _started_pids(run_dir, kept)
    cleanup.extend(pids)
    deadline = time.monotonic() + 5.0
    while executor.poll(started) is None:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert _survivors(pids, job.id) == []


def test_reaping_a_dead_runners_run_ends_what_its_script_started(tmp_path, cleanup):
    run_dir = _run_dir(tmp_path, ALL, "wait")
    # The script of a runner that is gone: started as the executor starts one, but not its child.
    script = subprocess.Popen(["bash", "launch.sh"], cwd=run_dir, env={**os.environ, RUN_ID_ENV: "train"},
                              start_new_session=True, stdin=subprocess.DEVNULL)
    cleanup.append(script.pid)
    pids = _started_pids(run_dir, ALL)
    cleanup.extend(pids)
    found = LocalExecutor(cpus=1).reap(RunRecord(id="train", spec_name="t", phase="train", kind="grpo",
                                                 run_dir=str(run_dir)), grace_s=0.5)
    script.wait(timeout=5)
    assert found >= 4  # the script, `timeout`, the trainer's shell and its sleep at least
    assert _survivors(pids, "train") == []
