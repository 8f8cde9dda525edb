"""The pre-warmed sandbox worker (zygote): `python -I -S -c "...worker import main; main()" UID`.

A small interpreter started once per core by `engine.judge.local.pool`; it sets up
its namespaces once (`engine.judge.local.sandbox`), pre-imports common modules,
forks its *nursery*, then reads jobs (length-prefixed JSON on fd 0) and
answers one result per job.

Runners are forked by the nursery, a child of the worker made before any job:
it never holds a job's expected side, so neither does any runner, even one
started after the worker received it. The job reaches a runner as marshal,
with the tests' own sources already compiled by the worker. A runner is the
init of a fresh PID namespace with an unprivileged uid and rlimits; it
compiles the program once (SYNTAX_ERROR). Function tests: it executes the program and then evaluates
each test's operands itself, one test after another, recording in a shared
page which test runs; if it dies mid-suite (CPU limit, crash, exit, the
worker's wall guard) that test fails and a fresh runner continues from the
next one. Stdio tests: it forks one fresh execution of the compiled program
per test, with the test's input file as stdin and a size-capped file as
stdout, and guards each. Each test reports over a pipe that outlives the
runner; the worker — which never runs untrusted code — reads the reports when
the runner has ended (or at each one when the first failure ends the sample),
applies the wall-clock guard, decodes values into its own plain objects and
compares them. A pass needs a
report for every test: an early exit, a killed parent or a closed pipe leave
tests unreported, which fail.
"""

from __future__ import annotations

import atexit
import builtins
import ctypes
import fcntl
import gc
import json
import marshal
import mmap
import os
import resource
import select
import signal
import socket
import struct
import sys
import time
import types
from typing import NamedTuple

from engine.judge import plain
from engine.judge.local import sandbox, warmup
from engine.judge.outcome import SLACK_S, Collector

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

# Modules solutions commonly import: loaded once here, shared by every fork. Every resident MB
# costs each fork and exit ≈ 0.05 ms, so rarely imported heavy modules stay out: hashlib (OpenSSL,
# +3.7 MB RSS), statistics/fractions/decimal/random/datetime (+1 MB) took 0.4 ms from every
# fork-and-exit, while they are imported by < 4% of the HumanEval/MBPP/CodeContests programs
# and tests (1.2-5 ms each when they are); dataclasses (+1.3 MB: it imports inspect) by none.
# `threading` stays out too: its after-fork hook runs Python code in every runner (+0.4 ms per
# fork); only the few programs that import it pay.
PREIMPORT = (
    "array bisect builtins collections copy enum functools heapq "
    "io itertools json math operator re string typing"
).split()

_HEADER = struct.Struct(">I")
_HEAD = struct.Struct("<Q")  # length of a runner job's head, before the tests (`_runner_job`)
XCPU_EXIT = 128 + signal.SIGXCPU  # how a function-mode runner reports its CPU limit
_PROGRESS = struct.Struct("<qd")  # (position in the test order, runner CPU seconds at its start)
MAX_FRAME = 64 * 1024 * 1024
_BUILTIN_NAMES = frozenset(dir(builtins))  # taken before any untrusted code runs
LAZY_POLL_S = 0.05
_EMPTY_PAGE = bytes(mmap.PAGESIZE)
_F_SETPIPE_SZ = 1031  # fcntl: a 1 MiB result pipe holds a whole suite's frames without the runner waiting


class _Builtins:
    """The builtins each function test starts from, put back before a test only if changed.

    Putting them back writes the reference counts of ≈ 160 objects spread over ≈ 60 pages, each a
    copy-on-write fault in a fresh runner. Whether anything wrote to the builtins dict since they
    were last put back, its version tag tells (CPython bumps a dict's ma_version_tag on every
    write) without touching any of them. Taken, with a view of that tag, before the nursery is
    forked; where the tag cannot be read that way, they are put back before every test.
    """

    def __init__(self) -> None:
        self.pristine: dict = {}
        self._tag = None
        self._clean = 0

    def snapshot(self) -> None:
        self.pristine.update(vars(builtins))
        self._tag = _version_tag(builtins.__dict__)
        self._clean = self._tag.value if self._tag is not None else 0

    def restore(self, *, force: bool = False) -> None:
        if not force and self._tag is not None and self._tag.value == self._clean:
            return
        builtins.__dict__.clear()
        builtins.__dict__.update(self.pristine)
        if self._tag is not None:
            self._clean = self._tag.value


def _version_tag(d: dict):
    """A live view of d's version tag (CPython 3.11-3.13 layout), or None where a test write to
    another dict does not change what that view reads."""
    if sys.version_info >= (3, 14):  # ma_version_tag is gone: no longer bumped by every write
        return None
    offset = 3 * struct.calcsize("n")  # after the reference count, the type and ma_used
    probe: dict = {}
    view = ctypes.c_uint64.from_address(id(probe) + offset)
    before = view.value
    probe["written"] = True
    return ctypes.c_uint64.from_address(id(d) + offset) if view.value != before else None


_BUILTINS = _Builtins()


def send(fd: int, message: dict) -> None:
    send_raw(fd, json.dumps(message).encode())


def send_raw(fd: int, data: bytes) -> None:
    write_all(fd, frame(data))


def frame(data: bytes) -> bytes:
    return _HEADER.pack(len(data)) + data


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def read_exact(fd: int, n: int) -> bytes | None:
    chunks, left = [], n
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def receive(fd: int) -> dict | None:
    body = receive_raw(fd)
    return None if body is None else json.loads(body)


def receive_raw(fd: int) -> bytes | None:
    head = read_exact(fd, _HEADER.size)
    if head is None:
        return None
    return read_exact(fd, _HEADER.unpack(head)[0])


# ---------------------------------------------------------------- runner side (inside the sandbox)


class _Frames:
    """The worker side of one runner's result pipe.

    Eager (sparse reward: the first failure ends the sample) wakes on every frame. Lazy (every
    test runs anyway) sleeps until the nursery reports the runner's exit, then reads every frame
    at once: a runner's frames wait in the pipe, which outlives it, so nothing is lost when it
    dies, and the worker is woken once per runner instead of once per test (each wake-up costs
    tens of microseconds on a virtual machine). While asleep it still drains the pipe every
    LAZY_POLL_S, so a runner that fills the pipe waits at most that long and the wall guard
    (no frame for guard_s) keeps its meaning.
    """

    def __init__(self, fd: int, control: int, nursery: "Nursery", *, eager: bool) -> None:
        self.fd, self.buf, self.eof, self.bad = fd, bytearray(), False, False
        self.control, self.orphaned = control, False
        self.nursery, self.eager, self.ended = nursery, eager, None
        os.set_blocking(fd, False)

    def pump(self, timeout: float) -> list[dict]:
        watched = [self.control, self.nursery.sock.fileno()] + ([self.fd] if self.eager else [])
        wait = max(0.0, timeout if self.eager else min(timeout, LAZY_POLL_S))
        ready, _, _ = select.select(watched, [], [], wait)
        if self.control in ready:
            # The judge never writes while a job runs: readable means it closed the pipe (it exited
            # or was killed). Stop now instead of finishing a job nobody will read.
            self.orphaned = self.eof = True
            return []
        if self.nursery.sock.fileno() in ready:
            self.ended = self.nursery.reaped()  # the runner and its namespace are gone
        self._drain()
        if self.ended is not None:
            self.eof = True
        return self._parse()

    def _drain(self) -> None:
        while True:
            try:
                chunk = os.read(self.fd, 1 << 20)
            except BlockingIOError:
                return
            if not chunk:
                self.eof = True
                return
            self.buf += chunk

    def _parse(self) -> list[dict]:
        bodies, at, buf = [], 0, self.buf
        while len(buf) - at >= 4:
            size = _HEADER.unpack_from(buf, at)[0]
            if size > MAX_FRAME:
                self.bad = self.eof = True
                break
            if len(buf) - at - 4 < size:
                break
            bodies.append(bytes(buf[at + 4:at + 4 + size]))
            at += 4 + size
        del buf[:at]
        return self._decode(bodies)

    def _decode(self, bodies: list[bytes]) -> list[dict]:
        """All the frames at hand in one JSON parse; frame by frame only to find where a garbled
        one starts (frames a program forged are no worse joined: it could write any frame)."""
        if not bodies:
            return []
        try:
            frames = json.loads(b"[" + b",".join(bodies) + b"]")
        except ValueError:
            frames = None
        if frames is not None and len(frames) == len(bodies) and all(isinstance(f, dict) for f in frames):
            return frames
        out = []
        for body in bodies:
            try:
                frame = json.loads(body)
            except ValueError:
                frame = None
            if not isinstance(frame, dict):
                self.bad = self.eof = True
                break
            out.append(frame)
        return out


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

    def __init__(self, jobs: "_JobBuffer", wfd: int, pidns: bool, *, start: int = 0, progress=None) -> None:
        # The tests (`plan`) are read from `jobs` only when needed: tests that run apart, after
        # the program's process is forked, so it never holds them (see `_ProgramProcess`).
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
            status = _exit_status(exc)
        except BaseException:  # noqa: BLE001 — the program's own failure, reported via stderr
            import traceback

            traceback.print_exc()
            status = 1
        status = _finish_like_python(status, (out, sys.__stderr__))
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
                exec(_compiled(plan["setup"], "<test setup>", "exec"), ns)
        except BaseException as exc:  # noqa: BLE001 — reported as the module's failure
            send(self.wfd, {"t": "module", **_exc_report(exc)})
            return
        ns = _tests_view(ns, plan)
        send(self.wfd, {"t": "ready"})
        self._tests(ns, plan["units"])

    def _before_values(self, plan: dict) -> dict:
        """Operands that name only builtins and the test's imports: evaluated before any untrusted code."""
        ns = {"__builtins__": builtins}
        values: dict[str, object] = {}
        try:
            exec(_compiled(plan["imports"], "<test imports>", "exec"), ns)
        except BaseException as exc:  # noqa: BLE001
            return {"error": f"test imports failed: {type(exc).__name__}: {exc}"}
        for u, unit in enumerate(plan["units"]):
            for n, leaf in enumerate(unit.get("leaves", ())):
                if leaf.get("phase") == "before":
                    values[f"{u}.{n}"] = _evaluate(leaf["src"], ns)
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
            _BUILTINS.restore()
            ns["__builtins__"] = builtins
            wall = time.monotonic()
            report = self._unit(ns, units[i], i)
            report.update(cpu=time.process_time() - used, wall=time.monotonic() - wall)
            if k == len(order) - 1:
                _flush_streams()
            send(self.wfd, report)
        _PROGRESS.pack_into(self.progress, 0, len(order), time.process_time())

    def _arm(self, k: int) -> float:
        """Before test position k: record it and the CPU used so far on the shared progress page,
        and give this process the test's CPU budget. Returns the CPU used so far."""
        used, hard = time.process_time(), resource.getrlimit(resource.RLIMIT_CPU)[1]
        _PROGRESS.pack_into(self.progress, 0, k, used)
        resource.setrlimit(resource.RLIMIT_CPU, (min(int(used + self.limits["cpu_s"] + 1), hard), hard))
        return used

    def _function_apart(self, code) -> None:
        """Tests that run code of their own run here, and the program in a child that only answers
        their calls (`_ProgramProcess`): a program sharing this process could write this process's
        reports itself, and a test that runs code decides in the sandbox whether it passed."""
        program = _ProgramProcess(self, code)
        try:
            ns = self._namespace_apart(program)
            if ns is not None:
                send(self.wfd, {"t": "ready"})
                self._tests_apart(ns, self.plan["units"], program)
        finally:
            program.close()

    def _namespace_apart(self, program: "_ProgramProcess") -> dict | None:
        """The tests' namespace: the program's names as stand-ins, then the tests' setup; None
        (and the module's failure reported) when either fails. The program's process is forked
        before this process reads the tests: it never holds them, nor what they compute."""
        try:
            loaded: dict | _ModuleFailed = program.start()
        except _ModuleFailed as failed:
            loaded = failed
        plan = self.plan = self.jobs.plan()
        if self.start == 0:  # a resumed runner's worker already holds them
            send(self.wfd, {"t": "before", "values": self._before_values(plan)})
        if isinstance(loaded, _ModuleFailed):
            send(self.wfd, {"t": "module", **loaded.report})
            return None
        ns = {"__name__": "solution", "__builtins__": builtins, **_tests_view(loaded, plan)}
        try:
            if plan["setup"]:
                exec(_compiled(plan["setup"], "<test setup>", "exec"), ns)
        except BaseException as exc:  # noqa: BLE001 — the test's own setup, reported as the module's failure
            send(self.wfd, {"t": "module", **_exc_report(exc)})
            return None
        ns["__judge_plain__"] = lambda v: plain.decode(plain.encode(v))
        return ns

    def _tests_apart(self, ns: dict, units: list, program: "_ProgramProcess") -> None:
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
        _PROGRESS.pack_into(self.progress, 0, len(order), time.process_time())

    def _unit(self, ns: dict, unit: dict, i: int) -> dict:
        if unit["kind"] == "assert":
            values = {str(n): _evaluate(leaf["src"], ns) for n, leaf in enumerate(unit["leaves"])
                      if leaf.get("phase") == "after"}
            return {"t": "result", "i": i, "values": values}
        try:
            exec(_compiled(unit["src"], "<test>", "exec"), ns)
            if unit["kind"] == "check":
                ns["check"](ns[self.plan["entry"]])
            return {"t": "result", "i": i, "ok": True}
        except BaseException as exc:  # noqa: BLE001
            return {"t": "result", "i": i, **_exc_report(exc)}

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
                    sandbox.set_cpu_limit(self.limits["cpu_s"])
                body()
            finally:
                os._exit(70)
        timed_out = _wait_or_kill(pid, self.limits["wall_s"])
        _, status, usage = os.wait4(pid, 0)
        if self.pidns:
            sandbox.kill_all_in_namespace()
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
    view = {k: v for k, v in ns.items() if k not in _BUILTIN_NAMES or k in meant or k.startswith("__")}
    if plan["candidate"] and plan["entry"] in view:
        view[plan["candidate"]] = view[plan["entry"]]
    return view


class _ModuleFailed(Exception):
    def __init__(self, report: dict) -> None:
        super().__init__(report.get("msg", ""))
        self.report = report


class _ProgramProcess:
    """The program in a process of its own, called by the tests that run in the runner.

    The program's module runs only in this child; the runner (which alone holds the result
    pipe) runs the tests' code with, in place of the program's functions, stand-ins that send
    the arguments here and return what came back. Values cross as strict plain data both ways,
    as assert operands do, so the runner's comparisons see only objects it decoded itself. What
    the child can do to the runner is end or stall it a test's answer: it cannot write a report.
    A test's CPU and wall limits are the child's; past them, or when it dies, the test fails and
    the next test gets a fresh runner, and with it a fresh child (the program loaded again).

    The child is forked before the runner reads the tests and it empties its copy of the job
    buffer first thing: a program that walked its process's memory for the tests' code could
    otherwise run them against a probe and answer every call with the expected value.
    """

    def __init__(self, runner: Runner, code) -> None:
        self.runner, self.code, self.pid = runner, code, None
        self.cpu = 0.0  # the child's CPU seconds at its last answer
        self.deadline = float("inf")
        self.gone: dict | None = None  # how the child ended mid-test, as a "done" frame's fields

    def start(self) -> dict:
        """Fork the child and load the program there: the stand-ins for its names."""
        ask_r, self.ask = os.pipe()
        self.answers, answer_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                self.runner.jobs.forget()
                for fd in (self.ask, self.answers, self.runner.wfd):
                    os.close(fd)
                _serve_program(self.code, ask_r, answer_w, self.runner.limits)
            finally:
                os._exit(70)
        self.pid, self.gone = pid, None
        self.deadline = time.monotonic() + self.runner.limits["wall_s"]
        os.close(ask_r)
        os.close(answer_w)
        loaded = self._answer()
        try:
            return {name: _stand_in(self, name, kind) for name, kind in loaded["names"].items()
                    if not name.startswith("__") and (kind[0] != "m" or kind[1] in sys.modules)}
        except Exception:  # noqa: BLE001 — it failed to load, ended, or answered out of turn
            raise _ModuleFailed(self._load_failure(loaded)) from None

    def _load_failure(self, loaded: dict | None) -> dict:
        report = loaded.get("module") if isinstance(loaded, dict) else None
        if self.pid is not None and loaded is None:
            ended = self._ended_report()
            limited = ended["wall_killed"] or ended.get("sig") == signal.SIGXCPU
            report = {"error": "timeout" if limited else "runtime",
                      "msg": "time limit while loading the program" if limited
                      else f"the program's process ended while loading (exit {ended.get('code', ended.get('sig'))})"}
        self.close()
        if isinstance(report, dict) and isinstance(report.get("error"), str):
            return {"error": report["error"], "msg": str(report.get("msg", ""))[:500]}
        return {"error": "runtime", "msg": "the program's process answered out of turn while loading"}

    def unit(self, i: int, body) -> dict:
        """Run one test's body against the child; a "result" frame, or a "done" frame when the
        child ended or overran (then `pid` is None)."""
        start = time.monotonic()
        self.deadline = start + self.runner.limits["wall_s"]
        try:
            began = self.call(None, (), {})  # the child arms its CPU limit for this test
        except _ProgramGone:
            began = self.cpu
        report = body() if self.gone is None else {}
        if self.gone is not None:
            report = {"t": "done", "i": i, **self.gone, "cpu": max(0.0, self.gone["cpu"] - began)}
        else:
            report["cpu"] = max(0.0, self.cpu - began)
        report["wall"] = time.monotonic() - start
        return report

    def call(self, name: str | None, args: tuple, kwargs: dict):
        """One call of the program's `name` (None: a new test begins; returns the child's CPU)."""
        if self.gone is not None:
            raise _ProgramGone("the program's process ended")
        try:
            request = {"c": name, "a": [plain.encode(a) for a in args],
                       "k": {k: plain.encode(v) for k, v in kwargs.items()}}
        except plain.NotPlain as exc:  # the test passes something only a shared process could
            raise _ProgramRaised({"error": "judge", "msg": f"cannot pass this argument to the program: {exc}"}) from None
        try:
            send(self.ask, request)
        except OSError:
            pass  # it died: its end is read below
        answer = self._answer()
        cpu = answer.get("cpu") if answer is not None else None
        if type(cpu) not in (int, float):  # ended, overran, or answered out of turn
            if answer is not None:
                os.kill(self.pid, signal.SIGKILL)
            self.gone = self._ended_report()
            raise _ProgramGone("the program's process ended")
        self.cpu = float(cpu)
        if name is None:
            return self.cpu
        if "x" in answer:
            raise _ProgramRaised(answer["x"])
        return plain.decode(answer["v"])

    def close(self) -> None:
        if self.pid is None:
            return
        os.close(self.ask)  # the child reads end-of-file and exits
        os.close(self.answers)
        if not _exited_within(self.pid, 1.0):
            os.kill(self.pid, signal.SIGKILL)
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass
        self._swept()

    def _swept(self) -> None:
        """The child is reaped: whatever the program started ends with it."""
        self.pid = None
        if self.runner.pidns:
            sandbox.kill_all_in_namespace()

    def _answer(self) -> dict | None:
        """The child's next answer; None when it ended or overran the test's wall limit, {} when
        what it wrote is not an answer."""
        buf = bytearray()
        while True:
            need = _HEADER.size if len(buf) < _HEADER.size else _HEADER.size + _HEADER.unpack_from(buf)[0]
            if len(buf) >= need > _HEADER.size:
                return _parse_answer(bytes(buf[_HEADER.size:need]))
            if need - _HEADER.size > MAX_FRAME:
                return {}
            ready, _, _ = select.select([self.answers], [], [], max(0.0, self.deadline - time.monotonic()))
            chunk = os.read(self.answers, min(need - len(buf), 1 << 20)) if ready else b""
            if not chunk:
                return None
            buf += chunk

    def _ended_report(self) -> dict:
        """Why the child is gone (ended, or killed here past the wall limit), from its exit status."""
        killed = not _exited_within(self.pid, max(0.0, self.deadline - time.monotonic()) + 0.05)
        if killed:
            os.kill(self.pid, signal.SIGKILL)
        _, status, usage = os.wait4(self.pid, 0)
        os.close(self.ask)
        os.close(self.answers)
        self._swept()
        done = {"cpu": usage.ru_utime + usage.ru_stime, "rss_kb": usage.ru_maxrss, "wall_killed": killed}
        if killed:
            done["sig"] = signal.SIGKILL
        elif _cpu_limited(status):
            done["sig"] = signal.SIGXCPU
        elif os.WIFSIGNALED(status):
            done["sig"] = os.WTERMSIG(status)
        else:
            done["code"] = os.WEXITSTATUS(status)
        return done


def _stand_in(program: "_ProgramProcess", name: str, kind):
    """What the tests get for one of the program's names: a function calls into its process, a
    value is decoded, a module is this process's own copy (only one already loaded here: a name
    the program sends must not make this process import, say, a file the program wrote)."""
    if kind == "f":
        return _Stand(program, name)
    if kind[0] == "m":
        return sys.modules[kind[1]]
    return plain.decode(kind[1])


class _Stand:
    """A program's name as the tests see it in the runner: calling it calls it in the child."""

    def __init__(self, program: _ProgramProcess, name: str) -> None:
        self.program, self.name = program, name

    def __call__(self, *args, **kwargs):
        return self.program.call(self.name, args, kwargs)


class _ProgramGone(Exception):
    pass


class _ProgramRaised(Exception):
    """The program's own exception, as its child reported it."""

    def __init__(self, report: dict) -> None:
        super().__init__(str(report.get("msg", ""))[:500])
        self.report = report


def _parse_answer(body: bytes) -> dict:
    try:
        answer = json.loads(body)
    except ValueError:
        return {}
    return answer if isinstance(answer, dict) else {}


def _exited_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not _exited(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.001)
    return True


def _serve_program(code, ask: int, answers: int, limits: dict) -> None:
    """The child's side: load the program, then answer calls until the runner closes the pipe."""
    signal.signal(signal.SIGXCPU, lambda *_: os._exit(XCPU_EXIT))
    ns = {"__name__": "solution", "__builtins__": builtins}
    try:
        exec(code, ns)
    except BaseException as exc:  # noqa: BLE001 — reported as the module's failure
        send(answers, {"module": _exc_report(exc)})
        return
    _BUILTINS.restore()  # the program may have patched what this side's own code uses
    send(answers, {"names": _exported(ns), "cpu": time.process_time()})
    hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
    while (request := receive(ask)) is not None:
        if request["c"] is None:
            used = time.process_time()
            resource.setrlimit(resource.RLIMIT_CPU, (min(int(used + limits["cpu_s"] + 1), hard), hard))
            ns["__builtins__"] = builtins
            send(answers, {"cpu": used})
            continue
        answer = _called(ns, request)
        _BUILTINS.restore()
        send(answers, {**answer, "cpu": time.process_time()})
    _flush_streams()


def _called(ns: dict, request: dict) -> dict:
    try:
        function = ns[request["c"]]
        value = function(*[plain.decode(a) for a in request["a"]],
                         **{k: plain.decode(v) for k, v in request["k"].items()})
        return {"v": plain.encode(value)}
    except BaseException as exc:  # noqa: BLE001 — the program's failure, reported to its test
        return {"x": _exc_report(exc)}


def _exported(ns: dict) -> dict:
    """The program's names the tests may use: functions (called in the child), modules it imported
    and plain values."""
    names: dict = {}
    for name, value in list(ns.items()):
        if name.startswith("__"):
            continue
        if type(value) is types.ModuleType:
            names[name] = ["m", str(value.__name__)]
        elif callable(value):
            names[name] = "f"
        else:
            try:
                names[name] = ["v", plain.encode(value)]
            except plain.NotPlain:
                pass
    return names


def _flush_streams() -> None:
    for stream in {id(s): s for s in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__)}.values():
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001 — a closed or replaced stream; its output is the program's
            pass


def _exit_status(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    print(exc.code, file=sys.stderr)
    return 1


def _finish_like_python(status: int, originals: tuple = ()) -> int:
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


def _compiled(source, filename: str, mode: str):
    """The worker compiles the tests' own sources once per plan; what it could not compile (a broken
    test) is compiled here, so the error is reported as that test's, from inside the sandbox."""
    return source if isinstance(source, types.CodeType) else compile(source, filename, mode, dont_inherit=True)


def _evaluate(src, ns: dict) -> dict:
    try:
        value = eval(_compiled(src, "<assert operand>", "eval"), ns)
        return {"v": plain.encode(value)}
    except plain.NotPlain as exc:
        return {"notplain": str(exc)}
    except BaseException as exc:  # noqa: BLE001
        return _exc_report(exc)


def _exc_report(exc: BaseException) -> dict:
    if isinstance(exc, _ProgramRaised):
        return dict(exc.report)
    if isinstance(exc, MemoryError):
        kind = "memory"
    elif isinstance(exc, AssertionError):
        kind = "assert"
    elif isinstance(exc, plain.NotPlain):
        kind = "notplain"
    else:
        kind = "output" if getattr(exc, "errno", None) == 27 else "runtime"
    try:
        text = f"{type(exc).__name__}: {exc}"
    except BaseException:  # noqa: BLE001 — a hostile __str__
        text = type(exc).__name__
    return {"error": kind, "msg": text[:500]}


def _wait_or_kill(pid: int, wall_s: float) -> bool:
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
            if _exited(pid):
                return False
            time.sleep(0.002)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return True


# ---------------------------------------------------------------- worker side (trusted)


class Nursery:
    """Forks every runner, from a process that never holds a sample's expected answers.

    Forked from the worker at start-up, before any job, so its memory is the small pre-warmed
    interpreter and nothing else; a runner that died mid-suite is restarted from here, not from
    the worker (which by then holds the secret side of the job). It ends a runner when the
    worker asks (wall guard, early decision) and reports each runner's exit status and resource
    usage; the worker never learns a runner's pid, so it cannot signal a process that pid was
    recycled to, and is woken once per runner.
    """

    def __init__(self, iso: sandbox.Isolation, workdir: str, close_in_child: tuple[int, ...]) -> None:
        # Shared with every runner (inherited, not passed): which test runs and the CPU used before it.
        self.progress = mmap.mmap(-1, mmap.PAGESIZE)
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        job_r, self.job_w = os.pipe()
        # The nursery is the init of a PID namespace in which every runner's own one nests: when it
        # dies, however it dies, the kernel kills them all, so runners need no parent-death signal.
        sandbox.new_pid_namespace(iso)
        self.pid = os.fork()
        if self.pid == 0:
            try:
                self.sock.close()
                os.close(self.job_w)
                for fd in close_in_child:
                    os.close(fd)
                sandbox.die_with_parent()
                sandbox.set_name(b"judge-nursery")
                sandbox.adopt_pid_namespace(iso)
                sandbox.lock_down_descendants()
                _scrub_environment(workdir)
                _nursery_loop(theirs, job_r, workdir, iso, self.progress)
            finally:
                os._exit(0)
        sandbox.enter_own_pid_namespace(iso)
        theirs.close()
        os.close(job_r)

    def spawn(self, start: int, fds: list[int], raw_job: bytes | None) -> None:
        """Start a runner at test position `start`; `raw_job` is sent with a sample's first runner
        (a resumed runner reuses the one the nursery holds)."""
        try:
            socket.send_fds(self.sock, [_SPAWN.pack(start, len(raw_job or b""))], fds)
            if raw_job:
                write_all(self.job_w, raw_job)
        except OSError as exc:
            raise NurseryDied(f"the sandbox nursery {self.pid} is gone ({exc})") from exc

    def kill(self) -> None:
        """End the current runner; a request that arrives after it ended is ignored."""
        try:
            self.sock.send(_KILL)
        except OSError as exc:
            raise NurseryDied(f"the sandbox nursery {self.pid} is gone ({exc})") from exc

    def reaped(self) -> dict:
        status, rss_kb, cpu = _REAPED.unpack(self._answer(_REAPED.size))
        return {"status": status, "rss_kb": rss_kb, "cpu": cpu}

    def _answer(self, size: int) -> bytes:
        data = self.sock.recv(size)
        if len(data) != size:
            raise NurseryDied(f"the sandbox nursery {self.pid} died")
        return data


_SPAWN = struct.Struct("<iQ")  # test position to start from, length of the job that follows (0: same job)
_KILL = b"k"
_REAPED = struct.Struct("<iqd")  # wait status, peak RSS kB, CPU seconds


class NurseryDied(RuntimeError):
    """The worker cannot start runners any more: it exits, and the judge replaces it."""


def _scrub_environment(workdir: str) -> None:
    """Every runner's environment, set once here (the work directory's path never changes)."""
    os.environ.clear()
    os.environ.update(PATH="/usr/local/bin:/usr/bin:/bin", HOME=workdir, TMPDIR=workdir,
                      LANG="C.UTF-8", PYTHONIOENCODING="utf-8")


def _nursery_loop(sock: socket.socket, job_r: int, workdir: str, iso: sandbox.Isolation,
                  progress: mmap.mmap) -> None:
    # Nothing the nursery holds is ever garbage: keep every runner's collector off those pages.
    gc.freeze()
    # The job stays raw bytes here and is parsed in the runner: every page the nursery writes is
    # a copy-on-write fault while a runner shares it (parsing here cost ≈ 100 faults per sample).
    job = _JobBuffer()
    reset_dumpable = sandbox.runner_needs_dumpable_reset()
    while True:
        data, fds, _, _ = socket.recv_fds(sock, _SPAWN.size, 8)
        if data == _KILL:
            continue  # for a runner that had already ended
        if len(data) != _SPAWN.size:
            return
        start, size = _SPAWN.unpack(data)
        if size and not job.load(job_r, size):
            return
        sandbox.new_pid_namespace(iso)
        pid = os.fork()
        if pid == 0:
            _become_runner(job, workdir, fds, start, iso, progress, reset_dumpable)
        for fd in fds:
            os.close(fd)
        _until_exit(sock, pid)
        _, status, usage = os.wait4(pid, 0)
        sock.send(_REAPED.pack(status, usage.ru_maxrss, usage.ru_utime + usage.ru_stime))


class _JobBuffer:
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
        """Everything but the tests (`_runner_job`)."""
        with memoryview(self.map) as view:
            return marshal.loads(view[_HEAD.size:_HEAD.size + _HEAD.unpack_from(view)[0]])

    def plan(self) -> dict:
        """The tests, as the worker compiled them."""
        with memoryview(self.map) as view:
            return marshal.loads(view[_HEAD.size + _HEAD.unpack_from(view)[0]:self.size])

    def forget(self) -> None:
        """Its pages read as zeros; a runner's child calls it before it runs the program."""
        self.map.madvise(mmap.MADV_DONTNEED)


def _private_map(size: int) -> mmap.mmap:
    """Copy-on-write, never shared (Python's default is MAP_SHARED): a runner that wrote into a
    shared job buffer would edit the jobs of the samples after it."""
    return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)


def _until_exit(sock: socket.socket, pid: int) -> None:
    """Wait for the runner to end, killing it (and its process group) when the worker asks or goes
    away. The runner is not reaped yet, so its pid cannot have been recycled."""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:  # before Linux 5.3: poll
        pidfd = None
    watched = [sock.fileno()] + ([pidfd] if pidfd is not None else [])
    try:
        while True:
            ready, _, _ = select.select(watched, [], [], None if pidfd is not None else 0.002)
            if pidfd in ready or (pidfd is None and _exited(pid)):
                return
            if sock.fileno() in ready:
                request = sock.recv(_SPAWN.size)
                if request != _KILL:
                    watched.remove(sock.fileno())  # the worker is gone
                _kill_group(pid)
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _exited(pid: int) -> bool:
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def _become_runner(jobs: _JobBuffer, workdir: str, fds: list[int], start: int, iso: sandbox.Isolation,
                   progress: mmap.mmap, reset_dumpable: bool) -> None:
    """In the fresh PID namespace: fds = [result pipe, stdout file, stderr file]. No ctypes call
    here unless a fallback needs one (see `sandbox.lock_down_descendants`); `ps` shows runners
    as the nursery's children, under its name."""
    try:
        job = jobs.head()
        wfd, out_fd, err_fd = fds
        os.setsid()
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        os.dup2(out_fd if job["mode"] == "function" else devnull, 1)
        os.dup2(err_fd if job["mode"] == "function" else devnull, 2)
        os.closerange(3, wfd)
        os.closerange(wfd + 1, 65536)
        os.chdir(workdir)
        sandbox.drop_privileges(iso.uid, reset_dumpable=reset_dumpable)
        if not iso.pidns:  # else the nursery's namespace ends every runner with it
            sandbox.die_with_parent()  # after the uid change, which clears it
        limits = job["limits"]
        sandbox.apply_rlimits(memory_mb=limits["memory_mb"], max_processes=limits["max_processes"],
                              max_open_files=limits["max_open_files"], max_file_bytes=limits["output_bytes"])
        # Loading the program gets one test's budget; each test then raises the soft limit by its
        # own budget (function mode) or runs in a child with its own limit (stdio mode).
        budget = int(limits["cpu_s"] * (len(job["order"]) + 2)) + 2
        resource.setrlimit(resource.RLIMIT_CPU, (int(limits["cpu_s"]) + 2, budget))
        Runner(jobs, wfd, iso.pidns, start=start, progress=progress).main()
    finally:
        os._exit(0)


class Worker:
    def __init__(self, uid: int, control_in: int, control_out: int) -> None:
        self.uid, self.cin, self.cout = uid, control_in, control_out
        self.iso = sandbox.isolate_worker(uid, sandbox.private_dirs(REPO), sandbox.interpreter_dirs())
        # One path for every job (made afresh each time): the nursery sets HOME and TMPDIR once.
        self.workdir = os.path.join("/tmp", f"judge-{os.getpid()}")
        _warm_up()
        self.nursery = Nursery(self.iso, self.workdir, (control_in, control_out))
        self.plans = _Plans()
        self.seq = 0

    def serve(self) -> None:
        send(self.cout, {"hello": self.iso.describe(), "pid": os.getpid()})
        while True:
            raw = receive_raw(self.cin)
            if raw is None:
                return
            try:
                result = self.run_job(raw)
            except NurseryDied:
                return  # the judge sees this worker die, reports the job as a judge fault, starts another
            except Exception as exc:  # noqa: BLE001 — a judge fault, reported as such
                result = {"internal": f"{type(exc).__name__}: {exc}"}
            try:
                send(self.cout, result)
            except BrokenPipeError:
                return  # the judge is gone

    def run_job(self, raw: bytes) -> dict:
        job = json.loads(raw)
        plan = self.plans.take(job, self.cin)
        job["plan"] = plan.public
        raw_job = _runner_job(job, plan.runner)
        workdir = self._fresh_workdir()
        out_fd, err_fd = (os.open(os.path.join(workdir, name), os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_EXCL, 0o600)
                          for name in (".stdout", ".stderr"))
        start = time.monotonic()
        try:
            # The expected side stays in this process: the nursery, a separate process since
            # start-up, and the runners it forks never see it.
            collector = Collector(job, plan.secret)
            cpu, rss = self._runners(job, raw_job, collector, out_fd, err_fd)
            if job["mode"] == "function":
                collector.tails = (_fd_tail(out_fd, job["limits"]["tail_bytes"]),
                                   _fd_tail(err_fd, job["limits"]["tail_bytes"]))
        finally:
            os.close(out_fd)
            os.close(err_fd)
            _remove_tree(workdir)
        outcome = collector.summary()
        outcome.update(wall=time.monotonic() - start, cpu=cpu, rss_kb=rss)
        return outcome

    def _runners(self, job: dict, raw_job: bytes, collector: Collector, out_fd: int, err_fd: int) -> tuple[float, int]:
        """Run runners until every test has a verdict: a function-mode runner that dies after loading
        the program costs only the test it was on, and a fresh one continues from the next."""
        cpu, rss, position = 0.0, 0, 0
        guard = job["limits"]["wall_s"] + (SLACK_S if job["mode"] == "stdio" else 0.0)
        while True:
            ended = self._one_runner(job, raw_job if position == 0 else None, collector, position, guard,
                                     [out_fd, err_fd])
            cpu, rss = cpu + ended["cpu"], max(rss, ended["rss_kb"])
            if (restart := self._restart_at(job, collector, ended, position)) is not None:
                position = restart
                continue
            resumable = job["mode"] == "function" and ended["why"] in ("eof", "wall", "cpu") and ended["ready"]
            if collector.stopped is not None or not resumable:
                collector.give_up(ended["why"])
                return cpu, rss
            k = collector.first_unjudged(ended["position"])
            if k is None:
                collector.give_up(ended["why"])
                return cpu, rss
            collector.crashed(_crash_report(job["order"][k], ended))
            position = k + 1
            if collector.stopped is not None or position >= len(job["order"]):
                collector.give_up(ended["why"])
                return cpu, rss

    @staticmethod
    def _restart_at(job: dict, collector: Collector, ended: dict, position: int) -> int | None:
        """Where a runner that ended itself goes on: after a test that ended the program's
        process, when tests run apart (`Runner._tests_apart`); None for any other end."""
        if not (job["plan"].get("apart") and collector.restart and ended["why"] == "eof"
                and collector.stopped is None):
            return None
        k = collector.first_unjudged(ended["position"])
        return k if k is not None and k > position else None

    def _one_runner(self, job: dict, raw_job: bytes | None, collector: Collector, position: int, guard: float,
                    files: list[int]) -> dict:
        rfd, wfd = os.pipe()
        try:
            fcntl.fcntl(wfd, _F_SETPIPE_SZ, 1 << 20)
        except OSError:
            pass  # above this machine's pipe-max-size: the lazy reader drains the default 64 KiB
        # The previous runner's namespace is gone (its init was reaped), so nobody else writes here.
        # The whole page is emptied: it is the one memory all of this worker's sandboxes map, and a
        # sample must not find anything a previous one left in it.
        self.nursery.progress[:] = _EMPTY_PAGE
        _PROGRESS.pack_into(self.nursery.progress, 0, position, 0.0)
        started = time.monotonic()
        try:
            self.nursery.spawn(position, [wfd, *files], raw_job)
        finally:
            os.close(wfd)
        frames = _Frames(rfd, self.cin, self.nursery, eager=job["stop_first"])
        try:
            why = collector.follow(frames, guard)
        finally:
            if frames.ended is None:
                self.nursery.kill()
            ended = frames.ended or self.nursery.reaped()
            if not self.iso.pidns and self.iso.uid is not None:
                sandbox.sweep_uid(self.uid)
            os.close(rfd)
            reached, cpu_before = _PROGRESS.unpack_from(self.nursery.progress)
        if why == "eof" and _cpu_limited(ended["status"]):
            why = "cpu"
        ended.update(why=why, ready=collector.ready, wall=time.monotonic() - started,
                     position=min(max(reached, position), len(job["order"])), cpu_before=cpu_before)
        return ended

    def _fresh_workdir(self) -> str:
        path = self.workdir
        if os.path.lexists(path):  # a previous job's tree that could not be removed: set it aside
            self.seq += 1
            os.rename(path, f"{path}.stale{self.seq}")
        os.mkdir(path, 0o700)
        if self.iso.uid is not None:
            os.chown(path, self.iso.uid, self.iso.uid)
        return path


def _warm_up() -> None:
    """Run the judge's own problems through this process's runner code (`engine.judge.local.warmup`
    says why), then undo what a runner changes in its process: CPU limit, SIGXCPU, builtins."""
    cpu_limit, on_xcpu = resource.getrlimit(resource.RLIMIT_CPU), signal.getsignal(signal.SIGXCPU)
    sink, progress = os.open(os.devnull, os.O_WRONLY), mmap.mmap(-1, mmap.PAGESIZE)
    jobs = warmup.jobs()
    raw_jobs = [_runner_job(job, _runner_plan(job["mode"], job["plan"])) for job in jobs]
    held = _JobBuffer()
    try:
        for k in range(warmup.ROUNDS):
            # A job whose tests run apart forks the program's process each time: a few rounds
            # quicken this side's calls, and more would only add forks to every worker's start.
            for job, raw in zip(jobs, raw_jobs):
                if k < warmup.APART_ROUNDS or not job["plan"]["apart"]:
                    held.put(raw)
                    Runner(held, sink, False, progress=progress).run()
    finally:
        resource.setrlimit(resource.RLIMIT_CPU, cpu_limit)
        signal.signal(signal.SIGXCPU, on_xcpu)
        _BUILTINS.restore(force=True)
        os.close(sink)
        progress.close()


class _Plan(NamedTuple):
    public: dict  # the tests as the judge sent them (stdio inputs are also the checker's)
    secret: dict  # expected outputs and literals: this process only
    runner: dict  # `public` as runners get it: the tests' code compiled


class _Plans:
    """The plans this worker holds, by the judge's id. A problem's tests cross the pipe, are
    parsed and compiled once, not once per sample (an RL step sends n samples of each problem,
    and stdio inputs can be megabytes); the judge says which to forget."""

    def __init__(self) -> None:
        self.held: dict[int, _Plan] = {}

    def take(self, job: dict, control: int) -> _Plan:
        for gone in job.pop("forget", ()):
            self.held.pop(gone, None)
        if job.pop("new_plan", False):  # its public and secret parts follow, a message each
            public, secret = receive(control) or {}, receive(control) or {}
            self.held[job["plan_id"]] = _Plan(public=public, secret=secret, runner=_runner_plan(job["mode"], public))
        return self.held[job["plan_id"]]


_CODE_CACHE: dict[tuple[str, str, str], types.CodeType | str] = {}


def _runner_job(job: dict, plan: dict) -> bytes:
    """The job as its runner reads it: marshal (a fraction of JSON's parsing cost in every runner),
    the tests after the rest, so that a runner can fork before it reads them (`_JobBuffer`)."""
    fields = {k: v for k, v in job.items() if k != "plan"}
    fields["apart"] = bool(plan.get("apart"))
    head = marshal.dumps(fields)
    return _HEAD.pack(len(head)) + head + marshal.dumps(plan)


def _runner_plan(mode: str, plan: dict) -> dict:
    """The tests' sources compiled here, once per source for the worker's life."""
    if mode != "function":
        return plan
    return {**plan, "setup": _test_code(plan["setup"], "<test setup>", "exec"),
            "imports": _test_code(plan["imports"], "<test imports>", "exec"),
            "units": [_unit_code(u) for u in plan["units"]]}


def _unit_code(unit: dict) -> dict:
    if unit["kind"] != "assert":
        return {**unit, "src": _test_code(unit["src"], "<test>", "exec")}
    leaves = [{**leaf, "src": _test_code(leaf["src"], "<assert operand>", "eval")} if "src" in leaf else leaf
              for leaf in unit["leaves"]]
    return {**unit, "leaves": leaves}


def _test_code(source: str, filename: str, mode: str) -> types.CodeType | str:
    key = (source, filename, mode)
    code = _CODE_CACHE.get(key)
    if code is None:
        if len(_CODE_CACHE) > 100_000:
            _CODE_CACHE.clear()
        try:
            code = compile(source, filename, mode, dont_inherit=True)
        except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
            code = source  # the runner compiles it again and reports the error as the test's
        _CODE_CACHE[key] = code
    return code


def _crash_report(i: int, ended: dict) -> dict:
    """A "done" frame for the test a runner died on, built from what the worker saw from outside."""
    status = ended["status"]
    done = {"t": "done", "i": i, "cpu": max(0.0, ended["cpu"] - ended["cpu_before"]), "wall": ended["wall"],
            "rss_kb": ended["rss_kb"], "wall_killed": ended["why"] == "wall"}
    if _cpu_limited(status):
        done["sig"] = signal.SIGXCPU  # also the runner's own handler's exit: init ignores the default action
    elif os.WIFSIGNALED(status):
        done["sig"] = os.WTERMSIG(status)
    else:
        done["code"] = os.WEXITSTATUS(status)
    if ended["why"] == "wall":
        done["sig"] = signal.SIGKILL
    return done


def _cpu_limited(status: int) -> bool:
    if os.WIFSIGNALED(status):
        return os.WTERMSIG(status) == signal.SIGXCPU
    return os.WEXITSTATUS(status) == XCPU_EXIT


def _fd_tail(fd: int, limit: int) -> str:
    size = os.fstat(fd).st_size
    return os.pread(fd, limit, max(0, size - limit)).decode("utf-8", "replace")


def _kill_group(pid: int) -> None:
    for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            target()
        except (ProcessLookupError, PermissionError):
            pass


def _remove_tree(path: str) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def _install_exit_builtins() -> None:
    """`exit`/`quit` come from the `site` module, which `-S` skips; programs use them."""
    def exit(code=None):  # noqa: A001
        raise SystemExit(code)

    builtins.exit = builtins.quit = exit


def main() -> None:
    uid, cpu = int(sys.argv[1]), int(sys.argv[2])
    if cpu >= 0:  # first, so everything it warms and forks lives on that CPU
        os.sched_setaffinity(0, {cpu})
    sandbox.set_name(b"judge-worker")
    control_in, control_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    for name in PREIMPORT:
        __import__(name)
    _install_exit_builtins()

    sys.set_int_max_str_digits(0)
    _BUILTINS.snapshot()
    Worker(uid, control_in, control_out).serve()

