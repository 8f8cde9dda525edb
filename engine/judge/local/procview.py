"""The CPU of the processes a program's process started, read from the nursery's /proc: a process's
own clock counts its threads only, and a program must not spread a test's work over children it
never reaps to pass under its CPU limit.
"""

from __future__ import annotations

import os

_CLK_TCK = os.sysconf("SC_CLK_TCK")


class ProcView:
    """The runner's PID namespace as the nursery's /proc shows it (where the runner is the init of a
    namespace of its own, every process in it but the runner is the program's): which entries are
    not in it, and which one is the program's process. Taken once, right after the fork."""

    def __init__(self, pid: int) -> None:
        self.me, self.child, self.depth = "", "", 0
        self.ours: set[str] = set()
        self.outside: set[str] = set()
        try:
            self.me = os.readlink("/proc/self")
            self.depth = len(_nspids(self.me))
            for name in os.listdir("/proc"):
                if name.isdigit() and name != self.me and self._ours(name) and _nspids(name)[self.depth - 1] == pid:
                    self.child = name
        except (OSError, ValueError, IndexError):
            self.child = ""

    def _ours(self, name: str) -> bool:
        """Whether the entry is in the runner's namespace (told once per entry; a /proc wider than
        the nursery's, the host's where no private one could be mounted, has others)."""
        if name not in self.ours and name not in self.outside:
            try:
                inside = len(_nspids(name)) >= self.depth
            except (OSError, ValueError):
                return False
            (self.ours if inside else self.outside).add(name)
        return name in self.ours

    def others(self) -> float:
        """CPU seconds of every process in the namespace but the runner and the program's process,
        with what each reaped, and what the program's process reaped."""
        if not self.child:
            return 0.0
        ticks = 0
        for name in os.listdir("/proc"):
            if not name.isdigit() or name == self.me or not self._ours(name):
                continue
            try:
                with open(f"/proc/{name}/stat", "rb") as fh:
                    fields = fh.read().rpartition(b")")[2].split()
            except OSError:
                continue  # gone since the listing: its time is now its reaper's
            utime, stime, cutime, cstime = (int(f) for f in fields[11:15])
            ticks += cutime + cstime + (0 if name == self.child else utime + stime)
        return ticks / _CLK_TCK


def _nspids(name: str) -> list[int]:
    """A process's pid in each PID namespace it is in, outermost first (/proc/<pid>/status)."""
    with open(f"/proc/{name}/status", "rb") as fh:
        for line in fh:
            if line.startswith(b"NSpid:"):
                return [int(n) for n in line.split()[1:]]
    raise ValueError("no NSpid")
