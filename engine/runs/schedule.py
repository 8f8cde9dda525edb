"""Execute jobs in DAG order on an executor, recording every state change in lineage.

A job is ready when all its parents succeeded. A failure blocks every
descendant; independent branches go on. SIGINT, SIGTERM, SIGHUP and SIGPIPE stop
every running script's process group and record `cancelled`; queued jobs stay queued.
Runs a dead runner left `running` are reaped and marked failed first, then
re-queued with the other unfinished runs: re-running resumes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

from engine.runs.completion import UNCHANGED, check_completion, unchanged
from engine.runs.executors.base import LOG_DIR, Executor, Job, Started
from engine.runs.ingest import ingest
from engine.runs.lineage import Lineage, RunRecord, RunState, began_reason, open_lineage, running_reason
from engine.runs.recovery import recover_dead_runs

OnChange = Callable[[str, RunState, str], None]  # run id, new state, reason
OnResume = Callable[[str, str], None]  # run id, what it resumes and from where ("resuming from checkpoint-40, attempt 2")
INTERRUPTED_EXIT = 130
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE)
S = RunState


@dataclass(kw_only=True)
class ExecutionResult:
    states: dict[str, RunState]
    interrupted_by: Optional[int] = None  # the signal that stopped the runner

    @property
    def exit_code(self) -> int:
        if self.interrupted_by is not None:
            return INTERRUPTED_EXIT
        return 1 if any(s in (S.failed, S.blocked) for s in self.states.values()) else 0

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = defaultdict(int)
        for state in self.states.values():
            out[state.value] += 1
        return dict(out)


def execute(
    jobs: list[Job],
    lineage: Lineage,
    executor: Executor,
    *,
    heartbeat_s: float = 5.0,
    grace_s: float = 5.0,
    stale_s: float = 60.0,
    poll_s: float = 0.05,
    on_change: Optional[OnChange] = None,
    on_resume: Optional[OnResume] = None,
) -> ExecutionResult:
    """Run `jobs` (topologically ordered, already recorded in lineage); the caller holds the runs lock."""
    _, attached = recover_dead_runs(lineage, executor, stale_s=stale_s, grace_s=grace_s, jobs=jobs)
    sched = _Scheduler(jobs=jobs, lineage=lineage, executor=executor, on_change=on_change, grace_s=grace_s,
                       on_resume=on_resume)
    with _trap_signals() as caught, _Heartbeat(lineage.path, heartbeat_s, sched.live_ids):
        sched.caught = caught
        try:
            sched.prepare(attached)
            while sched.busy() and not caught:
                sched.step()
                time.sleep(poll_s)
        finally:
            if sched.running:
                why = f"interrupted by {signal.Signals(caught[0]).name}" if caught else "runner error"
                sched.cancel_running(why, grace_s=grace_s)
    return ExecutionResult(states=sched.final_states(), interrupted_by=caught[0] if caught else None)


def resume_point(job: Job) -> str:
    """Where a resumed run's launch script picks up, from its run directory: the newest complete
    checkpoint of a training run (trl: trainer_state.json is written last; verl: the step its
    latest_checkpointed_iteration.txt names), the samples an evaluation
    recorded; else the start."""
    checkpoints = job.run_dir / "checkpoints"
    saved = [p for p in checkpoints.glob("checkpoint-*")
             if p.name.split("-")[-1].isdigit() and (p / "trainer_state.json").is_file()]
    if saved:
        return max(saved, key=lambda p: int(p.name.split("-")[-1])).name
    # verl names the step it resumes from (resume_mode auto) once that step's save is complete
    with contextlib.suppress(OSError, ValueError):
        step = int((checkpoints / "latest_checkpointed_iteration.txt").read_text().strip())
        if (checkpoints / f"global_step_{step}").is_dir():
            return f"global_step_{step}"
    samples = 0
    for path in (job.run_dir / "outputs" / "generations").glob("*.jsonl"):
        with contextlib.suppress(OSError), open(path, "rb") as fh:
            samples += sum(1 for _ in fh)
    return f"{samples} recorded sample(s)" if samples else "the start"


def next_attempt(run_dir: Path, recorded: int) -> int:
    """One past both lineage's count and the logs on disk, so no attempt's log is reused."""
    on_disk = [int(p.stem.split("-")[1]) for p in (run_dir / LOG_DIR).glob("attempt-*.log") if p.stem.split("-")[1].isdigit()]
    return max([recorded, *on_disk]) + 1


@dataclass(kw_only=True)
class _Scheduler:
    jobs: list[Job]
    lineage: Lineage
    executor: Executor
    on_change: Optional[OnChange] = None
    on_resume: Optional[OnResume] = None
    grace_s: float = 5.0
    caught: list[int] = field(default_factory=list)  # signals that stop the runner (a closed reader: SIGPIPE)
    state: dict[str, RunState] = field(default_factory=dict)
    waiting: list[str] = field(default_factory=list)
    running: dict[str, Started] = field(default_factory=dict)
    # Jobs done by another job's process (one model load for evaluations of one checkpoint): by the
    # process's job, each member with its own attempt log; each keeps its own state and completion.
    members: dict[str, list[Started]] = field(default_factory=dict)
    began: set[tuple[str, int]] = field(default_factory=set)  # (run, attempt) whose queued job began
    queue_said: dict[str, str] = field(default_factory=dict)  # run → the queue state last recorded
    _live_lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.by_id = {j.id: j for j in self.jobs}
        self.children: dict[str, list[str]] = defaultdict(list)
        for job in self.jobs:
            for parent in job.parents:
                self.children[parent].append(job.id)

    def live_ids(self) -> list[str]:
        with self._live_lock:
            return [*self.running, *(m.job.id for group in self.members.values() for m in group)]

    def busy(self) -> bool:
        return bool(self.waiting or self.running)

    def final_states(self) -> dict[str, RunState]:
        return {job.id: self.state[job.id] for job in self.jobs}

    def _set(self, run_id: str, to: RunState, reason: str, **fields: object) -> RunRecord:
        rec = self.lineage.set_state(run_id, to, reason, **fields)
        self.state[run_id] = to
        if self.on_change:
            try:
                self.on_change(run_id, to, reason)
            except BrokenPipeError:  # the output's reader is gone (`| head`): stop as on SIGPIPE
                self.on_change = None
                self.caught.append(signal.SIGPIPE)
        return rec

    def prepare(self, attached: Sequence[Started] = ()) -> None:
        taken_over = {started.job.id: started for started in attached}
        for job in self.jobs:
            rec = self.lineage.run(job.id)
            self.state[job.id] = rec.state
            if job.id in taken_over:
                with self._live_lock:
                    self.running[job.id] = taken_over[job.id]
                found = taken_over[job.id]
                self._say(job.id, f"re-attached to its job {found.job_id or found.pid}, attempt {found.attempt}")
                continue
            if rec.state is S.succeeded:
                continue
            if rec.state in (S.failed, S.cancelled, S.blocked):
                # An earlier attempt's job may outlive what lineage says of it (a scancel that did not
                # take, a job queued by a lost sbatch answer): it is stopped before a new one is submitted.
                if rec.attempt and getattr(self.executor, "queues", False):
                    self.executor.reap(rec, grace_s=self.grace_s)
                self._set(job.id, S.queued, f"resumed after {rec.state.value}: {rec.reason or ''}".rstrip(": "))
                self._say(job.id, f"resuming from {resume_point(job)}, attempt {next_attempt(job.run_dir, rec.attempt)}")
            elif rec.state is S.planned:
                self._set(job.id, S.queued, "queued")
            refusal = self.executor.refusal(job)
            if refusal:
                self._set(job.id, S.failed, f"refused before start: {refusal}")
            else:
                self.waiting.append(job.id)
        for run_id in list(self.waiting):
            self._block_if_upstream_lost(run_id)
        for run_id, st in list(self.state.items()):
            if st is S.failed:
                self._block_descendants(run_id, "failed")

    def _say(self, run_id: str, what: str) -> None:
        if self.on_resume is not None:
            try:
                self.on_resume(run_id, what)
            except BrokenPipeError:
                self.on_resume = None
                self.caught.append(signal.SIGPIPE)

    def _parent_state(self, parent: str) -> RunState:
        if parent not in self.state:
            self.state[parent] = self.lineage.run(parent).state
        return self.state[parent]

    def _block_if_upstream_lost(self, run_id: str) -> None:
        outside = [p for p in self.by_id[run_id].parents if p not in self.by_id]
        lost = [p for p in outside if self._parent_state(p) is not S.succeeded]
        if lost and run_id in self.waiting:
            self.waiting.remove(run_id)
            self._set(run_id, S.blocked, f"upstream {lost[0]} is {self.state[lost[0]].value} and not part of this execution")
            self._block_descendants(run_id, "blocked")

    def _block_descendants(self, run_id: str, why: str) -> None:
        for child in self.children[run_id]:
            if child in self.waiting:
                self.waiting.remove(child)
                self._set(child, S.blocked, f"upstream {run_id} {why}")
                self._block_descendants(child, "blocked")

    def step(self) -> None:
        for run_id, started in list(self.running.items()):
            code = self.executor.poll(started)
            if started.began_at and (run_id, started.attempt) not in self.began:
                self._began(started)
            if started.queue_state and self.queue_said.get(run_id) != started.queue_state:
                self.queue_said[run_id] = started.queue_state
                for each in (started, *self.members.get(run_id, [])):
                    self.lineage.record_queue_state(each.job.id, started.queue_state)
            if code is not None:
                self._finish(started, code)
        for run_id in list(self.waiting):
            job = self.by_id.get(run_id)
            if run_id in self.waiting and self._ready(job) and self.executor.fits(job):
                self._launch(job, self._group_of(job))

    def _began(self, started: Started) -> None:
        """A queued attempt's job began: its time (and its members') counts from then (`timing`)."""
        self.began.add((started.job.id, started.attempt))
        for each in (started, *self.members.get(started.job.id, [])):
            self.lineage.record_began(each.job.id, started.began_at, began_reason(each.attempt))

    def _ready(self, job: Job) -> bool:
        return all(self._parent_state(p) is S.succeeded for p in job.parents)

    def _group_of(self, job: Job) -> list[Job]:
        """The other jobs of `job`'s group that are ready now: they run in its process."""
        if job.group is None or not getattr(self.executor, "groups", False):
            return []
        return [other for run_id in self.waiting if run_id != job.id
                and (other := self.by_id[run_id]).group == job.group and self._ready(other)]

    def _launch(self, job: Job, also: Sequence[Job] = ()) -> None:
        attempts = {}
        queued = getattr(self.executor, "queues", False)  # its job may wait in a queue before it begins
        for each in (job, *also):
            self.waiting.remove(each.id)
            attempts[each.id] = next_attempt(each.run_dir, self.lineage.run(each.id).attempt)
            # `running` is recorded before the process exists, so a crash in between
            # leaves a run the next invocation reaps, never a duplicate launch.
            leader = job.id if each is not job else None
            self._set(each.id, S.running, running_reason(attempts[each.id], leader, queued=queued),
                      attempt=attempts[each.id], pid=None, job_id=None, leader=leader, queued=queued)
        log_path = job.run_dir / LOG_DIR / f"attempt-{attempts[job.id]}.log"
        try:
            started = self.executor.start(job, attempt=attempts[job.id], log_path=log_path, also=also) if also \
                else self.executor.start(job, attempt=attempts[job.id], log_path=log_path)
        except OSError as exc:
            for each in (job, *also):
                self._set(each.id, S.failed, f"could not start {job.launch_script}: {exc}")
                self._block_descendants(each.id, "failed")
            return
        members = [_member_of(m, attempts[m.id], job, started) for m in also]
        with self._live_lock:
            self.running[job.id] = started
            if members:
                self.members[job.id] = members
        for each in (started, *members):
            self.lineage.record_launch(each.job.id, started.pid, started.job_id)

    def _finish(self, started: Started, code: int) -> None:
        with self._live_lock:
            del self.running[started.job.id]
            members = self.members.pop(started.job.id, [])
        for each in (started, *members):
            each.ended_at = started.ended_at  # the process's end is its members' too
            self._finish_one(each, code, grouped=bool(members))

    def _finish_one(self, started: Started, code: int, *, grouped: bool) -> None:
        job = started.job
        log = started.log_path
        # In a group each run's outputs decide: the process exits non-zero if any of its runs failed.
        if code == 0 or (grouped and code > 0):
            problem = check_completion(job.kind, job.run_dir)
            if problem is None:
                ingest(self.lineage, job.id, job.kind, job.run_dir)
                # A run that changed nothing succeeds (it is a result), and its reason says so for the pages.
                why = unchanged(job.kind, job.run_dir)
                self._set(job.id, S.succeeded, "exit 0, outputs complete" + (f"; {UNCHANGED}{why}" if why else ""),
                          at=started.ended_at, exit_code=0)
                return
            reason = f"completion check failed: {problem}"
        elif code < 0:
            reason = f"launch.sh killed by {signal.Signals(-code).name}; see {log}"
        else:
            reason = f"launch.sh exited with {code}{_last_line(log)}; see {log}"
        if started.detail:
            reason = f"{reason} ({started.detail})"
        self._set(job.id, S.failed, reason, at=started.ended_at, exit_code=code)
        self._block_descendants(job.id, "failed")

    def cancel_running(self, why: str, *, grace_s: float) -> None:
        """Stop every running attempt and record each run `cancelled` (whatever stopping raised:
        no run stays `running` behind a runner that is gone); what survived is in its reason."""
        running = list(self.running.values())
        try:
            self.executor.stop(running, grace_s=grace_s)
        finally:
            for started in running:
                with self._live_lock:
                    del self.running[started.job.id]
                    members = self.members.pop(started.job.id, [])
                for each in (started, *members):
                    self._set(each.job.id, S.cancelled, f"{why} ({started.detail})" if started.detail else why)


def _member_of(job: Job, attempt: int, leader: Job, started: Started) -> Started:
    """A job done in `leader`'s process: its own attempt log says where the work is logged."""
    log_path = job.run_dir / LOG_DIR / f"attempt-{attempt}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "x") as log:  # "x": an earlier attempt's log is never truncated
        log.write(f"# rlvr-run: {job.id} attempt {attempt} runs in the process of {leader.id} (one model load "
                  f"for both); its log: {started.log_path}\n")
    return Started(job=job, attempt=attempt, pid=started.pid, log_path=started.log_path, job_id=started.job_id)


def _last_line(log: Path, limit: int = 200) -> str:
    """`: <the log's last non-empty line>` — usually the error that ended the script."""
    try:
        with open(log, "rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - 4096))
            lines = [ln.strip() for ln in fh.read().decode("utf-8", "replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    if not lines or lines[-1].startswith("# rlvr-run:"):
        return ""
    return f": {lines[-1][:limit]}"


@contextlib.contextmanager
def _trap_signals() -> Iterator[list[int]]:
    """Turn SIGINT, SIGTERM, SIGHUP (the terminal closed) and SIGPIPE (the output's reader is gone:
    `rlvr-run SPEC | head`) into a flag the scheduling loop checks (main thread only): each ends the
    runner the same way, its runs stopped and recorded."""
    caught: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield caught
        return
    previous = {sig: signal.signal(sig, lambda signum, _frame: caught.append(signum)) for sig in STOP_SIGNALS}
    try:
        yield caught
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class _Heartbeat:
    """Every `interval` seconds, stamp the running runs in lineage (own connection, own thread)."""

    def __init__(self, path: Path, interval: float, live_ids: Callable[[], list[str]]) -> None:
        self.path, self.interval, self.live_ids = path, interval, live_ids
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="rlvr-heartbeat", daemon=True)

    def __enter__(self) -> "_Heartbeat":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _beat(self) -> None:
        with open_lineage(self.path) as lineage:
            while not self._stop.wait(self.interval):
                try:
                    lineage.heartbeat(self.live_ids())
                except sqlite3.OperationalError:
                    continue  # a busy database skips one beat; the next one catches up
