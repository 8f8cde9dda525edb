"""The program's own process and what runs in it: its namespace, the builtins every test starts from,
and the calls the tests make into it (ending it as Python would: `engine.judge.local.process`).
"""

from __future__ import annotations

import builtins
import ctypes
import json
import marshal
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
from engine.judge.local import faults, limits
from engine.judge.local.limits import program_limits
from engine.judge.local.process import XCPU_EXIT, cpu_limited, exited_within, flush_streams, wait_or_kill
from engine.judge.local.wire import HEADER, MAX_FRAME, receive_raw, send, send_raw

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
    progress: Any  # the page the runner shares with its worker: unmapped in the child
    wfd: int  # the result pipe, closed in the child
    limits: dict
    pidns: bool


class ModuleFailed(Exception):
    def __init__(self, report: dict) -> None:
        super().__init__(report.get("msg", ""))
        self.report = report


class ProgramProcess:
    """The program in a process of its own; the runner, which alone holds the result pipe, asks it.

    The program's module runs only in this child, never in the runner: a program sharing the
    reporting process could write the reports (the pipe is one of its descriptors, the frames
    are plain JSON, and any secret that process held the program could read in its own memory).
    Two ways to ask it, by plan:

    - tests in the program's process (`evaluate`): where every operand is one call of the
      program, the child evaluates a test's operands in the program's namespace and answers
      their values; claiming a value is then no more than returning it.
    - tests apart (`call`): tests that run code of their own run in the runner with, in place of
      the program's functions, stand-ins that send the arguments here and return what came back.

    Values cross as strict plain data both ways, so the runner's comparisons see only objects it
    decoded itself. What the child reports is never trusted for anything else: its CPU time is
    read from outside (the kernel's clock of the child's process), its exception reports are
    limited to what a program can cause, and a test's CPU and wall limits are enforced here.
    What the child can do to the runner is end or stall it a test's answer. Past the limits,
    or when it dies, the test fails and the next test gets a fresh runner, and with it a fresh
    child (the program loaded again).

    The child is forked before the runner reads the tests and it empties its copy of the job
    buffer and unmaps the page it would share with the worker first thing: a program that
    walked its process's memory for the tests' code could otherwise run them against a probe
    and answer every call with the expected value.
    """

    def __init__(self, runner: RunnerSide, source: str) -> None:
        self.runner, self.source, self.pid = runner, source, None
        self.cpu = 0.0  # the child's CPU seconds, as last read from outside
        self.deadline = float("inf")  # wall clock
        self.cpu_deadline = float("inf")  # the child's CPU clock
        self.over_cpu = False  # the last answer was not waited for: the child spent the test's CPU
        self.gone: dict | None = None  # how the child ended mid-test, as a "done" frame's fields
        self.others = 0.0  # CPU seconds of the processes the child started, as last read (`_others_cpu`)

    def start(self, *, exports: bool) -> dict:
        """Fork the child and load the program there: the stand-ins for its names (`exports`), or {}."""
        ask_r, self.ask = os.pipe()
        self.answers, answer_w = os.pipe()
        pid = faults.fork("program")
        if pid == 0:
            try:
                self.runner.jobs.forget()
                if self.runner.progress is not None:
                    self.runner.progress.close()
                for fd in (self.ask, self.answers, self.runner.wfd):
                    os.close(fd)
                program_limits(self.runner.limits)
                _serve_program(self.source, ask_r, answer_w, exports)
            finally:
                os._exit(70)
        self.pid, self.gone = pid, None
        self.clock = ((~pid) << 3) | 2  # the kernel's CPU clock of that process (CPUCLOCK_SCHED)
        self.others, self.proc = 0.0, _ProcView(pid) if self.runner.pidns else None
        self._budget(self.runner.limits["cpu_s"] + 1.0)
        os.close(ask_r)
        os.close(answer_w)
        loaded = self._answer()
        if isinstance(loaded, dict) and "syntax" in loaded:
            self.close()
            raise ProgramSyntax(str(loaded["syntax"])[:500])
        try:
            if not isinstance(loaded.get("names"), dict):
                raise TypeError
            return {name: _stand_in(self, name, kind) for name, kind in loaded["names"].items()
                    if not name.startswith("__") and (kind[0] != "m" or kind[1] in sys.modules)}
        except Exception:  # noqa: BLE001 — it failed to load, ended, or answered out of turn
            raise ModuleFailed(self._load_failure(loaded)) from None

    def prepare(self, plan: dict) -> None:
        """Tests in the program's process: their setup there, and their view of its names."""
        answer = self._ask({"setup": plan["setup"], "meant": plan["meant"], "candidate": plan["candidate"],
                            "entry": plan["entry"]}, ("ok", "module"))
        if answer is None:
            raise ModuleFailed(self._load_failure(None))
        if "module" in answer:
            self.close()
            raise ModuleFailed(_program_report(answer["module"]))

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
            return _program_report(report)
        return {"error": "runtime", "msg": "the program's process answered out of turn while loading"}

    def unit(self, i: int, body) -> dict:
        """Run one test's body against the child; a "result" frame, or a "done" frame when the
        child ended or overran (then `pid` is None). Its CPU time is the child's, read from outside."""
        start = time.monotonic()
        self.deadline = start + self.runner.limits["wall_s"]
        began = self._cpu()
        self.cpu_deadline = began + self.runner.limits["cpu_s"]
        if self.gone is None:
            self._arm(began)
        report = body() if self.gone is None else {}
        if self.gone is not None:
            report = {"t": "done", "i": i, **self.gone, "cpu": max(0.0, self.gone["cpu"] - began)}
        else:
            others, self.others = self.others, self._others_cpu()
            report["cpu"] = max(0.0, self._cpu() - began) + max(0.0, self.others - others)
        report["wall"] = time.monotonic() - start
        return report

    def evaluate(self, i: int, leaves: dict) -> dict:
        """Tests in the program's process: the values of test i's operands, each evaluated there."""
        answer = self._ask({"leaves": leaves}, ("values",))
        if answer is None:
            return {}
        values = answer["values"]
        if not isinstance(values, dict) or set(values) - set(leaves):
            self._kill_gone()
            return {}
        return {"t": "result", "i": i, "values": {n: _value_report(v) for n, v in values.items()}}

    def call(self, name: str, args: tuple, kwargs: dict):
        """One call of the program's `name` (tests apart)."""
        if self.gone is not None:
            raise _ProgramGone("the program's process ended")
        try:
            request = {"call": name, "a": [plain.encode(a) for a in args],
                       "k": {k: plain.encode(v) for k, v in kwargs.items()}}
        except plain.NotPlain as exc:  # the test passes something only a shared process could
            raise _ProgramRaised({"error": "judge", "msg": f"cannot pass this argument to the program: {exc}"}) from None
        answer = self._ask(request, ("v", "x"))
        if answer is None:
            raise _ProgramGone("the program's process ended")
        if "x" in answer:
            raise _program_exception(answer["x"])
        return plain.decode(answer["v"])

    def _ask(self, request: dict, keys: tuple[str, ...]) -> dict | None:
        """Send a request; its answer (a dict with one of `keys`), or None when the child ended,
        overran, or answered out of turn (then it is gone: `gone` says how)."""
        if self.gone is not None:
            return None
        try:
            send_raw(self.ask, marshal.dumps(request))
        except OSError:
            pass  # it died: its end is read below
        answer = self._answer()
        if answer is None or not any(k in answer for k in keys):
            if answer is not None:
                self._kill_gone()
            else:
                self.gone = self._ended_report()
            return None
        return answer

    def _arm(self, used: float) -> None:
        """The child's CPU limit for this test, set from here (prlimit: same uid, no request): the
        kernel stops a child that ignores SIGXCPU at the hard limit, the runner at the test's."""
        try:
            hard = resource.prlimit(self.pid, resource.RLIMIT_CPU)[1]
            resource.prlimit(self.pid, resource.RLIMIT_CPU, (min(int(used + self.runner.limits["cpu_s"] + 1), hard), hard))
        except (OSError, ValueError):
            pass  # it ended: its end is read at the next request

    def _kill_gone(self) -> None:
        os.kill(self.pid, signal.SIGKILL)
        self.gone = self._ended_report()

    def close(self) -> None:
        if self.pid is None:
            return
        os.close(self.ask)  # the child reads end-of-file and exits
        os.close(self.answers)
        wait_or_kill(self.pid, 1.0)
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

    def _budget(self, seconds: float) -> None:
        self.deadline = time.monotonic() + self.runner.limits["wall_s"]
        self.cpu_deadline = self._cpu() + seconds

    def _cpu(self) -> float:
        """The child's CPU seconds (all its threads), from the kernel, not from the child."""
        try:
            self.cpu = time.clock_gettime(self.clock)
        except OSError:
            pass  # reaped: its last reading stands; its end is read from its exit status
        return self.cpu

    def _others_cpu(self) -> float:
        """CPU seconds of every process the child started, alive, ended or reaped: the child's clock
        counts its own threads only, and a program must not spread a test's work over children to
        pass under its CPU limit. 0 where /proc cannot tell (`_ProcView`). What they spent before
        a test (while the program loaded, or between tests) counts for it."""
        return self.proc.others() if self.proc is not None else 0.0

    def _answer(self) -> dict | None:
        """The child's next answer; None when it ended or overran the test's wall or CPU limit
        (`over_cpu` says which), {} when what it wrote is not an answer."""
        buf = bytearray()
        self.over_cpu = False
        while True:
            need = HEADER.size if len(buf) < HEADER.size else HEADER.size + HEADER.unpack_from(buf)[0]
            if len(buf) >= need > HEADER.size:
                return _parse_answer(bytes(buf[HEADER.size:need]))
            if need - HEADER.size > MAX_FRAME:
                return {}
            # Wake at the wall deadline or when the CPU budget could be spent (one thread at full
            # speed; more threads are caught at the next wake-up and by the CPU read at the answer).
            wall_left = self.deadline - time.monotonic()
            cpu_left = self.cpu_deadline - self._cpu()
            if cpu_left <= 0:
                self.over_cpu = True
                return None
            if wall_left <= 0:
                return None
            ready, _, _ = select.select([self.answers], [], [], min(wall_left, cpu_left + 0.01))
            if not ready:
                continue
            chunk = os.read(self.answers, min(need - len(buf), 1 << 20))
            if not chunk:
                return None
            buf += chunk

    def _ended_report(self) -> dict:
        """Why the child is gone (ended, or killed here past the wall or CPU limit), from its exit status."""
        over_cpu = self.over_cpu
        killed = over_cpu or not exited_within(self.pid, max(0.0, self.deadline - time.monotonic()) + 0.05)
        if killed:
            os.kill(self.pid, signal.SIGKILL)
        _, status, usage = os.wait4(self.pid, 0)
        os.close(self.ask)
        os.close(self.answers)
        self._swept()
        done = {"cpu": usage.ru_utime + usage.ru_stime, "rss_kb": usage.ru_maxrss, "wall_killed": killed and not over_cpu}
        self.cpu = max(self.cpu, done["cpu"])
        if over_cpu:
            done["sig"] = signal.SIGXCPU
        elif killed:
            done["sig"] = signal.SIGKILL
        elif cpu_limited(status):
            done["sig"] = signal.SIGXCPU
        elif os.WIFSIGNALED(status):
            done["sig"] = os.WTERMSIG(status)
        else:
            done["code"] = os.WEXITSTATUS(status)
        return done


_CLK_TCK = os.sysconf("SC_CLK_TCK")


class _ProcView:
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


class ProgramSyntax(Exception):
    """The program did not compile (its process says so: a program can only fail itself with it)."""


class _ProgramGone(Exception):
    pass


class _ProgramRaised(Exception):
    """The program's own exception, as its child reported it."""

    def __init__(self, report: dict) -> None:
        super().__init__(str(report.get("msg", ""))[:500])
        self.report = report


# Builtin exceptions a test may catch from a call of the program (`except ValueError:`), taken
# before any untrusted code ran. StopIteration and StopAsyncIteration stay out: raised into an
# iterator the tests consume (`all(map(check, cases))`), they would end it early and pass the test.
_CATCHABLE = {name: cls for name, cls in vars(builtins).items() if isinstance(cls, type)
              and issubclass(cls, Exception) and not issubclass(cls, (StopIteration, StopAsyncIteration))}


def _program_exception(raw) -> Exception:
    """The program's exception, reported by its process, as the tests in the runner see it: an
    exception of the same builtin class (made here, with the message only), so a test that expects
    the program to raise catches it as it would in one process; otherwise `_ProgramRaised`. Either
    way `exc_report` reads the program's report back from it, limited to what a program can cause."""
    report = _program_report(raw)
    cls = _CATCHABLE.get(raw.get("type")) if isinstance(raw, dict) else None
    if cls is None:
        return _ProgramRaised(report)
    name, _, text = report["msg"].partition(": ")
    try:
        exc = cls(text if name == cls.__name__ else report["msg"])
    except Exception:  # noqa: BLE001 — a class that needs more arguments (UnicodeDecodeError, ...)
        return _ProgramRaised(report)
    exc.program_report = report
    return exc


def _parse_answer(body: bytes) -> dict:
    """An answer of the program's process; {} (out of turn) for anything else. What that process
    writes is the program's, so nothing in it may fail the runner: nesting deep enough to exhaust
    the parser's recursion, or a frame too big for the runner's memory, is the program's answer
    out of turn, never a judge fault."""
    try:
        answer = json.loads(body)
    except (ValueError, RecursionError, MemoryError):
        return {}
    return answer if isinstance(answer, dict) else {}


def _serve_program(source: str, ask: int, answers: int, exports: bool) -> None:
    """The child's side: compile and load the program, then answer the runner's requests until it
    closes the pipe."""
    signal.signal(signal.SIGXCPU, lambda *_: os._exit(XCPU_EXIT))
    signal.signal(signal.SIGINT, signal.default_int_handler)  # the runner ignores it; the program gets Python's
    try:
        code = compile(source, "<solution>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError) as exc:
        send(answers, {"syntax": f"{type(exc).__name__}: {exc}"})
        return
    ns = {"__name__": "solution", "__builtins__": builtins}
    try:
        exec(code, ns)
    except BaseException as exc:  # noqa: BLE001 — reported as the module's failure
        send(answers, {"module": exc_report(exc)})
        return
    BUILTINS.restore()  # the program may have patched what this side's own code uses
    send(answers, {"names": _exported(ns) if exports else {}})
    view = ns
    while (raw := receive_raw(ask)) is not None:
        request = marshal.loads(raw)
        view["__builtins__"] = ns["__builtins__"] = builtins
        if "call" in request:
            answer: dict = _called(ns, request)
        elif "leaves" in request:
            answer = {"values": {n: evaluate(src, view) for n, src in request["leaves"].items()}}
        else:
            view, answer = _prepared(ns, request)
        BUILTINS.restore()
        send(answers, answer)
    flush_streams()


def _prepared(ns: dict, request: dict) -> tuple[dict, dict]:
    """Tests in the program's process: their setup run in its namespace, and their view of it."""
    try:
        if request["setup"]:
            exec(compiled(request["setup"], "<test setup>", "exec"), ns)
    except BaseException as exc:  # noqa: BLE001 — the test's own setup, reported as the module's failure
        return ns, {"module": exc_report(exc)}
    return tests_view(ns, request), {"ok": 1}


def warm_program_side(source: str, plan: dict) -> None:
    """The program's side of a function job, run in this process: the worker's warm-up (see
    `engine.judge.local.warmup`) quickens this code here, where every program's process inherits
    it, since what runs in a forked child is lost with it. Trusted problems only."""
    ns = {"__name__": "solution", "__builtins__": builtins}
    exec(compile(source, "<solution>", "exec", dont_inherit=True), ns)
    _exported(ns)
    view, _ = _prepared(ns, {"setup": plan["setup"], "meant": plan["meant"], "candidate": plan["candidate"],
                             "entry": plan["entry"]})
    for unit in plan["units"]:
        leaves = {str(n): leaf["src"] for n, leaf in enumerate(unit.get("leaves", ())) if leaf.get("phase") == "after"}
        request = marshal.loads(marshal.dumps({"leaves": leaves}))
        json.dumps({"values": {n: evaluate(src, view) for n, src in request["leaves"].items()}})
    BUILTINS.restore(force=True)


def tests_view(ns: dict, plan: dict) -> dict:
    """The program's names as its tests see them. A builtin's name means the builtin (a program that
    binds `set` or `sorted` must not decide both sides of an assert), unless the plan says the tests
    mean the program's (MBPP 126 asks for a function named `sum`). The candidate alias is the
    entry point."""
    meant = plan["meant"]
    view = {k: v for k, v in ns.items() if k not in BUILTIN_NAMES or k in meant or k.startswith("__")}
    if plan["candidate"] and plan["entry"] in view:
        view[plan["candidate"]] = view[plan["entry"]]
    return view


# What a program may report as its own failure. "judge" (a call the judge's side could not make)
# is the runner's to say: a program claiming it would turn its failure into a judge fault.
_PROGRAM_ERRORS = frozenset({"memory", "assert", "notplain", "runtime", "output", "timeout"})


def _program_report(report) -> dict:
    """A failure the program's process reported, limited to what a program can cause."""
    if not isinstance(report, dict):
        return {"error": "runtime", "msg": "the program's process answered out of turn"}
    kind = report.get("error")
    return {"error": kind if kind in _PROGRAM_ERRORS else "runtime", "msg": str(report.get("msg", ""))[:500]}


def _value_report(report) -> dict:
    """One operand's report from the program's process: a plain value (decoded, strictly, by the
    worker), a value that is not plain data, or the program's failure."""
    if isinstance(report, dict) and "v" in report:
        return {"v": report["v"]}
    if isinstance(report, dict) and "notplain" in report:
        return {"notplain": str(report["notplain"])[:500]}
    return _program_report(report)


def _called(ns: dict, request: dict) -> dict:
    try:
        function = ns[request["call"]]
        value = function(*[plain.decode(a) for a in request["a"]],
                         **{k: plain.decode(v) for k, v in request["k"].items()})
        return {"v": plain.encode(value)}
    except BaseException as exc:  # noqa: BLE001 — the program's failure, reported to its test
        return {"x": {**exc_report(exc), "type": type(exc).__name__}}


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
    if isinstance(getattr(exc, "program_report", None), dict):  # made by `_program_exception`
        return dict(exc.program_report)
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
