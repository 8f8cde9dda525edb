"""The pre-warmed sandbox worker (zygote): `python -I -S -c "...worker import main; main()" UID`.

A small interpreter started once per core by `engine.judge.local.pool`; it sets up
its namespaces once (`engine.judge.local.sandbox`), pre-imports common modules,
forks its *nursery*, then reads jobs (length-prefixed JSON on fd 0) and
answers one result per job.

Runners are forked by the nursery, a child of the worker made before any job:
it never holds a job's expected side, so neither does any runner, even one
started after the worker received it. The job reaches a runner as marshal,
with the tests' own sources already compiled by the worker. A runner is the
init of a fresh PID namespace with an unprivileged uid; it compiles the
program once (SYNTAX_ERROR) and never runs it: the program runs in processes
the runner forks, with the program's rlimits, which cannot reach the result
pipe. Function tests: the tests run in the runner, and one process loads the
program and answers each use of its objects (`program.ProgramProcess`), test after test, while the runner records in a
shared page which test runs; if the runner dies mid-suite, or a test ends the
program's process, that test fails and a fresh runner continues from the
next one. Stdio tests: it forks one fresh execution of the compiled program
per test, with the test's input file as stdin and a size-capped file as
stdout, and guards each. Only the runner reports, over a pipe that outlives the
runner; what fails in the runner itself is reported as a judge fault. The
worker — which never runs untrusted code — reads the reports when
the runner has ended (or at each one when the first failure ends the sample),
applies the wall-clock guard, decodes values into its own plain objects and
compares them. A pass needs a
report for every test: an early exit, a killed parent or a closed pipe leave
tests unreported, which fail.
"""

from __future__ import annotations

import builtins
import fcntl
import json
import mmap
import os
import resource
import select
import signal
import sys
import time

from engine.judge.local import faults, limits, sandbox, warmup
from engine.judge.local.jobs import JobBuffer, Plans, runner_job, runner_plan
from engine.judge.local.nursery import Nursery, NurseryDied
from engine.judge.local.process import cpu_limited
from engine.judge.local.calls import warm_both_sides
from engine.judge.local.served import BUILTINS
from engine.judge.local.runner import PROGRESS, Runner
from engine.judge.local.workdir import empty_directory
from engine.judge.local.wire import (
    HEADER,
    LAZY_POLL_S,
    MAX_FRAME,
    receive_raw,
    send,
)
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


_EMPTY_PAGE = bytes(mmap.PAGESIZE)


_F_SETPIPE_SZ = 1031  # fcntl: a 1 MiB result pipe holds a whole suite's frames without the runner waiting


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
            size = HEADER.unpack_from(buf, at)[0]
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
        except (ValueError, RecursionError, MemoryError):
            frames = None
        if frames is not None and len(frames) == len(bodies) and all(isinstance(f, dict) for f in frames):
            return frames
        out = []
        for body in bodies:
            try:
                frame = json.loads(body)
            except (ValueError, RecursionError, MemoryError):
                frame = None
            if not isinstance(frame, dict):
                self.bad = self.eof = True
                break
            out.append(frame)
        return out


class Worker:
    def __init__(self, uid: int, control_in: int, control_out: int, hide: list[str]) -> None:
        self.uid, self.cin, self.cout = uid, control_in, control_out
        # One path for every job (a tmpfs of its own, emptied between jobs, where the mount namespace
        # was obtained; else made afresh each time): the nursery sets HOME and TMPDIR once.
        self.workdir = os.path.join("/tmp", f"judge-{os.getpid()}")
        self.iso = sandbox.isolate_worker(uid, sandbox.private_dirs(REPO, hide), sandbox.interpreter_dirs(),
                                          self.workdir)
        _warm_up()
        faults.arm()
        self.nursery = Nursery(self.iso, self.workdir, (control_in, control_out))
        self.plans = Plans()
        self.seq = 0

    def serve(self) -> None:
        send(self.cout, {"hello": self.iso.describe(), "level": self.iso.level(), "pid": os.getpid()})
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
        faults.check("worker-dies", "the worker")
        job = json.loads(raw)
        plan = self.plans.take(job, self.cin)
        job["plan"] = plan.public
        raw_job = runner_job(job, plan.runner)
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
            self._clear_workdir()
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
        process (`Runner._tests`); None for any other end."""
        if not (job["mode"] == "function" and collector.restart and ended["why"] == "eof"
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
        PROGRESS.pack_into(self.nursery.progress, 0, position, 0.0)
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
                limits.sweep_uid(self.uid)
            os.close(rfd)
            reached, cpu_before = PROGRESS.unpack_from(self.nursery.progress)
        if why == "eof" and cpu_limited(ended["status"]):
            why = "cpu"
        ended.update(why=why, ready=collector.ready, wall=time.monotonic() - started,
                     position=min(max(reached, position), len(job["order"])), cpu_before=cpu_before)
        return ended

    def _fresh_workdir(self) -> str:
        path = self.workdir
        if self.iso.mountns:
            self._clear_workdir()
            if os.listdir(path):
                # Whatever a sample left here, the next one would read: this worker is done.
                raise NurseryDied(f"the work directory {path} could not be emptied")
            return path
        if os.path.lexists(path):  # a previous job's tree that could not be removed: set it aside
            self.seq += 1
            os.rename(path, f"{path}.stale{self.seq}")
        os.mkdir(path, 0o700)
        if self.iso.uid is not None:
            os.chown(path, self.iso.uid, self.iso.uid)
        return path

    def _clear_workdir(self) -> None:
        """Empty the work directory (its own tmpfs), or remove it (fallback without one)."""
        empty_directory(self.workdir)
        if not self.iso.mountns:
            try:
                os.rmdir(self.workdir)
            except OSError:
                pass  # what could not be removed is set aside by the next job (`_fresh_workdir`)


def _warm_up() -> None:
    """Run the judge's own problems through this process's runner code (`engine.judge.local.warmup`
    says why), then undo what a runner changes in its process: CPU limit, SIGXCPU, builtins."""
    cpu_limit, on_xcpu = resource.getrlimit(resource.RLIMIT_CPU), signal.getsignal(signal.SIGXCPU)
    sink, progress = os.open(os.devnull, os.O_WRONLY), mmap.mmap(-1, mmap.PAGESIZE)
    jobs = warmup.jobs()
    raw_jobs = [runner_job(job, runner_plan(job["mode"], job["plan"])) for job in jobs]
    held = JobBuffer()
    try:
        for k in range(warmup.ROUNDS):
            # The runner's side forks the program's process each time: a few rounds quicken its
            # code, and more would only add forks to every worker's start. The program's side
            # runs here, where what it quickens is inherited.
            for job, raw in zip(jobs, raw_jobs):
                held.put(raw)
                if k < warmup.RUNNER_ROUNDS:
                    Runner(held, sink, False, progress=progress).run()
                warm_both_sides(job["program"], held.plan())
    finally:
        resource.setrlimit(resource.RLIMIT_CPU, cpu_limit)
        signal.signal(signal.SIGXCPU, on_xcpu)
        BUILTINS.restore(force=True)
        os.close(sink)
        progress.close()


def _crash_report(i: int, ended: dict) -> dict:
    """A "done" frame for the test a runner died on, built from what the worker saw from outside."""
    status = ended["status"]
    done = {"t": "done", "i": i, "cpu": max(0.0, ended["cpu"] - ended["cpu_before"]), "wall": ended["wall"],
            "rss_kb": ended["rss_kb"], "wall_killed": ended["why"] == "wall"}
    if cpu_limited(status):
        done["sig"] = signal.SIGXCPU  # also the runner's own handler's exit: init ignores the default action
    elif os.WIFSIGNALED(status):
        done["sig"] = os.WTERMSIG(status)
    else:
        done["code"] = os.WEXITSTATUS(status)
    if ended["why"] == "wall":
        done["sig"] = signal.SIGKILL
    return done


def _fd_tail(fd: int, limit: int) -> str:
    size = os.fstat(fd).st_size
    return os.pread(fd, limit, max(0, size - limit)).decode("utf-8", "replace")


def _install_exit_builtins() -> None:
    """`exit`/`quit` come from the `site` module, which `-S` skips; programs use them."""
    def exit(code=None):  # noqa: A001
        raise SystemExit(code)

    builtins.exit = builtins.quit = exit


def main() -> None:
    uid, cpu, hide = int(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3])
    if cpu >= 0:  # first, so everything it warms and forks lives on that CPU
        os.sched_setaffinity(0, {cpu})
    limits.set_name(b"judge-worker")
    control_in, control_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    for name in PREIMPORT:
        __import__(name)
    _install_exit_builtins()

    sys.set_int_max_str_digits(0)
    BUILTINS.snapshot()
    Worker(uid, control_in, control_out, hide).serve()
