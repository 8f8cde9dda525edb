"""Run launch scripts as subprocesses on this machine, within GPU and CPU slots.

Each script runs in its own session (process group), so stopping a run kills
everything it spawned (torchrun workers, ray, vllm), not just bash.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

import psutil

from engine.errors import UserError
from engine.resources import visible_gpus
from engine.runs import warm
from engine.runs.executors.base import ALSO_ENV, GROUP_ENV, RUN_ID_ENV, Job, Started, run_environment
from engine.runs.lineage import RunRecord, now_iso
from engine.runs.warm import WarmServer


@dataclass(kw_only=True)
class _Slots:
    popen: subprocess.Popen
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
        slots = _Slots(popen=popen, gpu_ids=gpu_ids, cpus=cpus)
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
        code = slots.popen.poll()
        if code is not None:
            # The script is done; whatever it left running in its group goes too.
            _signal_group(started.pid, signal.SIGKILL)
            self._release(slots)
        return code

    def stop(self, running: list[Started], *, grace_s: float) -> None:
        for started in running:
            _signal_group(started.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for started in running:
            slots: _Slots = started.handle
            try:
                slots.popen.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            _signal_group(started.pid, signal.SIGKILL)
            slots.popen.wait()
            self._release(slots)

    def reattach(self, record: RunRecord, job: Job, *, log_path: Path) -> Optional[Started]:
        # A dead runner's scripts are not this process's children: they cannot be waited on, only reaped.
        return None

    def reap(self, record: RunRecord, *, grace_s: float) -> int:
        procs = _processes_of_run(record.id)
        groups = {pgid for p in procs if (pgid := _pgid(p.pid)) is not None}
        for pgid in groups:
            _signal_group(pgid, signal.SIGTERM)
        _, alive = psutil.wait_procs(procs, timeout=grace_s)
        for pgid in groups:
            _signal_group(pgid, signal.SIGKILL)
        psutil.wait_procs(alive, timeout=grace_s)
        return len(procs)

    def _release(self, slots: _Slots) -> None:
        if not slots.released:
            self._free_gpus.extend(slots.gpu_ids)
            self._free_cpus += slots.cpus
            slots.released = True


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _pgid(pid: int) -> Optional[int]:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def _processes_of_run(run_id: str) -> list[psutil.Process]:
    """This user's processes launched for `run_id` (found by the environment every script inherits)."""
    found = []
    for proc in psutil.process_iter():
        try:
            env = proc.environ()
            if proc.pid != os.getpid() and (env.get(RUN_ID_ENV) == run_id or run_id in env.get(GROUP_ENV, "").split()):
                found.append(proc)
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    return found
