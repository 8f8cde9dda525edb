"""Per-sample limits for the sandbox worker's processes: privileges dropped, rlimits, the CPU
limit, and the processes a sample leaves behind killed and reaped; and the two prctl calls every
judge process makes (die with its parent, a name `ps` shows). The isolation they complete is
`engine.judge.local.sandbox`'s. Stdlib only: the worker imports this file before hiding the
repository.
"""

from __future__ import annotations

import ctypes
import os
import resource

from engine.judge.local.sandbox import PR_SET_DUMPABLE, check_rc, libc


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


def apply_rlimits(*, memory_mb: int, max_processes: int, max_open_files: int, max_file_bytes: int) -> None:
    rlimits = {
        resource.RLIMIT_AS: memory_mb * 1024 * 1024,
        resource.RLIMIT_NPROC: max_processes,
        resource.RLIMIT_NOFILE: max_open_files,
        resource.RLIMIT_FSIZE: max_file_bytes,
        resource.RLIMIT_CORE: 0,
    }
    for kind, value in rlimits.items():
        resource.setrlimit(kind, (value, value))


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
