"""The program's own process, as the runner sees it: forked and limited here, asked one request at a
time, every answer plain data or a handle (`engine.judge.local.crossing`); its side is
`engine.judge.local.served`. Ending it as Python would: `engine.judge.local.process`.
"""

from __future__ import annotations

import json
import marshal
import os
import resource
import select
import signal
import time
from typing import Any, Protocol

from engine.judge import plain
from engine.judge.local import faults, limits
from engine.judge.local.calls import Caller
from engine.judge.local.crossing import program_report
from engine.judge.local.limits import program_limits
from engine.judge.local.process import cpu_limited, exited_within, wait_or_kill
from engine.judge.local.procview import ProcView
from engine.judge.local.served import serve_program
from engine.judge.local.wire import HEADER, MAX_FRAME, send_raw


class RunnerSide(Protocol):
    """What the program's process reads of the runner that forks it."""

    jobs: Any  # the runner's job buffer: the child forgets its copy
    progress: Any  # the page the runner shares with its worker: unmapped in the child
    wfd: int  # the result pipe, closed in the child
    limits: dict
    pidns: bool
    cpu_hard: int  # its CPU hard limit, which the program's process inherits


class ModuleFailed(Exception):
    def __init__(self, report: dict) -> None:
        super().__init__(report.get("msg", ""))
        self.report = report


class ProgramProcess(Caller):
    """The program in a process of its own; the runner, which alone holds the result pipe, asks it.

    The program's module runs only in this child, never in the runner: a program sharing the
    reporting process could write the reports (the pipe is one of its descriptors, the frames
    are plain JSON, and any secret that process held the program could read in its own memory).
    The tests run in the runner (`engine.judge.local.testcode`): every name of the program is a
    handle there, and each use of one is a request here, answered by plain data or a handle
    (`engine.judge.local.crossing`). No operand, comparison or helper of a test ever runs in this
    child, whatever the tests' setup binds or how: the runner evaluates them all.

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
        super().__init__()
        self.runner, self.source, self.pid = runner, source, None
        self.cpu = 0.0  # the child's CPU seconds, as last read from outside
        self.deadline = float("inf")  # wall clock
        self.cpu_deadline = float("inf")  # the child's CPU clock
        self.over_cpu = False  # the last answer was not waited for: the child spent the test's CPU
        self.gone: dict | None = None  # how the child ended mid-test, as a "done" frame's fields
        self.others = 0.0  # CPU seconds of the processes the child started, as last read (`_others_cpu`)

    def start(self) -> dict:
        """Fork the child and load the program there: the stand-ins for its names."""
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
                serve_program(self.source, ask_r, answer_w)
            finally:
                os._exit(70)
        self.pid, self.gone = pid, None
        self.clock = ((~pid) << 3) | 2  # the kernel's CPU clock of that process (CPUCLOCK_SCHED)
        self.others, self.proc = 0.0, ProcView(pid) if self.runner.pidns else None
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
            return self.stand_ins(loaded["names"])
        except plain.TooLarge as exc:  # a value of its module past the decode bound: its output
            self.close()
            raise ModuleFailed({"error": "output", "msg": f"a value of the program is too large: {exc}"}) from None
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
            return program_report(report)
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

    def _ask(self, request: dict) -> dict | None:
        """Send a request; its answer (a dict with "v" or "x"), or None when the child ended,
        overran, or answered out of turn (then it is gone: `gone` says how). The callbacks the
        program makes meanwhile are answered here, each in turn (one may call into it again)."""
        if self.gone is not None:
            return None
        try:
            send_raw(self.ask, marshal.dumps(request))
        except OSError:
            pass  # it died: its end is read below
        while True:
            answer = self._answer()
            if answer is None:
                self.gone = self._ended_report()
                return None
            if "cb" in answer and "v" not in answer and "x" not in answer:
                reply = self.callback(answer)
                if self.gone is not None:
                    return None
                try:
                    send_raw(self.ask, marshal.dumps({"cbr": reply}))
                except OSError:
                    pass  # it died: its end is read next
                continue
            if "v" not in answer and "x" not in answer:
                self._kill_gone()
                return None
            return answer

    def _arm(self, used: float) -> None:
        """The child's CPU limit for this test, set from here (prlimit: same uid, no request): the
        kernel stops a child that ignores SIGXCPU at the hard limit, the runner at the test's. The
        hard limit is the one the child inherited; a child that lowered it is refused the call and
        keeps its lower bound (its soft limit is its own to raise up to that bound anyway)."""
        hard = self.runner.cpu_hard
        try:
            resource.prlimit(self.pid, resource.RLIMIT_CPU, (min(int(used + self.runner.limits["cpu_s"] + 1), hard), hard))
        except (OSError, ValueError):
            pass  # it ended (its end is read at the next request), or it lowered its hard limit

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
        pass under its CPU limit. 0 where /proc cannot tell (`ProcView`). What they spent before
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


class ProgramSyntax(Exception):
    """The program did not compile (its process says so: a program can only fail itself with it)."""


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
