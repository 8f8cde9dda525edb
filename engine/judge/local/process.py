"""Ending and reaping processes, and reading how they ended."""

from __future__ import annotations

import os
import select
import signal
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
