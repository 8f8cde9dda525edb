"""Faults of the judge's own machinery, injected on purpose (standard library only).

The judge must tell its own failures (a fork refused, memory it cannot get, a file it cannot
open, a worker that dies) from the program's: the first are INTERNAL_ERROR, judged again and
never scored. Those failures cannot be made to happen on demand on a healthy machine, so the
judge's tests name them in `RLVR_JUDGE_FAULTS` (comma-separated), which the pool passes to its
workers; each named point then fails every time it is reached, from the end of the worker's
warm-up on (`arm`). Read once when a worker starts: nothing a sample does can set it.
"""

from __future__ import annotations

import errno
import os

ENV = "RLVR_JUDGE_FAULTS"
KNOWN = frozenset({"fork", "memory", "open", "worker-dies", "pidns", "old-kernel"})
ACTIVE: set[str] = set()


def arm() -> None:
    """The faults named in the environment fire from now on (the worker's warm-up runs without)."""
    ACTIVE.update(name for name in os.environ.get(ENV, "").split(",") if name in KNOWN)


def fires(name: str) -> bool:
    return name in ACTIVE


def fork(what: str) -> int:
    """os.fork(), or the kernel's refusal where the fault is injected."""
    if "fork" in ACTIVE:
        raise OSError(errno.EAGAIN, f"fork of the {what} refused (injected)")
    return os.fork()


def check(name: str, what: str) -> None:
    """Raise the failure `name` stands for, where it is injected."""
    if name not in ACTIVE:
        return
    if name == "memory":
        raise MemoryError(f"{what} (injected)")
    if name == "open":
        raise OSError(errno.EMFILE, f"{what}: too many open files (injected)")
    if name == "worker-dies":
        os._exit(99)
