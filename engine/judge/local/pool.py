"""The `local` backend: a pool of pre-warmed sandbox workers on this machine.

Workers are small interpreters (`python -I -S -c <import engine.judge.local.worker; main()> UID`),
started once — never forked from this (possibly large) process — each with
its namespaces already set up and a sandbox uid of its own. Jobs go to idle
workers over pipes (length-prefixed JSON); independent samples run on all
workers at once. A worker keeps the plans (a problem's tests) it was sent, so
each crosses the pipe once per worker. A worker that dies or stops answering is
replaced (a watchdog finds one that hangs) and the job is judged again once; a second fault
is reported as INTERNAL_ERROR (a judge fault, never a model verdict).
"""

from __future__ import annotations

import collections
import json
import os
import queue
import select
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Iterable, Iterator, NamedTuple

from engine.judge.cases import CasePlan, function_plan, stdio_plan
from engine.judge.config import IsolationChanged, JudgeConfig, JudgeJob, given_cpus, test_count
from engine.judge.local import spawn, wire
from engine.judge.local.feed import Feed
from engine.judge.outcome import SLACK_S
from engine.judge.verdict import SampleResult, TestResult, Verdict

PLANS, PLAN_BYTES = 512, 64 << 20  # plans a worker holds, least recently used go first


def worker_cpus(config: JudgeConfig) -> list[int] | None:
    """The CPU of each worker slot, or None when workers float (see `JudgeConfig.pin_workers`)."""
    return spawn.worker_cpus(config.workers, config.pin_workers, given_cpus())


class _WorkerProcess:
    def __init__(self, slot: int, cpu: int | None, python: str) -> None:
        self.slot, self.cpu = slot, cpu
        self.proc = spawn.take(cpu, python)
        self.plans: collections.OrderedDict[int, int] = collections.OrderedDict()  # held: id → bytes sent
        self.plan_bytes = 0
        hello = wire.receive(self.proc.stdout.fileno())
        if hello is None:
            raise RuntimeError("sandbox worker failed to start")
        self.isolation: str = hello["hello"]
        self.level: str = hello["level"]
        self.pid: int = hello["pid"]

    def send(self, head: dict, plan: CasePlan) -> None:
        """The job; its plan too when this worker does not hold it (then the oldest go)."""
        if plan.id in self.plans:
            self.plans.move_to_end(plan.id)
            message = _encode({**head, "plan_id": plan.id})
        else:
            parts = _encode(plan.public) + _encode(plan.secret)
            head = {**head, "plan_id": plan.id, "new_plan": True, "forget": self._make_room(len(parts))}
            self.plans[plan.id] = len(parts)
            self.plan_bytes += len(parts)
            message = _encode(head) + parts
        wire.write_all(self.proc.stdin.fileno(), message)

    def _make_room(self, size: int) -> list[int]:
        forget = []
        while self.plans and (self.plan_bytes + size > PLAN_BYTES or len(self.plans) >= PLANS):
            gone, sent = self.plans.popitem(last=False)
            self.plan_bytes -= sent
            forget.append(gone)
        return forget

    def answer(self) -> dict:
        answer = wire.receive(self.proc.stdout.fileno())
        if answer is None:
            raise RuntimeError(f"sandbox worker {self.pid} died (exit {self.proc.poll()})")
        return answer

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()


# A worker that has not answered a job this long past the time its own guards allow (every test's
# wall limit and slack, and the sample's hard deadline) is hung: it is killed and replaced.
WATCHDOG_MARGIN_S = 2.0


def watchdog_s(head: dict) -> float:
    """How long a job may keep its worker: the worker's own hard deadline (`Collector.follow`) and a margin."""
    return (len(head["order"]) + 1) * (head["limits"]["wall_s"] + SLACK_S) + 5 + WATCHDOG_MARGIN_S


class LocalBackend:
    def __init__(self, config: JudgeConfig) -> None:
        self.config = config
        self._idle: queue.Queue[_WorkerProcess] = queue.Queue()
        self._all: list[_WorkerProcess] = []
        self._lock = threading.Lock()
        self._isolation = self._level = ""
        self._changed: str | None = None  # why this pool judges no more (a worker's level changed)
        self._cpus = worker_cpus(config)
        # Judge faults seen (a worker that died or hung, a fault in its machinery); each such job
        # is judged once more before its INTERNAL_ERROR stands.
        self.faults = 0

    def _start(self) -> None:
        with self._lock:
            if self._all:
                return
            if self._changed:
                raise IsolationChanged(self._changed)
            with ThreadPoolExecutor(self.config.workers) as pool:
                started = list(pool.map(self._spawn, range(self.config.workers)))
            levels = sorted({w.level for w in started} | ({self._level} if self._level else set()))
            if len(levels) > 1:  # the kernel refused some workers what it gave others (or a closed pool's)
                for w in started:
                    w.close()
                raise IsolationChanged(f"the judge's workers obtained different isolation levels ({', '.join(levels)}); "
                                       "one judge version cannot name them all\n  fix: " + _LEVEL_FIX)
            for w in started:
                self._all.append(w)
                self._idle.put(w)
            self._isolation, self._level = started[0].isolation, started[0].level

    def _spawn(self, slot: int) -> _WorkerProcess:
        return _WorkerProcess(slot, self._cpus[slot] if self._cpus else None, self.config.python or sys.executable)

    def isolation(self) -> str:
        self._start()
        return self._isolation

    def isolation_level(self) -> str:
        self._start()
        return self._level

    def run_stream(self, jobs: Iterable[JudgeJob], *, read_ahead: bool = True) -> Iterator[tuple[int, SampleResult]]:
        """(job index, result) as each job ends, every job on the first idle worker, from this one
        thread: it waits on the busy workers' answer pipes together and prepares the next jobs
        while they run (no thread per job, no hand-off between threads per sample). Jobs are read
        from `jobs` a few ahead of the workers (`read_ahead`), or only when a worker is idle (an
        iterable that may block waiting for its next item). Calls from several threads share
        the workers."""
        if self._changed:
            raise IsolationChanged(self._changed)
        feed = Feed(jobs, read_ahead=read_ahead)
        busy: dict[int, _Busy] = {}  # answer fd → the job its worker runs
        retried: set[int] = set()  # jobs judged again after a judge fault
        try:
            while feed.left or busy:
                if not busy:
                    self._start()
                for i, job, result in self._dispatch(feed, busy):
                    if self._again(feed, retried, i, job, result):
                        continue
                    yield i, result
                for fd in self._ready(feed, busy):
                    run = busy.pop(fd)
                    result = self._collect(run) if fd >= 0 else self._hung(run)
                    if self._again(feed, retried, run.i, run.job, result, run.head):
                        continue
                    yield run.i, result
        finally:
            for run in busy.values():  # abandoned or interrupted: their answers are never read
                try:
                    self._idle.put(self._replace(run.worker))
                except IsolationChanged:
                    pass  # raised at the next use; the exception already leaving here is the one to see

    def _again(self, feed: Feed, retried: set[int], i: int, job: JudgeJob, result: SampleResult,
               head: tuple[dict, CasePlan] | None = None) -> bool:
        """A judge fault: counted, and the job judged once more (first in line) before it stands."""
        if result.verdict is not Verdict.INTERNAL_ERROR:
            return False
        with self._lock:
            self.faults += 1
        if i in retried:
            return False
        retried.add(i)
        feed.prepared.appendleft((i, job, head))
        return True

    def _dispatch(self, feed: Feed, busy: dict) -> Iterator[tuple[int, JudgeJob, SampleResult]]:
        """Hand pending jobs to idle workers; wait for one only when nothing is in flight."""
        while feed.left:
            try:
                worker = self._idle.get(block=not busy)
            except queue.Empty:
                return
            i, job, (head, plan) = feed.next(self._prepare)
            try:
                worker.send(head, plan)
            except OSError as exc:
                self._idle.put(self._replace(worker))
                yield i, job, _internal(job, f"sandbox worker {worker.pid} died ({exc})", self._isolation)
                continue
            busy[worker.proc.stdout.fileno()] = _Busy(worker, i, job, (head, plan),
                                                      time.monotonic() + watchdog_s(head))

    def _ready(self, feed: Feed, busy: dict) -> list[int]:
        """The answer pipes that are readable; while none is, the next job is prepared. A job past
        its watchdog deadline comes back under -1 - its fd (its worker hung)."""
        if not busy:
            return []
        poller = select.poll()  # not select(): a trainer's process may hold fds past FD_SETSIZE
        for fd in busy:
            poller.register(fd, select.POLLIN)
        while True:
            first = min(run.deadline for run in busy.values())
            wait = 0 if feed.can_prepare else max(0.0, first - time.monotonic())
            ready = [fd for fd, _ in poller.poll(wait * 1000)]
            if ready:
                return ready
            now = time.monotonic()
            hung = [fd for fd, run in busy.items() if run.deadline <= now]
            if hung:
                for fd in hung:
                    busy[-1 - fd] = busy.pop(fd)
                return [-1 - fd for fd in hung]
            if feed.can_prepare:
                feed.prepare_ahead(self._prepare)

    def _hung(self, run: "_Busy") -> SampleResult:
        """A worker that outlived every guard of its job: killed and replaced; the job is a judge fault."""
        try:
            run.worker.proc.kill()
        except OSError:
            pass
        self._idle.put(self._replace(run.worker))
        return _internal(run.job, f"sandbox worker {run.worker.pid} hung (no answer in {watchdog_s(run.head[0]):.0f} s); "
                                  "replaced", self._isolation)

    def _collect(self, run: "_Busy") -> SampleResult:
        worker, job = run.worker, run.job
        try:
            answer = worker.answer()
        except (RuntimeError, OSError, ValueError) as exc:
            answer = {"internal": f"{exc}"}
            worker = self._replace(worker)
        self._idle.put(worker)
        if "internal" in answer:
            return _internal(job, answer["internal"], self._isolation)
        return _to_result(job, answer, self._isolation)

    def _prepare(self, job: JudgeJob) -> tuple[dict, CasePlan]:
        problem, cfg = job.problem, self.config
        if problem.kind == "stdio":
            plan = stdio_plan(problem, compare=cfg.compare, tol=cfg.float_tol)
        else:
            plan = function_plan(problem)
        cpu_s = problem.time_limit_s or cfg.timeout_s
        limits = {
            "cpu_s": cpu_s, "wall_s": cfg.wall_timeout_s or max(2 * cpu_s, cpu_s + 1.0),
            "memory_mb": problem.memory_limit_mb or cfg.memory_mb, "output_bytes": cfg.max_output_bytes,
            "max_processes": cfg.max_processes, "max_open_files": cfg.max_open_files, "tail_bytes": cfg.tail_bytes,
        }
        head = {"mode": problem.kind, "program": job.program, "limits": limits,
                "order": list(range(test_count(problem))), "stop_first": job.stop_on_first_failure,
                "max_failures": cfg.max_failures_reported}
        return head, plan

    def _replace(self, dead: _WorkerProcess) -> _WorkerProcess:
        """A fresh worker in the dead one's slot. One that comes up at another isolation level (the
        kernel out of user namespaces, say) stops this judge for good: the version its caller recorded
        before judging names the first workers' level, and a weaker one must never hide behind it."""
        dead.close()
        fresh = self._spawn(dead.slot)
        with self._lock:
            if fresh.level != self._level:
                fresh.close()
                self._all.remove(dead)
                self._changed = self._changed or (
                    f"a replacement judge worker obtained isolation {fresh.level!r}, not the {self._level!r} "
                    f"of the judge version already recorded ({fresh.isolation}); judging stops rather than "
                    "record numbers under the wrong level\n  fix: " + _LEVEL_FIX)
                raise IsolationChanged(self._changed)
            self._all[self._all.index(dead)] = fresh
        return fresh

    def close(self) -> None:
        with self._lock:
            for w in self._all:
                w.close()
            self._all.clear()
            self._idle = queue.Queue()  # closed workers must never be handed a job again


_LEVEL_FIX = ("rerun once the machine has user namespaces to spare (sysctl user.max_user_namespaces) "
              "and processes to spare; the numbers judged so far are kept")


def _encode(message: dict) -> bytes:
    return wire.frame(json.dumps(message).encode())


class _Busy(NamedTuple):
    worker: _WorkerProcess
    i: int  # the job's index in the stream
    job: JudgeJob
    head: tuple[dict, CasePlan]  # as prepared and sent
    deadline: float  # monotonic: past it the worker is hung (`watchdog_s`)


def _to_result(job: JudgeJob, answer: dict, isolation: str) -> SampleResult:
    total = answer["total"]
    return SampleResult(
        problem_id=job.problem.id,
        verdict=Verdict(answer["verdict"]),
        accepted=answer["verdict"] == "ACCEPTED",
        passed=answer["passed"],
        total=total,
        pass_ratio=answer["passed"] / total if total else 0.0,
        wall_s=answer["wall"],
        cpu_s=answer["cpu"],
        peak_mem_mb=answer["rss_kb"] / 1024,
        stdout_tail=answer["stdout_tail"],
        stderr_tail=answer["stderr_tail"],
        failures=[TestResult(**f) for f in answer["failures"]],
        isolation=isolation,
        message=answer.get("stopped") if answer.get("stopped") not in ("complete", None) else None,
    )


def _internal(job: JudgeJob, reason: str, isolation: str) -> SampleResult:
    return SampleResult(problem_id=job.problem.id, verdict=Verdict.INTERNAL_ERROR, accepted=False, passed=0,
                        total=test_count(job.problem), pass_ratio=0.0, isolation=isolation,
                        message=f"judge fault: {reason}")
