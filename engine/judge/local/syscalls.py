"""The C library as the sandbox calls it, and how its failures are raised."""

from __future__ import annotations

import ctypes
import os

PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS = 4, 38

libc = ctypes.CDLL(None, use_errno=True)


class IsolationError(OSError):
    pass


def check_rc(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise IsolationError(err, f"{what}: {os.strerror(err)}")
