"""Ending a local run ends all of it: the processes its script started in groups and sessions of
their own (GNU `timeout`, which every verl script wraps its trainer in, leads one) included."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from engine.runs.executors.base import GROUP_ENV, RUN_ID_ENV, Job, Started
from engine.runs.executors.local import LAUNCH_DIRS_ENV, LocalExecutor
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


def _run_dir(tmp_path: Path, children: tuple[str, ...], tail: str, name: str = "run") -> Path:
    run_dir = tmp_path / name
    run_dir.mkdir(parents=True)
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


def _dead_runners_script(run_dir: Path, run_id: str, also: tuple[tuple[str, Path], ...] = (), *,
                         older: bool = False) -> subprocess.Popen:
    """The script of a runner that is gone: started as the executor starts one (doing the runs
    `also` names too), but not its child; `older`: as a runner from before launches named their
    directories did."""
    env = {**os.environ, RUN_ID_ENV: run_id, GROUP_ENV: " ".join(i for i, _ in also)}
    if not older:
        env[LAUNCH_DIRS_ENV] = "\n".join(str(d.resolve()) for d in (run_dir, *(d for _, d in also)))
    return subprocess.Popen(["bash", "launch.sh"], cwd=run_dir, env=env, start_new_session=True,
                            stdin=subprocess.DEVNULL)


def _reap(run_dir: Path, run_id: str) -> int:
    record = RunRecord(id=run_id, spec_name="t", phase="train", kind="grpo", run_dir=str(run_dir))
    return LocalExecutor(cpus=1).reap(record, grace_s=0.5)


def test_reaping_a_dead_runners_run_ends_what_its_script_started(tmp_path, cleanup):
    run_dir = _run_dir(tmp_path, ALL, "wait")
    script = _dead_runners_script(run_dir, "train")
    cleanup.append(script.pid)
    pids = _started_pids(run_dir, ALL)
    cleanup.extend(pids)
    found = _reap(run_dir, "train")
    script.wait(timeout=5)
    assert found >= 4  # the script, `timeout`, the trainer's shell and its sleep at least
    assert _survivors(pids, "train") == []


def test_reaping_a_run_an_older_runner_launched_still_ends_it(tmp_path, cleanup):
    # Its runner died, rlvr-run was upgraded: the new runner's recovery must still end the old
    # trainer, or a new attempt would write the run directory beside it.
    run_dir = _run_dir(tmp_path, ALL, "wait")
    script = _dead_runners_script(run_dir, "train", older=True)
    cleanup.append(script.pid)
    pids = _started_pids(run_dir, ALL)
    cleanup.extend(pids)
    assert _reap(run_dir, "train") >= 4
    script.wait(timeout=5)
    assert _survivors(pids, "train") == []


def test_reaping_a_run_another_runs_process_did_ends_that_process_and_spares_another_studys(tmp_path, cleanup):
    """Evaluations of one checkpoint run in one process: reaping one of them ends it, but not the
    process doing the same evaluation for the same run id in another runs directory."""
    scripts = {}
    for study in ("mine", "other"):
        run_dir = _run_dir(tmp_path, ("trainer",), "wait", name=f"{study}/runs/eval-a")
        also = (("eval-b", tmp_path / study / "runs" / "eval-b"),)
        scripts[study] = _dead_runners_script(run_dir, "eval-a", also=also)
        cleanup.append(scripts[study].pid)
        cleanup.extend(_started_pids(run_dir, ("trainer",)))
    assert _reap(tmp_path / "mine" / "runs" / "eval-b", "eval-b") >= 1
    assert scripts["mine"].wait(timeout=5) != 0
    assert scripts["other"].poll() is None


# Run ids are hashes of a run's content: the same run in another study (another runs directory)
# on this machine has the same id. Ending a run must spare it, and any other run.
BYSTANDERS = {"same id, other study": ("train", "other-study/runs/train"), "other run": ("eval", "runs/eval")}


def _bystanders(tmp_path: Path, cleanup: list[int]) -> tuple[list[Started], list[int]]:
    started, pids = [], []
    for run_id, where in BYSTANDERS.values():
        run_dir = _run_dir(tmp_path, ("trainer",), "wait", name=where)
        job = Job(id=run_id, run_dir=run_dir, kind="grpo")
        started.append(LocalExecutor(cpus=1).start(job, attempt=1, log_path=run_dir / "logs" / "attempt-1.log"))
        pids += _started_pids(run_dir, ("trainer",))
    cleanup.extend([s.pid for s in started] + pids)
    return started, pids


@pytest.mark.parametrize("ending", ["stop", "exit", "reap"])
def test_ending_a_run_spares_other_runs_and_the_same_run_of_another_study(tmp_path, cleanup, ending):
    others, other_pids = _bystanders(tmp_path, cleanup)
    tail = "until [ -s trainer.pid ]; do sleep 0.02; done" if ending == "exit" else "wait"
    run_dir = _run_dir(tmp_path, ("trainer",), tail, name="runs/train")
    if ending == "reap":
        script = _dead_runners_script(run_dir, "train")
        cleanup.append(script.pid)
        pids = _started_pids(run_dir, ("trainer",))
        _reap(run_dir, "train")
        script.wait(timeout=5)
    else:
        executor = LocalExecutor(cpus=1)
        started = executor.start(Job(id="train", run_dir=run_dir, kind="grpo"), attempt=1,
                                 log_path=run_dir / "logs" / "attempt-1.log")
        cleanup.append(started.pid)
        pids = _started_pids(run_dir, ("trainer",))
        if ending == "stop":
            executor.stop([started], grace_s=0.5)
        else:
            deadline = time.monotonic() + 5.0
            while executor.poll(started) is None:
                assert time.monotonic() < deadline
                time.sleep(0.02)
    cleanup.extend(pids)
    assert not [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    assert [s.handle.popen.poll() for s in others] == [None, None]
    assert all(psutil.pid_exists(pid) for pid in other_pids)


# A runner that may not signal another user's processes, as any user's runner may not: root
# without CAP_KILL. Its script leaves a process of another user in its session.
RUNNER = """
import sys, time
from pathlib import Path
from engine.runs.executors.base import Job
from engine.runs.executors.local import LocalExecutor
run_dir = Path(sys.argv[1])
executor = LocalExecutor(cpus=1)
started = executor.start(Job(id="train", run_dir=run_dir, kind="grpo"), attempt=1,
                         log_path=run_dir / "logs" / "attempt-1.log")
while executor.poll(started) is None:
    time.sleep(0.02)
print(started.detail)
"""
FOREIGN = "setpriv --reuid=65534 --regid=65534 --clear-groups sleep 1003 & echo $! > foreign.pid"


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                    reason="a runner without CAP_KILL and a child of another user need root and setpriv")
def test_a_process_of_another_user_is_left_and_named_in_the_attempts_detail_and_log(tmp_path, cleanup):
    run_dir = _run_dir(tmp_path, (), f"{FOREIGN}\nuntil [ -s foreign.pid ]; do sleep 0.02; done")
    done = subprocess.run(["setpriv", "--bounding-set=-kill", sys.executable, "-c", RUNNER, str(run_dir)],
                          cwd=Path(__file__).parents[2], capture_output=True, text=True, timeout=60)
    foreign = int((run_dir / "foreign.pid").read_text())
    cleanup.append(foreign)
    assert done.returncode == 0, done.stderr
    assert "another user" in done.stdout and f"pid {foreign}" in done.stdout
    assert f"pid {foreign}" in (run_dir / "logs" / "attempt-1.log").read_text()
    assert psutil.Process(foreign).status() != psutil.STATUS_ZOMBIE
