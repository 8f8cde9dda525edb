"""A runner: the init of a fresh PID namespace that loads the program once and runs a job's tests,
reporting each over the result pipe.
"""

from __future__ import annotations

import atexit
import builtins
import marshal
import mmap
import os
import resource
import signal
import struct
import sys
import time

from engine.judge import plain
from engine.judge.local import limits
from engine.judge.local.process import XCPU_EXIT, exit_status, finish_like_python, flush_streams, wait_or_kill
from engine.judge.local.program import (
    BUILTIN_NAMES,
    BUILTINS,
    ModuleFailed,
    ProgramProcess,
    compiled,
    evaluate,
    exc_report,
)
from engine.judge.local.wire import send

HEAD = struct.Struct("<Q")  # length of a runner job's head, before the tests (`runner_job`)


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
    """Runs inside the sandbox (pid 1 of its namespace, unprivileged). Never returns."""

    def __init__(self, jobs: "JobBuffer", wfd: int, pidns: bool, *, start: int = 0, progress=None) -> None:
        # The tests (`plan`) are read from `jobs` only when needed: tests that run apart, after
        # the program's process is forked, so it never holds them (see `ProgramProcess`).
        self.jobs, self.job, self.plan = jobs, jobs.head(), None
        self.wfd, self.pidns = wfd, pidns
        self.start, self.progress = start, progress
        self.limits = self.job["limits"]
        self.restarting = False  # ends without an "end" frame: a fresh runner goes on

    def main(self) -> None:
        if self.run():
            # Now, not after unwinding: the worker reads the frames once this process is gone, and
            # freeing the program's objects first would only delay that.
            os._exit(0)

    def run(self) -> bool:
        """Every frame of the job; False when the program did not compile."""
        try:
            code = compile(self.job["program"], "<solution>", "exec", dont_inherit=True)
        except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError) as exc:
            send(self.wfd, {"t": "syntax", "msg": f"{type(exc).__name__}: {exc}"})
            return False
        if self.job["mode"] == "stdio":
            self.plan = self.jobs.plan()
            self.stdio(code)
        else:
            self.function(code)
        if not self.restarting:
            send(self.wfd, {"t": "end"})
        return True

    # ---- stdio: one fresh execution of the compiled program per test
    def stdio(self, code) -> None:
        send(self.wfd, {"t": "ready"})
        for i in self.job["order"]:
            with open(f"in{i}", "w", encoding="utf-8", newline="") as fh:
                fh.write(self.plan["inputs"][i])
            done = self.run_test(i, lambda i=i: self._stdio_child(code, i))
            done["out"], done["out_truncated"] = _read_capped(f"out{i}", self.limits["output_bytes"])
            send(self.wfd, done)
            for name in (f"in{i}", f"out{i}", f"err{i}"):
                os.unlink(name)

    def _stdio_child(self, code, i: int) -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
        fd = os.open(f"in{i}", os.O_RDONLY)
        os.dup2(fd, 0)
        os.close(fd)
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

    # ---- function: execute the program once, then run the tests in this same process
    def function(self, code) -> None:
        if self.job["apart"]:
            self._function_apart(code)
            return
        plan = self.plan = self.jobs.plan()
        if self.start == 0:  # a resumed runner's worker already holds them
            send(self.wfd, {"t": "before", "values": self._before_values(plan)})
        # A PID namespace's init ignores signals it has no handler for, SIGXCPU included.
        signal.signal(signal.SIGXCPU, lambda *_: os._exit(XCPU_EXIT))
        ns = {"__name__": "solution", "__builtins__": builtins}
        try:
            exec(code, ns)
            if plan["setup"]:
                exec(compiled(plan["setup"], "<test setup>", "exec"), ns)
        except BaseException as exc:  # noqa: BLE001 — reported as the module's failure
            send(self.wfd, {"t": "module", **exc_report(exc)})
            return
        ns = _tests_view(ns, plan)
        send(self.wfd, {"t": "ready"})
        self._tests(ns, plan["units"])

    def _before_values(self, plan: dict) -> dict:
        """Operands that name only builtins and the test's imports: evaluated before any untrusted code."""
        ns = {"__builtins__": builtins}
        values: dict[str, object] = {}
        try:
            exec(compiled(plan["imports"], "<test imports>", "exec"), ns)
        except BaseException as exc:  # noqa: BLE001
            return {"error": f"test imports failed: {type(exc).__name__}: {exc}"}
        for u, unit in enumerate(plan["units"]):
            for n, leaf in enumerate(unit.get("leaves", ())):
                if leaf.get("phase") == "before":
                    values[f"{u}.{n}"] = evaluate(leaf["src"], ns)
        return values

    def _tests(self, ns: dict, units: list) -> None:
        """Every test from `start` on, in this process (the PID namespace's init). Before each test
        the shared progress page records which test runs and the CPU used so far: if the process
        dies (CPU limit, crash, exit, the worker's wall guard), the worker fails that test and
        starts a fresh runner from the next one."""
        ns["__judge_plain__"] = lambda v: plain.decode(plain.encode(v))
        order = self.job["order"]
        for k in range(self.start, len(order)):
            i = order[k]
            used = self._arm(k)
            BUILTINS.restore()
            ns["__builtins__"] = builtins
            wall = time.monotonic()
            report = self._unit(ns, units[i], i)
            report.update(cpu=time.process_time() - used, wall=time.monotonic() - wall)
            if k == len(order) - 1:
                flush_streams()
            send(self.wfd, report)
        PROGRESS.pack_into(self.progress, 0, len(order), time.process_time())

    def _arm(self, k: int) -> float:
        """Before test position k: record it and the CPU used so far on the shared progress page,
        and give this process the test's CPU budget. Returns the CPU used so far."""
        used, hard = time.process_time(), resource.getrlimit(resource.RLIMIT_CPU)[1]
        PROGRESS.pack_into(self.progress, 0, k, used)
        resource.setrlimit(resource.RLIMIT_CPU, (min(int(used + self.limits["cpu_s"] + 1), hard), hard))
        return used

    def _function_apart(self, code) -> None:
        """Tests that run code of their own run here, and the program in a child that only answers
        their calls (`ProgramProcess`): a program sharing this process could write this process's
        reports itself, and a test that runs code decides in the sandbox whether it passed."""
        program = ProgramProcess(self, code)
        try:
            ns = self._namespace_apart(program)
            if ns is not None:
                send(self.wfd, {"t": "ready"})
                self._tests_apart(ns, self.plan["units"], program)
        finally:
            program.close()

    def _namespace_apart(self, program: "ProgramProcess") -> dict | None:
        """The tests' namespace: the program's names as stand-ins, then the tests' setup; None
        (and the module's failure reported) when either fails. The program's process is forked
        before this process reads the tests: it never holds them, nor what they compute."""
        try:
            loaded: dict | ModuleFailed = program.start()
        except ModuleFailed as failed:
            loaded = failed
        plan = self.plan = self.jobs.plan()
        if self.start == 0:  # a resumed runner's worker already holds them
            send(self.wfd, {"t": "before", "values": self._before_values(plan)})
        if isinstance(loaded, ModuleFailed):
            send(self.wfd, {"t": "module", **loaded.report})
            return None
        ns = {"__name__": "solution", "__builtins__": builtins, **_tests_view(loaded, plan)}
        try:
            if plan["setup"]:
                exec(compiled(plan["setup"], "<test setup>", "exec"), ns)
        except BaseException as exc:  # noqa: BLE001 — the test's own setup, reported as the module's failure
            send(self.wfd, {"t": "module", **exc_report(exc)})
            return None
        ns["__judge_plain__"] = lambda v: plain.decode(plain.encode(v))
        return ns

    def _tests_apart(self, ns: dict, units: list, program: "ProgramProcess") -> None:
        """When a test ends the program's process, a fresh one is not forked from here (this
        process now holds the tests): this runner ends and the worker starts one from the next test."""
        order = self.job["order"]
        for k in range(self.start, len(order)):
            i = order[k]
            self._arm(k)
            send(self.wfd, program.unit(i, lambda i=i: self._unit(ns, units[i], i)))
            if program.pid is None and k + 1 < len(order):
                self.restarting = True
                send(self.wfd, {"t": "restart"})
                return
        PROGRESS.pack_into(self.progress, 0, len(order), time.process_time())

    def _unit(self, ns: dict, unit: dict, i: int) -> dict:
        if unit["kind"] == "assert":
            values = {str(n): evaluate(leaf["src"], ns) for n, leaf in enumerate(unit["leaves"])
                      if leaf.get("phase") == "after"}
            return {"t": "result", "i": i, "values": values}
        try:
            exec(compiled(unit["src"], "<test>", "exec"), ns)
            if unit["kind"] == "check":
                ns["check"](ns[self.plan["entry"]])
            return {"t": "result", "i": i, "ok": True}
        except BaseException as exc:  # noqa: BLE001
            return {"t": "result", "i": i, **exc_report(exc)}

    # ---- one test process, watched by its runner
    def run_test(self, i: int, body) -> dict:
        start = time.monotonic()
        pid = os.fork()
        if pid == 0:
            try:
                fd_out = os.open(f"out{i}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                fd_err = os.open(f"err{i}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                os.dup2(fd_out, 1)
                os.dup2(fd_err, 2)
                # The result pipe above all: only the runner reports a test, never the program.
                os.closerange(3, 65536)
                if self.job["mode"] == "stdio":
                    limits.set_cpu_limit(self.limits["cpu_s"])
                body()
            finally:
                os._exit(70)
        timed_out = wait_or_kill(pid, self.limits["wall_s"])
        _, status, usage = os.wait4(pid, 0)
        if self.pidns:
            limits.kill_all_in_namespace()
        done = {"t": "done", "i": i, "cpu": usage.ru_utime + usage.ru_stime, "wall": time.monotonic() - start,
                "rss_kb": usage.ru_maxrss, "wall_killed": timed_out,
                "stderr_tail": _tail(f"err{i}", self.limits["tail_bytes"])}
        if os.WIFSIGNALED(status):
            done["sig"] = os.WTERMSIG(status)
        else:
            done["code"] = os.WEXITSTATUS(status)
        return done


def _tests_view(ns: dict, plan: dict) -> dict:
    """The program's names as its tests see them. A builtin's name means the builtin (a program that
    binds `set` or `sorted` must not decide both sides of an assert), unless the plan says the tests
    mean the program's (MBPP 126 asks for a function named `sum`). The candidate alias is the
    entry point."""
    meant = plan["meant"]
    view = {k: v for k, v in ns.items() if k not in BUILTIN_NAMES or k in meant or k.startswith("__")}
    if plan["candidate"] and plan["entry"] in view:
        view[plan["candidate"]] = view[plan["entry"]]
    return view


class JobBuffer:
    """The nursery's copy of the current sample's job, kept outside the Python heap.

    Every runner can read all of the nursery's memory it was forked from (/proc/self/mem), and
    bytes freed on a heap stay there until reused. An earlier sample's program, for RL often a
    correct solution of the very same problem, must not be there for a later sample to find: the
    job is read straight into an anonymous mapping that is emptied (MADV_DONTNEED reads back as
    zeros) before the next job is read into it.
    """

    def __init__(self) -> None:
        self.map, self.size = _private_map(mmap.PAGESIZE), 0

    def load(self, fd: int, size: int) -> bool:
        self._empty(size)
        got = 0
        with memoryview(self.map) as view:
            while got < size:
                n = os.readv(fd, [view[got:size]])
                if n == 0:
                    return False
                got += n
        return True

    def put(self, data: bytes) -> None:
        """Hold `data` as if read from a pipe (the worker's warm-up)."""
        self._empty(len(data))
        self.map[:len(data)] = data

    def _empty(self, size: int) -> None:
        self.forget()
        if size > len(self.map):
            self.map.close()
            self.map = _private_map(-(-size // mmap.PAGESIZE) * mmap.PAGESIZE)
        self.size = size

    def head(self) -> dict:
        """Everything but the tests (`runner_job`)."""
        with memoryview(self.map) as view:
            return marshal.loads(view[HEAD.size:HEAD.size + HEAD.unpack_from(view)[0]])

    def plan(self) -> dict:
        """The tests, as the worker compiled them."""
        with memoryview(self.map) as view:
            return marshal.loads(view[HEAD.size + HEAD.unpack_from(view)[0]:self.size])

    def forget(self) -> None:
        """Its pages read as zeros; a runner's child calls it before it runs the program."""
        self.map.madvise(mmap.MADV_DONTNEED)


def _private_map(size: int) -> mmap.mmap:
    """Copy-on-write, never shared (Python's default is MAP_SHARED): a runner that wrote into a
    shared job buffer would edit the jobs of the samples after it."""
    return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
