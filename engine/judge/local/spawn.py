"""Starting a sandbox worker's process (`engine.judge.local.worker`): its command, uid, CPU and
environment; stdlib only, so that a command can start its workers before it imports the rest.

`start_early` is for the CLI: `rlvr-run judge` spends half a second importing what reads its files
and draws its progress, time in which the workers (each its own interpreter, namespaces and
warm-up) start on the other cores. A pool takes a started process that was made for the same
interpreter, CPU, hidden directories and environment as it would make now (`take`), else starts
its own; those no pool took are closed at exit.
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import subprocess
import sys
import threading
from typing import TYPE_CHECKING

from engine.judge.local import faults
from engine.judge.local.worker import REPO

if TYPE_CHECKING:
    from engine.judge.config import JudgeConfig

# Imported, not run as a script: a script is compiled from source at every start, and the memory
# that compiling churns stays in the worker's heap, which every fork copies (≈ 2 MB here).
WORKER_MAIN = f"import sys; sys.path.insert(0, {REPO!r}); from engine.judge.local.worker import main; main()"
BASE_UID = 61000  # sandbox uids start here; unused by any account on a normal system
UID_BLOCKS = 4096  # judges in one machine get different blocks of SLOTS uids (by pid)
SLOTS = 64

_slots = itertools.count()  # every worker of this process gets its own slot (and uid)


def sandbox_uid() -> int:
    """A uid no other live worker shares (unless judge pids collide modulo UID_BLOCKS or one process
    starts more than SLOTS workers): RLIMIT_NPROC is counted per uid machine-wide, and the
    no-PID-namespace fallback kills every process of the uid, so two judges (a trainer and an
    evaluator, say, or two Judge objects in one process) must never share one."""
    return BASE_UID + (os.getpid() % UID_BLOCKS) * SLOTS + next(_slots) % SLOTS


# The run's own directories: a sample must not read the exported training data (its tests) or
# anything else the run wrote. The judge's working directory is hidden too.
RUN_DIRS_ENV = ("RLVR_RUN_DIR", "RLVR_RUN_CACHE_DIR", "RLVR_RUN_DATA_MIRROR")


def hidden_dirs() -> list[str]:
    """Directories of this process that its sandboxes must not see, beyond the worker's own list."""
    return [os.getcwd(), *(os.environ[name] for name in RUN_DIRS_ENV if os.environ.get(name))]


def worker_env() -> dict[str, str]:
    env = {"PYTHONHASHSEED": "0", "PATH": os.defpath}
    if os.environ.get(faults.ENV):  # the judge's own tests inject faults of its machinery
        env[faults.ENV] = os.environ[faults.ENV]
    return env


def worker_cpus(workers: int, pin: bool | None, given: int | None) -> list[int] | None:
    """The CPU of each worker slot, or None when workers float (see `JudgeConfig.pin_workers`)."""
    allowed = sorted(os.sched_getaffinity(0))
    if pin is None:
        pin = given is None and workers >= len(allowed)
    return [allowed[slot % len(allowed)] for slot in range(workers)] if pin else None


def start(cpu: int | None, python: str) -> subprocess.Popen:
    """A worker's process; it says hello on its stdout when it is ready."""
    # A session of its own: a sample that signals its parent's process group (where no PID
    # namespace hides it) reaches this worker, never the judge's caller.
    return subprocess.Popen(
        [python, "-I", "-S", "-c", WORKER_MAIN, str(sandbox_uid()), str(-1 if cpu is None else cpu),
         json.dumps(hidden_dirs())],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=worker_env(),
        close_fds=True, start_new_session=True,
    )


_early: list[tuple[tuple, subprocess.Popen]] = []
_early_lock = threading.Lock()  # a pool starts its workers from several threads at once


def _key(cpu: int | None, python: str) -> tuple:
    return cpu, python, tuple(hidden_dirs()), tuple(sorted(worker_env().items()))


def start_early(cpus: list[int | None], python: str) -> None:
    """Start one worker per entry of `cpus` now, for the pool this process makes next."""
    started = [(_key(cpu, python), start(cpu, python)) for cpu in cpus]
    with _early_lock:
        _early.extend(started)


def take(cpu: int | None, python: str) -> subprocess.Popen:
    """A worker started early for exactly this, else a new one; each early worker is taken once."""
    key = _key(cpu, python)
    with _early_lock:
        for entry in list(_early):
            made_for, proc = entry
            if proc.poll() is not None:  # died before any pool took it
                _early.remove(entry)
                proc.stdin.close()
                proc.stdout.close()
            elif made_for == key:
                _early.remove(entry)
                return proc
    return start(cpu, python)


def close_early() -> None:
    """End the workers no pool took (their stdin closed, a worker exits)."""
    with _early_lock:
        left = [proc for _, proc in _early]
        _early.clear()
    for proc in left:
        proc.stdin.close()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()


atexit.register(close_early)  # nothing to close unless start_early ran


def start_early_for(config: "JudgeConfig") -> None:
    """`start_early` with the workers the local pool of `config` will ask for."""
    from engine.judge.config import given_cpus

    cpus = worker_cpus(config.workers, config.pin_workers, given_cpus()) or [None] * config.workers
    start_early(cpus, config.python or sys.executable)
