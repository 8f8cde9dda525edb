"""A runner: the init of a fresh PID namespace that runs a job's tests against the program, which
runs in processes of its own, and alone reports each test over the result pipe.
"""

from __future__ import annotations

import atexit
import builtins
import os
import resource
import signal
import struct
import sys
import time

from engine.judge.local import faults, limits
from engine.judge.local.crossing import exc_report
from engine.judge.local.limits import program_limits
from engine.judge.local.process import exit_status, finish_like_python, wait_or_kill
from engine.judge.local.program import ModuleFailed, ProgramProcess, ProgramSyntax
from engine.judge.local.testcode import before_values, namespace, run_unit
from engine.judge.local.wire import send
from engine.judge.local.workdir import clear_leftovers


PROGRESS = struct.Struct("<qd")  # (position in the test order, runner CPU seconds at its start)


def _tail(path: str, limit: int) -> str:
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            fh.seek(max(0, size - limit))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _read_capped(path: str, cap: int) -> tuple[str, bool]:
    try:
        with open(path, "rb") as fh:
            data = fh.read(cap + 1)
    except OSError:
        return "", False
    return data[:cap].decode("utf-8", "replace"), len(data) > cap


class Runner:
    """Runs inside the sandbox (pid 1 of its namespace, unprivileged). Never returns.

    It never runs the program itself: the program runs in processes it forks (one per stdio test;
    one for a function problem's tests, `ProgramProcess`), which cannot reach its result pipe,
    its memory or the page it shares with its worker. What fails here is the judge's machinery,
    not the program: it reports a "fault" frame (INTERNAL_ERROR, judged again, never scored)."""

    def __init__(self, jobs: "JobBuffer", wfd: int, pidns: bool, *, start: int = 0, progress=None) -> None:
        # The tests (`plan`) are read from `jobs` only when needed: after the program's process is
        # forked, so it never holds them (see `ProgramProcess`).
        self.jobs, self.job, self.plan = jobs, jobs.head(), None
        self.wfd, self.pidns = wfd, pidns
        self.start, self.progress = start, progress
        self.limits = self.job["limits"]
        # The CPU hard limit the nursery set, read once: this process and the program's (which
        # inherits it at the fork) keep it, and each test only moves the soft limit below it.
        self.cpu_hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
        self.restarting = False  # ends without an "end" frame: a fresh runner goes on

    def main(self) -> None:
        try:
            self.run()
        except BaseException as exc:  # noqa: BLE001 — the runner's own machinery failed: a judge fault
            try:
                send(self.wfd, {"t": "fault", "msg": f"{type(exc).__name__}: {exc}"[:500]})
            except BaseException:  # noqa: BLE001 — the worker then sees the pipe end without every report
                pass
        # Now, not after unwinding: the worker reads the frames once this process is gone, and
        # freeing the program's objects first would only delay that.
        os._exit(0)

    def run(self) -> None:
        """Every frame of the job. A function's program is compiled in its own process (every page
        this process writes is a copy-on-write fault, and it forks that process next); a stdio
        program here, once for all its tests."""
        if self.job["mode"] == "stdio":
            try:
                code = compile(self.job["program"], "<solution>", "exec", dont_inherit=True)
            except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError) as exc:
                send(self.wfd, {"t": "syntax", "msg": f"{type(exc).__name__}: {exc}"})
                return
            self.plan = self.jobs.plan()
            self.stdio(code)
        else:
            self.function(self.job["program"])
        if not self.restarting:
            send(self.wfd, {"t": "end"})

    # ---- stdio: one fresh execution of the compiled program per test
    def stdio(self, code) -> None:
        send(self.wfd, {"t": "ready"})
        for i in self.job["order"]:
            faults.check("memory", "the runner's memory")
            clear_leftovers()
            with open(f"in{i}", "w", encoding="utf-8", newline="") as fh:
                fh.write(self.plan["inputs"][i])
            done = self.run_test(i, lambda i=i: self._stdio_child(code, i))
            done["out"], done["out_truncated"] = _read_capped(f"out{i}", self.limits["output_bytes"])
            send(self.wfd, done)
            for name in (f"in{i}", f"out{i}", f"err{i}"):
                os.unlink(name)

    def _stdio_child(self, code, i: int) -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
        sys.stdin = sys.__stdin__ = open(0, "r", encoding="utf-8", closefd=False)
        sys.stdout = sys.__stdout__ = out = open(1, "w", encoding="utf-8", closefd=False)
        sys.argv = ["solution.py"]
        atexit._clear()
        status = 0
        try:
            exec(code, {"__name__": "__main__", "__builtins__": builtins})
        except SystemExit as exc:
            status = exit_status(exc)
        except BaseException:  # noqa: BLE001 — the program's own failure, reported via stderr
            import traceback

            traceback.print_exc()
            status = 1
        status = finish_like_python(status, (out, sys.__stderr__))
        os._exit(status)

    # ---- function: the program in a process of its own, asked by this one
    def function(self, source: str) -> None:
        """The tests run here (`engine.judge.local.testcode`) and call into the program's process
        (`ProgramProcess`), which answers plain data or handles. Only this process reports, and it
        never runs the program."""
        program = ProgramProcess(self, source)
        try:
            ns = self._namespace(program)
            if ns is not None:
                send(self.wfd, {"t": "ready"})
                self._tests(ns, self.plan["units"], program)
        finally:
            program.close()

    def _arm(self, k: int) -> float:
        """Before test position k: record it and the CPU used so far on the shared progress page,
        and give this process the test's CPU budget. Returns the CPU used so far."""
        used, hard = time.process_time(), self.cpu_hard
        PROGRESS.pack_into(self.progress, 0, k, used)
        resource.setrlimit(resource.RLIMIT_CPU, (min(int(used + self.limits["cpu_s"] + 1), hard), hard))
        return used

    def _namespace(self, program: "ProgramProcess") -> dict | None:
        """The tests' namespace (the program's names as handles, then the tests' setup); None (and
        the module's failure reported) when either fails. The program's process is forked before
        this process reads the tests: it never holds them, nor what they compute."""
        try:
            loaded: dict | ModuleFailed = program.start()
        except ModuleFailed as failed:
            loaded = failed
        except ProgramSyntax as exc:
            send(self.wfd, {"t": "syntax", "msg": str(exc)})
            return None
        plan = self.plan = self.jobs.plan()
        if self.start == 0:  # a resumed runner's worker already holds them
            send(self.wfd, {"t": "before", "values": before_values(plan)})
        if isinstance(loaded, ModuleFailed):
            send(self.wfd, {"t": "module", **loaded.report})
            return None
        try:
            return namespace(loaded, plan)
        except BaseException as exc:  # noqa: BLE001 — the test's own setup, reported as the module's failure
            send(self.wfd, {"t": "module", **exc_report(exc)})
            return None

    def _tests(self, ns: dict, units: list, program: "ProgramProcess") -> None:
        """Every test from `start` on. When a test ends the program's process, a fresh one is not
        forked from here (this process now holds the tests): this runner ends and the worker
        starts one from the next test."""
        order, entry = self.job["order"], self.plan["entry"]
        for k in range(self.start, len(order)):
            i = order[k]
            self._arm(k)
            faults.check("memory", "the runner's memory")
            send(self.wfd, program.unit(i, lambda i=i: run_unit(ns, units[i], i, entry)))
            if program.pid is None and k + 1 < len(order):
                self.restarting = True
                send(self.wfd, {"t": "restart"})
                return
        PROGRESS.pack_into(self.progress, 0, len(order), time.process_time())

    # ---- one test process, watched by its runner
    def run_test(self, i: int, body) -> dict:
        start = time.monotonic()
        # Opened here, before the fork: a file the judge cannot open is its own fault, never the test's.
        faults.check("open", f"open out{i}")
        fds = (os.open(f"in{i}", os.O_RDONLY),
               os.open(f"out{i}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
               os.open(f"err{i}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
        reaped_before = _children_cpu()
        try:
            pid = faults.fork("test")
            if pid == 0:
                try:
                    for target, fd in enumerate(fds):
                        os.dup2(fd, target)
                    # The result pipe above all: only the runner reports a test, never the program.
                    os.closerange(3, 65536)
                    if self.progress is not None:
                        self.progress.close()
                    signal.signal(signal.SIGINT, signal.default_int_handler)
                    program_limits(self.limits)
                    limits.set_cpu_limit(self.limits["cpu_s"])
                    body()
                finally:
                    os._exit(70)
        finally:
            for fd in fds:
                os.close(fd)
        timed_out = wait_or_kill(pid, self.limits["wall_s"])
        _, status, usage = os.wait4(pid, 0)
        cpu = usage.ru_utime + usage.ru_stime
        if self.pidns:
            # Every process the test started is reaped here by now (this is their namespace's init),
            # so its CPU counts too: a program must not spread its work over children it never
            # reaps (their time is not in the test process's own) to pass under the CPU limit.
            limits.kill_all_in_namespace()
            cpu = max(cpu, _children_cpu() - reaped_before)
        done = {"t": "done", "i": i, "cpu": cpu, "wall": time.monotonic() - start,
                "rss_kb": usage.ru_maxrss, "wall_killed": timed_out,
                "stderr_tail": _tail(f"err{i}", self.limits["tail_bytes"])}
        if os.WIFSIGNALED(status):
            done["sig"] = os.WTERMSIG(status)
        else:
            done["code"] = os.WEXITSTATUS(status)
        return done


def _children_cpu() -> float:
    """CPU seconds of every process this one has reaped so far (and of what they reaped)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime
