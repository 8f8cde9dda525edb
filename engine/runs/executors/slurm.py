"""Run launch scripts as Slurm batch jobs, from a login node, on storage every node mounts.

Each attempt is one `sbatch` job of a small batch script written next to the attempt's log
(`logs/attempt-N.sbatch`): it sets the run's environment, runs launch.sh in the run directory
and writes the script's exit code to `logs/slurm-<job id>.exit` of every run it did. Slurm
appends the job's output to the attempt log itself (`--output`, `--open-mode=append`), so
`status --watch` follows it as it runs and nothing is copied back. Evaluations of one checkpoint
that are ready together share one job, as they share one process on the local executor.

The job is named `rlvr-<run id>-a<attempt>` before it is submitted, so a runner that dies
between `sbatch` and writing the job id to lineage still finds it (`squeue -n`, in its run
directory: another copy of the study has jobs of the same names). Its state comes
from `squeue -t all`, which knows a finished job until the controller's MinJobAge passes; after
that the exit file alone tells how the script ended (no `sacct`: many clusters have no
accounting storage). An exit file decides, as launch.sh's status does on the local executor:
Slurm's end state is then detail (OUT_OF_MEMORY after the script exited 0 is a success), and
the attempt ended when the file was written (not when a restarted runner read it). Without one,
a job Slurm ended (TIMEOUT, PREEMPTED, NODE_FAIL, CANCELLED by anyone else, OUT_OF_MEMORY) is a
failed attempt whose reason carries Slurm's state and reason; submitted with `--no-requeue`,
Slurm never runs an attempt twice behind the runner's back.

The batch script (`slurm_script`) first takes its run directories' lock (one attempt at a time in
a run directory, whatever any runner believes), then writes `logs/slurm-<job id>.start` (the time
it began, on the node):
the attempt's time counts from there, not from its submission (`queues`), so a job PENDING for
hours adds nothing to the run's time, its cost or its ETA.
"""

from __future__ import annotations

import math
import os
import shlex
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Mapping, Optional, Sequence

from engine.errors import UserError
from engine.runs.executors import slurm_commands as slurm
from engine.runs.executors.base import LOG_DIR, Job, Started, run_environment
from engine.runs.executors.slurm_commands import JobState, SlurmUnreachable
from engine.runs.executors.slurm_jobs import cancel_confirmed, job_name_of, live_jobs_of, named_job
from engine.runs.executors.slurm_script import GROUPED, batch_script, exit_file_name
from engine.runs.lineage import RunRecord, now_iso, parse_iso


@dataclass(kw_only=True)
class _Tracked:
    job_id: str
    exit_files: tuple[Path, ...]  # where the batch script writes its exit code (one per run it does)
    start_files: tuple[Path, ...]  # where it writes the time it began
    seen: Optional[str] = None  # the last state written to the log
    gone_since: Optional[float] = None  # when squeue first no longer knew the job
    unreachable_since: Optional[float] = None


@dataclass(kw_only=True)
class SlurmExecutor:
    groups = True  # evaluations of one checkpoint ready together: one job, one model load
    queues = True  # a job may wait PENDING: its attempt's time starts when it begins (`Started.began_at`)
    shared_dir: Path  # storage every node mounts at the same path; the runs directory lies under it
    partition: Optional[str] = None
    account: Optional[str] = None
    qos: Optional[str] = None
    time_limit_h: dict[str, float] = field(default_factory=dict)  # by run kind, when the run sets none
    sbatch_args: tuple[str, ...] = ()
    python: str = field(default_factory=lambda: sys.executable)  # the interpreter jobs run (a shared venv)
    status_every_s: float = 2.0  # one squeue for all jobs at most this often: the controller is shared
    gone_after_s: float = 30.0  # a job squeue forgot and whose exit file never came: lost after this
    unreachable_after_s: float = 300.0  # a controller silent this long fails the runs it holds
    _states: dict[str, JobState] = field(init=False, default_factory=dict, repr=False)
    _tracked: dict[str, _Tracked] = field(init=False, default_factory=dict, repr=False)
    _looked_at: float = field(init=False, default=-math.inf, repr=False)
    _nodes: Optional[list[slurm.Node]] = field(init=False, default=None, repr=False)
    _where: Optional[str] = field(init=False, default=None, repr=False)  # the partition `nodes` are of

    def __post_init__(self) -> None:
        self.shared_dir = Path(self.shared_dir).resolve()
        self.sbatch_args = tuple(self.sbatch_args)

    # ------------------------------------------------------------ cluster
    def connect(self) -> None:
        """Check the client commands exist and the controller answers. Raises SlurmUnreachable."""
        absent = slurm.missing_clients()
        if absent:
            raise SlurmUnreachable(f"{', '.join(absent)} not found: {slurm.INSTALL_HINT}")
        known = slurm.partitions()
        if self.partition and self.partition not in [p.rstrip("*") for p in known]:
            raise SlurmUnreachable(f"the Slurm cluster has no partition {self.partition!r} (it has "
                                   f"{', '.join(known)}): fix executor.partition in the spec")

    def cluster_gpus(self) -> int:
        """The most GPUs a run may ask for: one node's (each run is one single-node job)."""
        return max((node.gpus for node in self.nodes()), default=0)

    def nodes(self) -> list[slurm.Node]:
        """The nodes of the partition sbatch will use: the spec's, else the cluster's default one
        (every partition's only where the cluster has no default: sbatch then refuses what none has)."""
        if self._nodes is None:
            self._where = self.partition or slurm.default_partition()
            self._nodes = slurm.nodes(self._where)
        return self._nodes

    # ------------------------------------------------------------ protocol
    def refusal(self, job: Job) -> Optional[str]:
        if not job.launch_script.is_file():
            return f"no launch script at {job.launch_script}"
        if not job.run_dir.resolve().is_relative_to(self.shared_dir):
            return f"its run directory {job.run_dir} is not under the shared directory {self.shared_dir}"
        cpus, gpus = max(job.cpus, 1), job.gpus
        self.nodes()
        where = (f"partition {self._where}" + ("" if self.partition else " (the default)")) if self._where \
            else "any partition"
        if gpus > self.cluster_gpus():
            return f"needs {gpus} GPU(s) but no node of {where} has more than {self.cluster_gpus()}"
        holding = [node for node in self.nodes() if node.cpus >= cpus and node.gpus >= gpus]
        if not holding:
            most = max((node.cpus for node in self.nodes() if node.gpus >= gpus), default=0)
            with_gpus = f" with {gpus} GPU(s)" if gpus else ""
            return f"needs {cpus} CPU(s) but no node of {where}{with_gpus} has that many (the most: {most})"
        hours = self._hours(job)
        if hours and all(node.max_h is not None and node.max_h * 60 < math.ceil(hours * 60) for node in holding):
            longest = max(node.max_h for node in holding if node.max_h is not None)
            return (f"asks for a time limit of {hours:g} h (--time={math.ceil(hours * 60)}) but {where} allows at most "
                    f"{longest:g} h: lower its resources.time_limit_h or executor.time_limit_h.{job.kind}, "
                    "or choose a partition that allows it")
        return None

    def fits(self, job: Job) -> bool:
        return True  # Slurm queues a job until a node has its resources

    def start(self, job: Job, *, attempt: int, log_path: Path, also: Sequence[Job] = ()) -> Started:
        name = job_name_of(job.id, attempt)
        for each in (job, *also):  # where the batch script writes each run's start and exit files
            (each.run_dir / LOG_DIR).mkdir(parents=True, exist_ok=True)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        script = log_path.with_suffix(".sbatch")
        script.write_text(batch_script(job, attempt, also, python=self.python))
        options = self._options(job, name, log_path)
        with open(log_path, "x") as log:  # "x": an earlier attempt's log is never truncated; Slurm appends
            log.write(f"# rlvr-run: {job.id} attempt {attempt} submitted from {socket.gethostname()} at {now_iso()} "
                      f"as Slurm job {name}: sbatch {shlex.join(options)}"
                      f"{'; with ' + ' '.join(j.id for j in also) if also else ''}\n")
        answer = slurm.submit(options, str(script), env=submit_environment(os.environ))
        job_id = answer.job_id or self._found_after(job, attempt, answer)
        return self._started(job, attempt, log_path, job_id, also)

    def _found_after(self, job: Job, attempt: int, answer: slurm.Submission) -> str:
        """The job of an sbatch that gave no id. Whatever it said (a lost answer: "Socket timed out",
        "Zero Bytes were transmitted or received", no answer in time; an odd one), it may have
        queued the job all the same: unfollowed, that job would run beside the next attempt. So it
        is looked for by its name in its run directory before the answer counts as a refusal."""
        name = job_name_of(job.id, attempt)
        found = None
        for wait in (0.0, 1.0, 2.0):  # the controller may list a job it just took a moment later
            time.sleep(wait)
            try:
                found = named_job(job, attempt)
            except SlurmUnreachable as exc:
                raise SlurmUnreachable(f"{answer.failure()}; looking for the job by name failed too ({exc}): "
                                       f"if Slurm queued it all the same, `squeue -n {name}` shows it: scancel it "
                                       "before running the study again") from exc
            if found is not None or answer.returncode > 0 and not isinstance(answer.failure(), SlurmUnreachable):
                break
        if found is None:
            raise answer.failure()
        return found.job_id

    def poll(self, started: Started) -> Optional[int]:
        """None while the job is queued or running, or while its end is not known yet (Slurm forgot
        it less than `gone_after_s` ago, the controller is silent less than `unreachable_after_s`).
        Else, exactly one of:

        - launch.sh's own exit status from the exit file (0 for a group's process: each run's own
          outputs decide), or minus the signal Slurm killed it by when Slurm ended the job
          (TIMEOUT, PREEMPTED, CANCELLED: the batch script records launch.sh's end all the same);
        - `-SIGTERM`: Slurm ended the job (CANCELLED, TIMEOUT, PREEMPTED, DEADLINE) before the
          batch script could record anything;
        - 1 with `detail`: the job is lost (unknown to the controller, no exit file), its node or
          its batch script failed (NODE_FAIL, BOOT_FAIL, OUT_OF_MEMORY, FAILED without an exit
          file), or the controller stopped answering;
        - 0: Slurm says COMPLETED (the batch script exited 0) and the exit file lags (NFS).

        `ended_at` is when the job ended as Slurm or the batch script recorded it, not when this
        runner looked (an attempt that ended unwatched)."""
        tracked: _Tracked = started.handle
        try:
            state = self._state_of(tracked.job_id)
        except SlurmUnreachable as exc:
            return self._unreachable(started, tracked, exc)
        tracked.unreachable_since = None
        started.began_at = started.began_at or _began_at(tracked)
        if state is not None and not state.ended:
            self._note(started, tracked, state)
            return None
        code, grouped, ended_at = _exit_code(tracked)
        if code is not None:  # launch.sh's own status decides; how Slurm ended the job is detail
            details = []
            if state is not None:
                self._note(started, tracked, state)
                if state.state != ("COMPLETED" if code == 0 else "FAILED"):  # what Slurm says of such an exit
                    details.append(f"Slurm job {tracked.job_id} {state.describe()} after launch.sh exited with {code}")
            if state is not None and state.state in slurm.KILLED and code > 128:
                code = -(code - 128)  # bash's 128+n: launch.sh died of the signal Slurm ends jobs with
            if grouped and code:
                # A group's process fails when any of its runs did: each run's own outputs decide (as
                # the scheduler does for a group it launched), also for runs re-attached one by one.
                details.append(f"Slurm job {tracked.job_id}'s process for the group exited with {code}")
                code = 0
            started.detail = "; ".join(details) or None
            started.ended_at = ended_at
            return code
        if state is None:  # forgotten by the controller (MinJobAge) or never known
            now = time.monotonic()
            tracked.gone_since = tracked.gone_since or now
            if now - tracked.gone_since < self.gone_after_s:
                return None
            started.detail = f"Slurm job {tracked.job_id} is unknown to the controller and left no exit file"
            started.ended_at = slurm.end_times([tracked.job_id]).get(tracked.job_id)
            return 1
        tracked.gone_since = None
        started.ended_at = slurm.end_times([tracked.job_id]).get(tracked.job_id)  # where accounting exists
        if state.state in slurm.KILLED:
            self._note(started, tracked, state)
            started.detail = f"Slurm job {tracked.job_id} {state.describe()}"
            # Slurm ends a job with SIGTERM, then SIGKILL after KillWait; a lost node says nothing.
            return -int(signal.SIGTERM) if state.state in ("CANCELLED", "TIMEOUT", "PREEMPTED", "DEADLINE") else 1
        if state.state == "FAILED":  # the batch script never ran to its end (a bad node)
            started.detail = f"Slurm job {tracked.job_id} {state.describe()}"
            return 1
        return 0  # COMPLETED is exit 0; an exit file on NFS may lag its job

    def stop(self, running: list[Started], *, grace_s: float) -> None:
        """scancel the jobs, checked: a job still alive after it (or whose fate the controller would
        not tell) is said in its attempt's `detail`, so its run's reason does not claim it ended."""
        survivors = cancel_confirmed(sorted({s.handle.job_id for s in running}), grace_s)
        for started in running:
            job_id = started.handle.job_id
            if job_id in survivors:
                started.detail = f"Slurm job {job_id} {survivors[job_id]}: `scancel {job_id}` it"
            self._tracked.pop(job_id, None)

    def reattach(self, record: RunRecord, job: Job, *, log_path: Path) -> Optional[Started]:
        try:
            if record.job_id:
                state = slurm.job_states([record.job_id]).get(record.job_id)
                job_id = record.job_id
            else:  # died between sbatch and lineage: the name was fixed before submission
                state = named_job(job, record.attempt)
                job_id = state.job_id if state else None
        except SlurmUnreachable as exc:
            raise UserError(f"run {record.id} was left running on Slurm, whose controller does not answer "
                            f"({exc}); start the runner again once it does") from exc
        if job_id is None or (state is None and not (job.run_dir / LOG_DIR / exit_file_name(job_id)).is_file()):
            return None
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "a") as log:
            log.write(f"# rlvr-run: re-attached to Slurm job {job_id} ({state.describe() if state else 'ended'}) "
                      f"from {socket.gethostname()} at {now_iso()}\n")
        return self._started(job, record.attempt, log_path, job_id, ())

    def reap(self, record: RunRecord, *, grace_s: float) -> int:
        """Cancel every job of the run still alive (by its recorded id, and by the name of each of its
        attempts in its run directory), and see them end: nothing else may write there meanwhile.
        How many were cancelled; a job that survives is a UserError (nothing is submitted)."""
        try:
            live = live_jobs_of(record)
        except SlurmUnreachable as exc:
            raise UserError(f"run {record.id} may still have a Slurm job, and the controller does not answer "
                            f"({exc}); start the runner again once it does") from exc
        survivors = cancel_confirmed(sorted(live), max(grace_s, 30.0))
        if survivors:
            said = "; ".join(f"job {i} {why}" for i, why in survivors.items())
            raise UserError(f"run {record.id}'s earlier Slurm job would write its run directory beside a new one: "
                            f"{said}\n  fix: `scancel {' '.join(survivors)}`, wait until `squeue -j "
                            f"{','.join(survivors)}` shows it ended, and run again")
        return len(live)

    # ------------------------------------------------------------ helpers
    def _options(self, job: Job, name: str, log_path: Path) -> list[str]:
        options = [f"--job-name={name}", f"--output={log_path}", "--open-mode=append", f"--chdir={job.run_dir}",
                   "--nodes=1", "--ntasks=1", f"--cpus-per-task={max(job.cpus, 1)}", "--no-requeue"]
        if job.gpus:
            options.append(f"--gres=gpu:{job.gpus}")
        if job.memory_gb:
            options.append(f"--mem={math.ceil(job.memory_gb * 1024)}M")
        hours = self._hours(job)
        if hours:
            options.append(f"--time={math.ceil(hours * 60)}")  # minutes: the one form every release reads
        for flag, value in (("partition", self.partition), ("account", self.account), ("qos", self.qos)):
            if value:
                options.append(f"--{flag}={value}")
        return options + list(self.sbatch_args)

    def _hours(self, job: Job) -> Optional[float]:
        """The job's time limit: the run's own, else the executor's for its kind; None: the partition's."""
        return job.time_limit_h or self.time_limit_h.get(job.kind)

    def _started(self, job: Job, attempt: int, log_path: Path, job_id: str, also: Sequence[Job]) -> Started:
        tracked = self._tracked.get(job_id) or _Tracked(
            job_id=job_id, exit_files=tuple(j.run_dir / LOG_DIR / exit_file_name(job_id) for j in (job, *also)),
            start_files=tuple(j.run_dir / LOG_DIR / f"slurm-{job_id}.start" for j in (job, *also)))
        self._tracked[job_id] = tracked
        self._looked_at = -math.inf  # the next poll asks squeue about the new job
        return Started(job=job, attempt=attempt, pid=None, log_path=log_path, job_id=job_id, handle=tracked)

    def _state_of(self, job_id: str) -> Optional[JobState]:
        """The job's state from one squeue for every followed job, at most every `status_every_s`."""
        now = time.monotonic()
        if now - self._looked_at >= self.status_every_s:
            self._states = slurm.job_states(sorted(self._tracked))
            self._looked_at = now
        return self._states.get(job_id)

    def _note(self, started: Started, tracked: _Tracked, state: JobState) -> None:
        """Slurm's state changes go into the attempt log (PENDING (Resources) → RUNNING → TIMEOUT)."""
        said = state.describe()
        started.queue_state = said
        if said != tracked.seen:
            tracked.seen = said
            with open(started.log_path, "a") as log:
                log.write(f"# rlvr-run: Slurm job {tracked.job_id} {said} at {now_iso()}\n")

    def _unreachable(self, started: Started, tracked: _Tracked, exc: Exception) -> Optional[int]:
        now = time.monotonic()
        tracked.unreachable_since = tracked.unreachable_since or now
        if now - tracked.unreachable_since < self.unreachable_after_s:
            return None
        started.detail = (f"the Slurm controller did not answer for {self.unreachable_after_s:.0f} s ({exc}); "
                          f"Slurm job {tracked.job_id}'s fate is unknown")
        return 1


def submit_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """What sbatch passes on to the job (its default, `--export=ALL`): the run's environment, less
    the variables of a Slurm job the runner itself may run in (an salloc on the login node), whose
    memory and task settings would otherwise leak into every job it submits."""
    return {k: v for k, v in run_environment(environ).items() if not k.startswith("SLURM_") or k == "SLURM_CONF"}



def _exit_code(tracked: _Tracked) -> tuple[Optional[int], bool, Optional[str]]:
    """launch.sh's own status as the batch script recorded it (as the local executor sees it),
    whether it did a group of runs, and when it ended (the file's time); (None, False, None) before."""
    for path in tracked.exit_files:
        try:
            words, written = path.read_text().split(), path.stat().st_mtime
        except OSError:
            continue
        if words and words[0].lstrip("-").isdigit():
            ended = datetime.fromtimestamp(written, timezone.utc).isoformat(timespec="milliseconds")
            return int(words[0]), words[1:] == [GROUPED.strip()], ended
    return None, False, None


def _began_at(tracked: _Tracked) -> Optional[str]:
    """When the job's batch script began, as it wrote it; None before (PENDING) or never."""
    for path in tracked.start_files:
        try:
            stamp = path.read_text().strip()
            parse_iso(stamp)
        except (OSError, ValueError):
            continue
        if stamp:
            return stamp
    return None
