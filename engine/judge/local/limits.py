"""Per-sample limits for the sandbox worker's processes: privileges dropped, rlimits, the CPU
limit, and the processes a sample leaves behind killed and reaped; and the two prctl calls every
judge process makes (die with its parent, a name `ps` shows). The isolation they complete is
`engine.judge.local.sandbox`'s. Stdlib only: the worker imports this file before hiding the
repository.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import resource

from engine.judge.local import faults
from engine.judge.local.seccomp import forbid_new_processes
from engine.judge.local.syscalls import PR_SET_DUMPABLE, check_rc, libc


def drop_privileges(uid: int | None, *, reset_dumpable: bool, drop_capabilities: bool) -> None:
    if uid is not None and os.geteuid() == 0:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    if drop_capabilities:
        _drop_capabilities()
    if reset_dumpable:
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


_CAP_VERSION_3 = 0x20080522


def _drop_capabilities() -> None:
    """In a user namespace the runner is its root: clear every capability (effective, permitted,
    inheritable), so it cannot undo a mount or reach past its namespaces. no_new_privs (set in the
    nursery) keeps an exec from giving them back. Raises when the kernel refuses: a runner that
    kept its capabilities must not run the program."""
    header = (ctypes.c_uint32 * 2)(_CAP_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()
    check_rc(libc.capset(header, data), "capset")


def runner_limits(bounds: dict) -> None:
    """The runner's own limits: its machinery must not fail on a limit meant for the program. Its
    memory is bounded (the tests' own code runs here) but with room above
    the program's; no per-uid process limit (before Linux 5.14 one counts every task of the host
    uid in a user namespace, so the runner's own fork failed on a busy machine) and no file-size
    limit (it writes each test's input, which may be larger than the output cap)."""
    for kind, value in ((resource.RLIMIT_AS, (bounds["memory_mb"] * 2 + RUNNER_HEADROOM_MB) * 1024 * 1024),
                        (resource.RLIMIT_NOFILE, bounds["max_open_files"]), (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(kind, (value, value))


RUNNER_HEADROOM_MB = 512


def program_limits(bounds: dict) -> None:
    """In the program's own process (a function's, or one stdio test's), right after its fork:
    memory, file size, open files, no core dumps, and its processes bounded (`PROCESS_BOUND`)."""
    rlimits = {
        resource.RLIMIT_AS: bounds["memory_mb"] * 1024 * 1024,
        resource.RLIMIT_NOFILE: bounds["max_open_files"],
        resource.RLIMIT_FSIZE: bounds["output_bytes"],
        resource.RLIMIT_CORE: 0,
    }
    if PROCESS_BOUND[0] == "rlimit":
        rlimits[resource.RLIMIT_NPROC] = bounds["max_processes"]
    for kind, value in rlimits.items():
        resource.setrlimit(kind, (value, value))
    if PROCESS_BOUND[0] != "rlimit":
        forbid_new_processes(signals=PROCESS_BOUND[0] == "no-fork-no-signals")


# How the program's processes are bounded, set once in the nursery (`choose_process_bound`):
# "rlimit" where RLIMIT_NPROC counts only the sandbox's own tasks; "no-fork" where it would count
# every task of the judge's own uid (then the program may start threads, bounded by its memory,
# but no process); "no-fork-no-signals" where, besides, no PID namespace hides the user's other
# processes (no process may then outlive the sample, and none of the user's can be signalled).
PROCESS_BOUND = ["rlimit"]


def choose_process_bound(*, sandbox_uid: bool, userns: bool, pidns: bool, release: str | None = None) -> str:
    """RLIMIT_NPROC counts tasks per uid: sound with a sandbox uid of the worker's own (root), and in
    a user namespace since Linux 5.14 (counted per namespace); before 5.14, in a user namespace,
    and without either, it counts every task of the user, the judge's and the trainer's included."""
    if sandbox_uid:
        return "rlimit"
    if not pidns:
        return "no-fork-no-signals"
    if userns and _release_at_least(release or os.uname().release, (5, 14)) and not faults.fires("old-kernel"):
        return "rlimit"
    return "no-fork"


def _release_at_least(release: str, wanted: tuple[int, int]) -> bool:
    parts = []
    for piece in release.split(".")[:2]:
        digits = "".join(itertools.takewhile(str.isdigit, piece))
        parts.append(int(digits) if digits else 0)
    return tuple(parts) >= wanted


def set_cpu_limit(seconds: float) -> None:
    """RLIMIT_CPU counts whole seconds: SIGXCPU at the soft limit, SIGKILL one second later."""
    soft = max(1, int(seconds + 0.999))
    resource.setrlimit(resource.RLIMIT_CPU, (soft, soft + 1))


def kill_all_in_namespace() -> None:
    """From a PID namespace's init: SIGKILL every other process in it, then reap them."""
    try:
        os.kill(-1, 9)
    except ProcessLookupError:
        pass
    reap_zombies()


def reap_zombies() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def sweep_uid(uid: int) -> None:
    """Fallback without a PID namespace: a throwaway child with the sandbox uid kills all its processes."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setresuid(uid, uid, uid)
            os.kill(-1, 9)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def die_with_parent() -> None:
    """SIGKILL this process when its parent dies (a judge killed mid-job leaves no sandbox behind)."""
    PR_SET_PDEATHSIG = 1
    libc.prctl(PR_SET_PDEATHSIG, 9, 0, 0, 0)


def set_name(name: bytes) -> None:
    """The name `ps`/`top` show for this process (the judge's roles are told apart by it)."""
    libc.prctl(15, ctypes.c_char_p(name), 0, 0, 0)  # PR_SET_NAME
