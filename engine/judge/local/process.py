"""Ending and reaping processes, reading how they ended, and ending a program as the interpreter would."""

from __future__ import annotations

import atexit
import os
import select
import signal
import sys
import time

XCPU_EXIT = 128 + signal.SIGXCPU  # how a function-mode runner reports its CPU limit


def exited_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not exited(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.001)
    return True


def wait_or_kill(pid: int, wall_s: float) -> bool:
    """Wait up to wall_s for pid to exit; SIGKILL it past that. True when it was killed."""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        pidfd = None
    if pidfd is not None:
        ready, _, _ = select.select([pidfd], [], [], wall_s)
        os.close(pidfd)
        if ready:
            return False
    else:
        deadline = time.monotonic() + wall_s
        while time.monotonic() < deadline:
            if exited(pid):
                return False
            time.sleep(0.002)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return True


def exited(pid: int) -> bool:
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def cpu_limited(status: int) -> bool:
    if os.WIFSIGNALED(status):
        return os.WTERMSIG(status) == signal.SIGXCPU
    return os.WEXITSTATUS(status) == XCPU_EXIT


def kill_group(pid: int) -> None:
    for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            target()
        except (ProcessLookupError, PermissionError):
            pass


def flush_streams() -> None:
    for stream in {id(s): s for s in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__)}.values():
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001 — a closed or replaced stream; its output is the program's
            pass


def exit_status(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    print(exc.code, file=sys.stderr)
    return 1


def finish_like_python(status: int, originals: tuple = ()) -> int:
    """What interpreter shutdown does: join non-daemon threads, run atexit, flush."""
    threading = sys.modules.get("threading")  # only a program that imported it can have threads to join
    try:
        for thread in threading.enumerate() if threading else ():
            if thread is not threading.main_thread() and not thread.daemon:
                thread.join()
        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001
        status = status or 1
    # CPython flushes the current sys.stdout/stderr and, when finalizing, the original streams too
    # (a program may swap sys.stdout for a buffer and write the buffer to sys.__stdout__ at exit).
    streams = {id(s): s for s in (sys.stdout, sys.stderr, *originals)}
    for stream in streams.values():
        try:
            if not stream.closed:  # CPython's shutdown skips a stream the program closed (`with sys.stdout`)
                stream.flush()
        except BaseException:  # noqa: BLE001 — e.g. EFBIG past the output cap
            status = status or 1
    return status
