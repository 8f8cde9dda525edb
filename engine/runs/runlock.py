"""`runs/.lock`: one runner per runs directory.

An fcntl lock (released by the kernel when its holder dies, even by kill -9)
on a file that also names the holder, so a refused second runner can say who
holds it. `status` never takes it: it reads lineage in WAL mode.
"""

from __future__ import annotations

import fcntl
import os
import socket
from pathlib import Path
from typing import Optional, TextIO

from engine.errors import UserError

LOCK_FILE = ".lock"


class RunnerBusy(UserError):
    """Another runner holds the lock of this runs directory."""


class RunLock:
    def __init__(self, runs_dir: Path) -> None:
        self.path = Path(runs_dir) / LOCK_FILE
        self._file: Optional[TextIO] = None

    def acquire(self) -> "RunLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # "a+" never truncates: the holder's note survives a refused attempt.
        handle = open(self.path, "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "an unknown process"
            handle.close()
            raise RunnerBusy(
                f"another rlvr-run is executing in {self.path.parent} ({holder}); "
                "wait for it, stop it, or use another runs directory. `rlvr-run status` works meanwhile."
            ) from None
        handle.truncate(0)
        handle.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
        handle.flush()
        self._file = handle
        return self

    def release(self) -> None:
        if self._file is not None:
            self._file.truncate(0)
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
