"""The `local` backend: a pool of pre-warmed sandbox workers on this machine.

Workers are small interpreters (`python -I -S -c <import engine.judge.local.worker; main()> UID`),
started once — never forked from this (possibly large) process — each with
its namespaces already set up and a sandbox uid of its own. Jobs go to idle
workers over pipes (length-prefixed JSON); independent samples run on all
workers at once. A worker keeps the plans (a problem's tests) it was sent, so
each crosses the pipe once per worker. A worker that dies or stops answering is
replaced and the job is reported as INTERNAL_ERROR (a judge fault, never a model
verdict).
"""

from __future__ import annotations

import collections
import itertools
import json
import os
import queue
import select
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence

from engine.judge.cases import CasePlan, function_plan, stdio_plan
from engine.judge.config import JudgeConfig, JudgeJob, test_count
from engine.judge.local import wire
from engine.judge.local.worker import REPO
from engine.judge.verdict import SampleResult, TestResult, Verdict

# Imported, not run as a script: a script is compiled from source at every start, and the memory
# that compiling churns stays in the worker's heap, which every fork copies (≈ 2 MB here).
WORKER_MAIN = f"import sys; sys.path.insert(0, {REPO!r}); from engine.judge.local.worker import main; main()"
BASE_UID = 61000  # sandbox uids start here; unused by any account on a normal system
UID_BLOCKS = 4096  # judges in one machine get different blocks of SLOTS uids (by pid)
SLOTS = 64
PLANS, PLAN_BYTES = 512, 64 << 20  # plans a worker holds, least recently used go first


_slots = itertools.count()  # every worker of this process gets its own slot (and uid)


def sandbox_uid() -> int:
    """A uid no other live worker shares (unless judge pids collide modulo UID_BLOCKS or one process
    starts more than SLOTS workers): RLIMIT_NPROC is counted per uid machine-wide, and the
    no-PID-namespace fallback kills every process of the uid, so two judges (a trainer and an
    evaluator, say, or two Judge objects in one process) must never share one."""
    return BASE_UID + (os.getpid() % UID_BLOCKS) * SLOTS + next(_slots) % SLOTS


def worker_cpus(config: JudgeConfig) -> list[int] | None:
    """The CPU of each worker slot, or None when workers float (see `JudgeConfig.pin_workers`)."""
    allowed = sorted(os.sched_getaffinity(0))
    pin = config.pin_workers if config.pin_workers is not None else config.workers >= len(allowed)
    return [allowed[slot % len(allowed)] for slot in range(config.workers)] if pin else None


class _WorkerProcess:
    def __init__(self, slot: int, cpu: int | None) -> None:
        self.slot, self.cpu = slot, cpu
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", WORKER_MAIN, str(sandbox_uid()), str(-1 if cpu is None else cpu)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env={"PYTHONHASHSEED": "0", "PATH": os.defpath},
            close_fds=True,
        )
        self.plans: collections.OrderedDict[int, int] = collections.OrderedDict()  # held: id → bytes sent
        self.plan_bytes = 0
        hello = wire.receive(self.proc.stdout.fileno())
        if hello is None:
            raise RuntimeError("sandbox worker failed to start")
        self.isolation: str = hello["hello"]
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


class LocalBackend:
    def __init__(self, config: JudgeConfig) -> None:
        self.config = config
        self._idle: queue.Queue[_WorkerProcess] = queue.Queue()
        self._all: list[_WorkerProcess] = []
        self._lock = threading.Lock()
        self._isolation = ""
        self._cpus = worker_cpus(config)

    def _start(self) -> None:
        with self._lock:
            if self._all:
                return
            with ThreadPoolExecutor(self.config.workers) as pool:
                started = list(pool.map(self._spawn, range(self.config.workers)))
            for w in started:
                self._all.append(w)
                self._idle.put(w)
            self._isolation = started[0].isolation

    def _spawn(self, slot: int) -> _WorkerProcess:
        return _WorkerProcess(slot, self._cpus[slot] if self._cpus else None)

    def isolation(self) -> str:
        self._start()
        return self._isolation

    def run_many(self, jobs: Sequence[JudgeJob], progress: Callable[[int], None] | None = None) -> list[SampleResult]:
        """Every job on the first idle worker, from this one thread: it waits on the busy workers'
        answer pipes together and prepares the next jobs while they run (no thread per job, no
        hand-off between threads per sample). Calls from several threads share the workers."""
        self._start()
        batch = _Batch(jobs)
        busy: dict[int, tuple[_WorkerProcess, int]] = {}  # answer fd → (worker, job index)
        try:
            while batch.left or busy:
                self._dispatch(batch, busy)
                for fd in self._ready(batch, busy):
                    worker, i = busy[fd]
                    batch.results[i] = self._collect(worker, jobs[i])
                    del busy[fd]
                    if progress:
                        progress(1)
        finally:
            for worker, _ in busy.values():  # interrupted: their answers will never be read
                self._idle.put(self._replace(worker))
        return batch.results

    def _dispatch(self, batch: "_Batch", busy: dict) -> None:
        """Hand pending jobs to idle workers; wait for one only when nothing is in flight."""
        while batch.left:
            try:
                worker = self._idle.get(block=not busy)
            except queue.Empty:
                return
            i, (head, plan) = batch.next(self._prepare)
            try:
                worker.send(head, plan)
            except OSError as exc:
                batch.results[i] = _internal(batch.jobs[i], f"sandbox worker {worker.pid} died ({exc})", self._isolation)
                self._idle.put(self._replace(worker))
                continue
            busy[worker.proc.stdout.fileno()] = (worker, i)

    def _ready(self, batch: "_Batch", busy: dict) -> list[int]:
        """The answer pipes that are readable; while none is, the next job is prepared."""
        poller = select.poll()  # not select(): a trainer's process may hold fds past FD_SETSIZE
        for fd in busy:
            poller.register(fd, select.POLLIN)
        while True:
            ready = [fd for fd, _ in poller.poll(0 if batch.can_prepare else None)]
            if ready or not batch.can_prepare:
                return ready
            batch.prepare_ahead(self._prepare)

    def _collect(self, worker: _WorkerProcess, job: JudgeJob) -> SampleResult:
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
        dead.close()
        fresh = self._spawn(dead.slot)
        with self._lock:
            self._all[self._all.index(dead)] = fresh
        return fresh

    def close(self) -> None:
        with self._lock:
            for w in self._all:
                w.close()
            self._all.clear()


def _encode(message: dict) -> bytes:
    return wire.frame(json.dumps(message).encode())


class _Batch:
    """One `run_many` call's jobs: which are left, the next ones prepared, their results."""

    AHEAD = 4  # jobs prepared (plan looked up or built) before a worker asks for them

    def __init__(self, jobs: Sequence[JudgeJob]) -> None:
        self.jobs = jobs
        self.results: list[SampleResult] = [None] * len(jobs)  # type: ignore[list-item]
        self.prepared: collections.deque[tuple[dict, CasePlan]] = collections.deque()
        self.sent = 0

    @property
    def left(self) -> bool:
        return self.sent < len(self.jobs)

    @property
    def can_prepare(self) -> bool:
        return len(self.prepared) < self.AHEAD and self.sent + len(self.prepared) < len(self.jobs)

    def prepare_ahead(self, prepare: Callable[[JudgeJob], tuple[dict, CasePlan]]) -> None:
        self.prepared.append(prepare(self.jobs[self.sent + len(self.prepared)]))

    def next(self, prepare: Callable[[JudgeJob], tuple[dict, CasePlan]]) -> tuple[int, tuple[dict, CasePlan]]:
        if not self.prepared:
            self.prepare_ahead(prepare)
        self.sent += 1
        return self.sent - 1, self.prepared.popleft()


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
