"""The program's own process and what runs in it: its namespace, the builtins every test starts from,
and the calls the tests make into it (ending it as Python would: `engine.judge.local.process`).
"""

from __future__ import annotations

import builtins
import ctypes
import json
import os
import resource
import select
import signal
import struct
import sys
import time
import types
from typing import Any, Protocol

from engine.judge import plain
from engine.judge.local import limits
from engine.judge.local.process import XCPU_EXIT, cpu_limited, exited_within, flush_streams
from engine.judge.local.wire import HEADER, MAX_FRAME, receive, send

BUILTIN_NAMES = frozenset(dir(builtins))  # taken before any untrusted code runs


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


BUILTINS = _Builtins()


class RunnerSide(Protocol):
    """What the program's process reads of the runner that forks it."""

    jobs: Any  # the runner's job buffer: the child forgets its copy
    wfd: int  # the result pipe, closed in the child
    limits: dict
    pidns: bool


class ModuleFailed(Exception):
    def __init__(self, report: dict) -> None:
        super().__init__(report.get("msg", ""))
        self.report = report


class ProgramProcess:
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

    def __init__(self, runner: RunnerSide, code) -> None:
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
            raise ModuleFailed(self._load_failure(loaded)) from None

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
        if not exited_within(self.pid, 1.0):
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
            limits.kill_all_in_namespace()

    def _answer(self) -> dict | None:
        """The child's next answer; None when it ended or overran the test's wall limit, {} when
        what it wrote is not an answer."""
        buf = bytearray()
        while True:
            need = HEADER.size if len(buf) < HEADER.size else HEADER.size + HEADER.unpack_from(buf)[0]
            if len(buf) >= need > HEADER.size:
                return _parse_answer(bytes(buf[HEADER.size:need]))
            if need - HEADER.size > MAX_FRAME:
                return {}
            ready, _, _ = select.select([self.answers], [], [], max(0.0, self.deadline - time.monotonic()))
            chunk = os.read(self.answers, min(need - len(buf), 1 << 20)) if ready else b""
            if not chunk:
                return None
            buf += chunk

    def _ended_report(self) -> dict:
        """Why the child is gone (ended, or killed here past the wall limit), from its exit status."""
        killed = not exited_within(self.pid, max(0.0, self.deadline - time.monotonic()) + 0.05)
        if killed:
            os.kill(self.pid, signal.SIGKILL)
        _, status, usage = os.wait4(self.pid, 0)
        os.close(self.ask)
        os.close(self.answers)
        self._swept()
        done = {"cpu": usage.ru_utime + usage.ru_stime, "rss_kb": usage.ru_maxrss, "wall_killed": killed}
        if killed:
            done["sig"] = signal.SIGKILL
        elif cpu_limited(status):
            done["sig"] = signal.SIGXCPU
        elif os.WIFSIGNALED(status):
            done["sig"] = os.WTERMSIG(status)
        else:
            done["code"] = os.WEXITSTATUS(status)
        return done


def _stand_in(program: "ProgramProcess", name: str, kind):
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

    def __init__(self, program: ProgramProcess, name: str) -> None:
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


def _serve_program(code, ask: int, answers: int, bounds: dict) -> None:
    """The child's side: load the program, then answer calls until the runner closes the pipe."""
    signal.signal(signal.SIGXCPU, lambda *_: os._exit(XCPU_EXIT))
    ns = {"__name__": "solution", "__builtins__": builtins}
    try:
        exec(code, ns)
    except BaseException as exc:  # noqa: BLE001 — reported as the module's failure
        send(answers, {"module": exc_report(exc)})
        return
    BUILTINS.restore()  # the program may have patched what this side's own code uses
    send(answers, {"names": _exported(ns), "cpu": time.process_time()})
    hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
    while (request := receive(ask)) is not None:
        if request["c"] is None:
            used = time.process_time()
            resource.setrlimit(resource.RLIMIT_CPU, (min(int(used + bounds["cpu_s"] + 1), hard), hard))
            ns["__builtins__"] = builtins
            send(answers, {"cpu": used})
            continue
        answer = _called(ns, request)
        BUILTINS.restore()
        send(answers, {**answer, "cpu": time.process_time()})
    flush_streams()


def _called(ns: dict, request: dict) -> dict:
    try:
        function = ns[request["c"]]
        value = function(*[plain.decode(a) for a in request["a"]],
                         **{k: plain.decode(v) for k, v in request["k"].items()})
        return {"v": plain.encode(value)}
    except BaseException as exc:  # noqa: BLE001 — the program's failure, reported to its test
        return {"x": exc_report(exc)}


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


def compiled(source, filename: str, mode: str):
    """The worker compiles the tests' own sources once per plan; what it could not compile (a broken
    test) is compiled here, so the error is reported as that test's, from inside the sandbox."""
    return source if isinstance(source, types.CodeType) else compile(source, filename, mode, dont_inherit=True)


def evaluate(src, ns: dict) -> dict:
    try:
        value = eval(compiled(src, "<assert operand>", "eval"), ns)
        return {"v": plain.encode(value)}
    except plain.NotPlain as exc:
        return {"notplain": str(exc)}
    except BaseException as exc:  # noqa: BLE001
        return exc_report(exc)


def exc_report(exc: BaseException) -> dict:
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
