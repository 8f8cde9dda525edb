"""A warm fork's side: becoming the client's command, and leaving as Python's own exit would."""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib.util
import io
import os
import signal
import sys
import threading
from typing import Optional


def become(request: dict, fds: list[int]) -> None:
    """In the child: turn into the client's command, then leave through Python's own exit."""
    os.setsid()
    _die_with_server()
    for target, fd in zip((0, 1, 2), fds):
        os.dup2(fd, target)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    import random

    random.seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:
        # The pools the server's imports sized from its own environment: torch's, and every
        # native one (OpenBLAS, OpenMP, MKL) threadpoolctl knows, e.g. numpy's BLAS.
        from threadpoolctl import threadpool_limits

        if "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(int(threads))
        threadpool_limits(int(threads))
    module, *args = request["argv"]
    sys.path[0] = request["cwd"]  # what `python -m` puts first (the server's was its empty folder)
    if importlib.util.find_spec(module) is None:
        print(f"{sys.executable}: No module named {module}", file=sys.stderr)
        raise SystemExit(1)
    sys.argv = [module, *args]
    # Preloaded under its own name, it would run as `__main__` beside that copy (runpy warns):
    # a cold start has only the `__main__` one.
    sys.modules.pop(module, None)
    import runpy

    runpy.run_module(module, run_name="__main__", alter_sys=True)


def _die_with_server() -> None:
    """A child outlives neither the server nor, through it, the runner (Linux's parent-death
    signal): nobody else could report its end or kill it."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() == 1:  # the server died before the call took hold
        os._exit(1)


def print_failure(err: BaseException) -> None:
    """The traceback python would print: the command's frames, not this server's."""
    import traceback

    tb = err.__traceback__
    server = (__file__, os.path.join(os.path.dirname(__file__), "warm.py"))
    while tb is not None and tb.tb_frame.f_code.co_filename in server:
        tb = tb.tb_next
    traceback.print_exception(type(err), err, tb)
    sys.stderr.flush()


def leave(code: object, *, signum: Optional[int] = None) -> None:
    """In the child: Python's exit without its teardown of everything the server imported
    (seconds, for torch and trl): non-daemon threads joined and atexit handlers run as at any
    exit, every file the command left open flushed (what a teardown's deallocation would do),
    then the exit status as `sys.exit(code)` gives it (with `signum`: killed by that signal)."""
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code & 0xFF
    else:
        print(code, file=sys.stderr)
        status = 1
    try:
        threading._shutdown()  # type: ignore[attr-defined]  # what interpreter exit calls first
        atexit._run_exitfuncs()
        # After the server's gc.freeze(), these are only the objects the command made.
        for obj in gc.get_objects():
            if isinstance(obj, io.IOBase) and not obj.closed:
                with contextlib.suppress(Exception):
                    obj.flush()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        if signum is not None:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
        os._exit(status)
