"""A runner: the init of a fresh PID namespace that runs a job's tests against the program, which
runs in processes of its own, and alone reports each test over the result pipe.
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
from engine.judge.local import faults, limits
from engine.judge.local.limits import program_limits
from engine.judge.local.process import exit_status, finish_like_python, wait_or_kill
from engine.judge.local.program import (
    ModuleFailed,
    ProgramProcess,
    ProgramSyntax,
    compiled,
    evaluate,
    exc_report,
    tests_view,
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
            _clear_leftovers()
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
        """Where every operand is one call of the program, the program's process evaluates each
        test's operands (`ProgramProcess.evaluate`); where the tests run code of their own
        (plan["apart"]), they run here and call into it (`ProgramProcess.call`). Either way only
        this process reports, and it never runs the program."""
        apart = self.job["apart"]
        program = ProgramProcess(self, source)
        try:
            ns = self._namespace(program, apart)
            if ns is not None:
                send(self.wfd, {"t": "ready"})
                self._tests(ns, self.plan["units"], program, apart)
        finally:
            program.close()

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

    def _arm(self, k: int) -> float:
        """Before test position k: record it and the CPU used so far on the shared progress page,
        and give this process the test's CPU budget. Returns the CPU used so far."""
        used, hard = time.process_time(), resource.getrlimit(resource.RLIMIT_CPU)[1]
        PROGRESS.pack_into(self.progress, 0, k, used)
        resource.setrlimit(resource.RLIMIT_CPU, (min(int(used + self.limits["cpu_s"] + 1), hard), hard))
        return used

    def _namespace(self, program: "ProgramProcess", apart: bool) -> dict | None:
        """The tests' namespace (apart: the program's names as stand-ins, then the tests' setup;
        else {}: the program's process holds it); None (and the module's failure reported) when
        either fails. The program's process is forked before this process reads the tests: it
        never holds them, nor what they compute."""
        try:
            loaded: dict | ModuleFailed = program.start(exports=apart)
        except ModuleFailed as failed:
            loaded = failed
        except ProgramSyntax as exc:
            send(self.wfd, {"t": "syntax", "msg": str(exc)})
            return None
        plan = self.plan = self.jobs.plan()
        if self.start == 0:  # a resumed runner's worker already holds them
            send(self.wfd, {"t": "before", "values": self._before_values(plan)})
        if isinstance(loaded, ModuleFailed):
            send(self.wfd, {"t": "module", **loaded.report})
            return None
        if not apart:
            try:
                program.prepare(plan)
            except ModuleFailed as failed:
                send(self.wfd, {"t": "module", **failed.report})
                return None
            return {}
        ns = {"__name__": "solution", "__builtins__": builtins, **tests_view(loaded, plan)}
        try:
            if plan["setup"]:
                exec(compiled(plan["setup"], "<test setup>", "exec"), ns)
        except BaseException as exc:  # noqa: BLE001 — the test's own setup, reported as the module's failure
            send(self.wfd, {"t": "module", **exc_report(exc)})
            return None
        ns["__judge_plain__"] = lambda v: plain.decode(plain.encode(v))
        return ns

    def _tests(self, ns: dict, units: list, program: "ProgramProcess", apart: bool) -> None:
        """Every test from `start` on. When a test ends the program's process, a fresh one is not
        forked from here (this process now holds the tests): this runner ends and the worker
        starts one from the next test."""
        order = self.job["order"]
        for k in range(self.start, len(order)):
            i = order[k]
            self._arm(k)
            faults.check("memory", "the runner's memory")
            if apart:
                report = program.unit(i, lambda i=i: self._unit(ns, units[i], i))
            else:
                report = program.unit(i, lambda i=i: program.evaluate(i, _after_leaves(units[i])))
            send(self.wfd, report)
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


def _after_leaves(unit: dict) -> dict:
    """A test's operands that only the program's process can evaluate, by leaf number."""
    return {str(n): leaf["src"] for n, leaf in enumerate(unit["leaves"]) if leaf.get("phase") == "after"}


_OWN_FILES = frozenset({".stdout", ".stderr"})  # the worker's, in the work directory of every job


def _clear_leftovers() -> None:
    """Before a stdio test: what an earlier test of the sample left in the work directory goes.
    Each test is a fresh execution, and a program must not fill the directory so that the
    runner cannot write the next test's input (which would be the judge's fault)."""
    empty_directory(".", keep=_OWN_FILES)


def empty_directory(path: str, keep: frozenset[str] = frozenset()) -> None:
    """Remove everything under `path` but the names in `keep` at its top, never following a
    symlink, with one directory open at a time and no recursion: a program may nest directories
    thousands deep (`shutil.rmtree` recursed past Python's limit, a judge fault on every later
    sample of the worker) and past any path length. What cannot be removed is left."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except OSError:
        return
    names: list[str] = []  # the way down from `path`
    skipped = [set(keep)]  # per level: what stays
    try:
        while True:
            down = None
            with os.scandir(fd) as entries:
                for entry in entries:
                    if entry.name in skipped[-1]:
                        continue
                    if entry.is_dir(follow_symlinks=False):
                        down = down or entry.name
                        continue
                    try:
                        os.unlink(entry.name, dir_fd=fd)
                    except OSError:
                        skipped[-1].add(entry.name)
            if down is not None:
                try:
                    os.chmod(down, 0o700, dir_fd=fd)  # a directory its program made unreadable
                    child = os.open(down, flags, dir_fd=fd)
                except OSError:
                    skipped[-1].add(down)
                    continue
                os.close(fd)
                fd = child
                names.append(down)
                skipped.append(set())
                continue
            if not names:
                return
            parent = os.open("..", flags, dir_fd=fd)
            os.close(fd)
            fd = parent
            skipped.pop()
            name = names.pop()
            try:
                os.rmdir(name, dir_fd=fd)
            except OSError:
                skipped[-1].add(name)
    finally:
        os.close(fd)


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
