"""Run launch scripts as subprocesses on this machine, within GPU and CPU slots.

Each script runs in its own session. Ending a run (a stop, its script's exit, a dead runner's
reap) ends every process of it, not just its script's process group: GNU `timeout` (every verl
script wraps its trainer in one) leads a group of its own, as Ray's processes may, so a run's
processes are found by the marks each inherits, by the script's session and by descent, and
each of their groups is signalled. A run id is not such a mark on its own: it is a hash of the
run's content, so the same run in two studies on one machine has the same id.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional, Sequence

import psutil

from engine.errors import UserError
from engine.resources import visible_gpus
from engine.runs import warm
from engine.runs.executors.base import ALSO_ENV, GROUP_ENV, RUN_ID_ENV, Job, Started, run_environment
from engine.runs.lineage import RunRecord, now_iso
from engine.runs.warm import WarmServer

KILL_S = 5.0  # the longest the SIGKILL of a run goes on finding processes of it (a script forking as it dies)
# Marks of one launch in the environment of everything it starts. The token tells this runner's
# launches apart; the directories (resolved, one a line, the run's then each of RLVR_GROUP_RUN_IDS')
# tell a dead runner's run from the same run id launched from another runs directory. Not
# RLVR_RUN_DIR: a launch script takes that one as where its run directory is (a Ray job's copy).
LAUNCH_ENV = "RLVR_LAUNCH"
LAUNCH_DIRS_ENV = "RLVR_LAUNCH_DIRS"


@dataclass(frozen=True)
class _RunMark:
    """Which processes are one run's: those of its launch `token` (while its runner lives), else
    those of `run_id` launched from `run_dir` (a dead runner's; any directory where lineage has none,
    or where the launch's runner, an older one, named no directories: then by the id alone)."""

    token: Optional[str] = None
    run_id: str = ""
    run_dir: Optional[str] = None

    def on(self, env: Mapping[str, str]) -> bool:
        if self.token is not None:
            return env.get(LAUNCH_ENV) == self.token
        ids = [env.get(RUN_ID_ENV, ""), *env.get(GROUP_ENV, "").split()]
        if self.run_dir is None or LAUNCH_DIRS_ENV not in env:  # a launch by a runner that set no dirs
            return self.run_id in ids
        return (self.run_id, self.run_dir) in zip(ids, env.get(LAUNCH_DIRS_ENV, "").split("\n"))


@dataclass(kw_only=True)
class _Slots:
    popen: subprocess.Popen
    token: str
    gpu_ids: list[str]
    cpus: int
    released: bool = False


def gpu_ids(count: int) -> list[str]:
    """The ids of `count` GPUs this process may use: the first of a CUDA_VISIBLE_DEVICES the user
    narrowed (e.g. "2,3"), else 0..count-1. Asking for more than CUDA_VISIBLE_DEVICES shows is an
    error, not a silent fall-back to devices the user fenced off."""
    preset = os.environ.get("CUDA_VISIBLE_DEVICES")
    if preset is None:
        return [str(i) for i in range(count)]
    shown = visible_gpus()
    if count > len(shown):
        raise UserError(f"{count} GPU(s) asked for (--gpus {count}) but CUDA_VISIBLE_DEVICES={preset!r} shows "
                        f"{len(shown)}\n  fix: pass --gpus {len(shown)}, or widen CUDA_VISIBLE_DEVICES to {count} GPUs")
    return shown[:count]


@dataclass(kw_only=True)
class LocalExecutor:
    groups = True
    gpus: int = field(default_factory=lambda: len(visible_gpus()))  # default: every GPU this machine shows
    cpus: int = field(default_factory=lambda: os.cpu_count() or 1)
    _free_gpus: list[str] = field(init=False, repr=False)
    _free_cpus: int = field(init=False, repr=False)
    _warm: Optional[WarmServer] = field(default=None, init=False, repr=False)
    _warm_failed: bool = field(default=False, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.gpus < 0 or self.cpus < 1:
            raise ValueError(f"LocalExecutor needs gpus >= 0 and cpus >= 1, got {self.gpus}, {self.cpus}")
        self._free_gpus = gpu_ids(self.gpus)
        self._free_cpus = self.cpus

    def refusal(self, job: Job) -> Optional[str]:
        if job.gpus > self.gpus:
            return f"needs {job.gpus} GPU(s) but this executor offers {self.gpus}"
        if not job.launch_script.is_file():
            return f"no launch script at {job.launch_script}"
        return None

    def _cpus_for(self, job: Job) -> int:
        # CPUs can be oversubscribed safely: a job asking for more than exist runs alone.
        return min(max(job.cpus, 1), self.cpus)

    def fits(self, job: Job) -> bool:
        return job.gpus <= len(self._free_gpus) and self._cpus_for(job) <= self._free_cpus

    def start(self, job: Job, *, attempt: int, log_path: Path, also: Sequence[Job] = ()) -> Started:
        if not self.fits(job):
            raise RuntimeError(f"{job.id} started without free slots")
        python = self._python_for(job)  # before any slot is taken: it may start the warm server
        cpus = self._cpus_for(job)
        gpu_ids, self._free_gpus = self._free_gpus[: job.gpus], self._free_gpus[job.gpus :]
        self._free_cpus -= cpus
        token = uuid.uuid4().hex
        env = {
            **run_environment(os.environ),
            RUN_ID_ENV: job.id,
            "RLVR_ATTEMPT": str(attempt),
            "RLVR_CPUS": str(cpus),
            # As many math threads as CPU slots held: two runs sharing two cores with two threads
            # each spend their time thrashing (measured: 3x slower generation).
            "OMP_NUM_THREADS": str(cpus),
            "MKL_NUM_THREADS": str(cpus),
            "RLVR_PYTHON": python,
            # Always set, so a CPU-only job cannot grab a GPU another job holds.
            "CUDA_VISIBLE_DEVICES": ",".join(gpu_ids),
            GROUP_ENV: " ".join(j.id for j in also),
            ALSO_ENV: "\n".join(str(j.run_dir) for j in also),
            LAUNCH_ENV: token,
            LAUNCH_DIRS_ENV: "\n".join(str(j.run_dir.resolve()) for j in (job, *also)),
        }
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "xb") as log:  # "x": an earlier attempt's log is never truncated
            log.write(
                f"# rlvr-run: {job.id} attempt {attempt} on {socket.gethostname()} at {now_iso()}; "
                f"CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']!r} cpus={cpus}"
                f"{'; with ' + env[GROUP_ENV] if also else ''}\n".encode()
            )
            log.flush()
            popen = subprocess.Popen(
                ["bash", str(job.launch_script)],
                cwd=job.run_dir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        slots = _Slots(popen=popen, token=token, gpu_ids=gpu_ids, cpus=cpus)
        return Started(job=job, attempt=attempt, pid=popen.pid, log_path=log_path, handle=slots)

    def _python_for(self, job: Job) -> str:
        """The interpreter its script's `"$RLVR_PYTHON"` names: the warm server's for a CPU-only
        job that runs the project's own modules (it then skips the torch and transformers imports);
        the real one otherwise."""
        if job.gpus or not warm.enabled() or self._warm_failed:
            return sys.executable
        try:
            needs = f'"$RLVR_PYTHON" -m engine.' in job.launch_script.read_text()
        except OSError:
            needs = False
        if not needs:
            return sys.executable
        if self._warm is None:
            try:
                self._warm = warm.WarmServer()
            except OSError:  # e.g. a full or unwritable TMPDIR: every script then starts cold
                self._warm_failed = True
                return sys.executable
            weakref.finalize(self, self._warm.close)
        return self._warm.python

    def poll(self, started: Started) -> Optional[int]:
        slots: _Slots = started.handle
        if slots.popen.returncode is not None:
            return slots.popen.returncode
        if not _exited(slots.popen.pid):
            return None
        # The script is done; whatever it left running goes too. Its zombie, not yet waited for,
        # holds its pid meanwhile: no new process can lead a session of that number.
        _note_left(started, _kill_run(_RunMark(slots.token), started.pid))
        self._release(slots)
        return slots.popen.wait()

    def stop(self, running: list[Started], *, grace_s: float) -> None:
        asked = [_signal_run(_RunMark(started.handle.token), started.pid, signal.SIGTERM)[0] for started in running]
        deadline = time.monotonic() + grace_s
        for started, procs in zip(running, asked):
            slots: _Slots = started.handle
            while not _exited(slots.popen.pid) and time.monotonic() < deadline:
                time.sleep(0.02)
            _wait_gone(procs, deadline)
            _note_left(started, _kill_run(_RunMark(slots.token), started.pid, procs))
            slots.popen.wait()
            self._release(slots)

    def reattach(self, record: RunRecord, job: Job, *, log_path: Path) -> Optional[Started]:
        # A dead runner's scripts are not this process's children: they cannot be waited on, only reaped.
        return None

    def reap(self, record: RunRecord, *, grace_s: float) -> int:
        mark = _RunMark(run_id=record.id, run_dir=str(Path(record.run_dir).resolve()) if record.run_dir else None)
        procs, _ = _signal_run(mark, None, signal.SIGTERM)
        _wait_gone(procs, time.monotonic() + grace_s)
        _kill_run(mark, None, procs)
        return len(procs)

    def _release(self, slots: _Slots) -> None:
        if not slots.released:
            self._free_gpus.extend(slots.gpu_ids)
            self._free_cpus += slots.cpus
            slots.released = True


def _exited(pid: int) -> bool:
    """Whether this child has exited, without waiting for it (its pid stays taken until it is)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # already waited for
        return True


def _note_left(started: Started, foreign: list[int]) -> None:
    """Say, in its attempt's detail and log, what of the run could not be killed."""
    if not foreign:
        return
    started.detail = (f"{len(foreign)} process(es) of it run as another user this runner cannot signal "
                      f"and were left: pid {', '.join(map(str, foreign))}")
    with contextlib.suppress(OSError), open(started.log_path, "a") as log:
        log.write(f"# rlvr-run: {started.detail}\n")


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _signal_run(mark: _RunMark, session: Optional[int], sig: signal.Signals,
                known: Sequence[psutil.Process] = ()) -> tuple[list[psutil.Process], list[int]]:
    """Send `sig` to every process of the run (its script leads `session`, where known) and to
    their process groups; the processes signalled, and the pids of those found that this
    process may not signal (another user's). They are found before any is signalled: a child
    whose parent dies of it is no longer a descendant; `known` (an earlier call's) stay the
    run's while they live."""
    found = _processes_of_run(mark, session)
    found += [p for p in known if _alive(p) and p.pid not in {q.pid for q in found}]
    procs = [p for p in found if _may_signal(p.pid)]
    if session is not None:
        _signal_group(session, sig)  # the script's own group first, before any process it started
    mine = os.getpgrp()
    for pgid in {pgid for p in procs if (pgid := _pgid(p.pid)) is not None and pgid != mine}:
        _signal_group(pgid, sig)
    for proc in procs:
        if _pgid(proc.pid) == mine:  # never the runner's own group: that one process alone
            with contextlib.suppress(psutil.Error):
                proc.send_signal(sig)
    return procs, sorted(p.pid for p in found if p not in procs and _alive(p))


def _may_signal(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except PermissionError:
        return False
    except ProcessLookupError:
        pass
    return True


def _kill_run(mark: _RunMark, session: Optional[int], known: Sequence[psutil.Process] = (), *,
              within_s: float = KILL_S) -> list[int]:
    """SIGKILL every process of the run until none is left (one forked between a scan and its
    signal is found by the next scan); the pids of those it may not signal, which it leaves."""
    deadline = time.monotonic() + within_s
    while True:
        known, foreign = _signal_run(mark, session, signal.SIGKILL, known)
        if not known or time.monotonic() >= deadline:
            return foreign
        _wait_gone(known, min(deadline, time.monotonic() + 0.2))


def _wait_gone(procs: list[psutil.Process], deadline: float) -> None:
    while any(_alive(p) for p in procs) and time.monotonic() < deadline:
        time.sleep(0.02)


def _alive(proc: psutil.Process) -> bool:
    """Running, not a zombie (a killed process whose new parent has not waited for it yet is done)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _pgid(pid: int) -> Optional[int]:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def _processes_of_run(mark: _RunMark, session: Optional[int] = None) -> list[psutil.Process]:
    """The live processes of the run `mark` tells: this user's whose environment bears it (every
    script's does, and what it starts inherits it), those in `session` (the script's) or in a
    session one of those leads, and all their descendants (a child that cleared its environment
    and made a session of its own is still theirs)."""
    me = os.getpid()
    procs: dict[int, psutil.Process] = {}
    children: dict[int, list[int]] = {}
    found: set[int] = set()
    for proc in psutil.process_iter():
        try:
            if proc.pid == me or proc.status() == psutil.STATUS_ZOMBIE:
                continue
            procs[proc.pid] = proc
            children.setdefault(proc.ppid(), []).append(proc.pid)
            env = proc.environ()
            if mark.on(env):
                found.add(proc.pid)
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    sessions = {session} if session is not None else set()
    sessions |= {pid for pid in found if _sid(pid) == pid}
    if sessions:
        found |= {pid for pid in procs if pid not in found and _sid(pid) in sessions}
    todo = list(found)
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found and child != me:
                found.add(child)
                todo.append(child)
    return [procs[pid] for pid in sorted(found)]


def _sid(pid: int) -> Optional[int]:
    try:
        return os.getsid(pid)
    except OSError:
        return None
