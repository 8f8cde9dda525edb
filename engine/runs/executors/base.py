"""What the scheduler asks of an executor, and the jobs it hands over.

The scheduler (`engine.runs.schedule.execute`) owns DAG order, states and
lineage; an executor only starts, polls and stops launch scripts and knows
its own resources. `LocalExecutor` runs subprocesses on this machine; `RayExecutor`
submits the same launch scripts as Ray jobs, `SlurmExecutor` as Slurm batch jobs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Protocol, Sequence, runtime_checkable

from engine.runs.lineage import RunRecord

LAUNCH_SCRIPT = "launch.sh"
LOG_DIR = "logs"
RUN_ID_ENV = "RLVR_RUN_ID"  # set in every launch script's environment; finds orphans after a crash
GROUP_ENV = "RLVR_GROUP_RUN_IDS"  # the other runs a process does for its run (space-separated), found likewise
ALSO_ENV = "RLVR_EVAL_ALSO"  # their run directories, one a line: an eval launch.sh evaluates them too
# What the runner sets in its own environment when it may load a model itself (rule 3's encoder,
# the tiny base model): the libraries' own progress bars and logged warnings stay off its terminal.
# A launch script gets the environment without them: its output is its log, where they belong.
RUNNER_QUIET_ENV = {"HF_HUB_DISABLE_PROGRESS_BARS": "1", "TRANSFORMERS_VERBOSITY": "error"}
QUIETED_ENV = "RLVR_RUN_QUIETED"  # which of those the runner set (space-separated); a user's own stay


def run_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment a launch script starts from: the runner's, less what it set to quiet itself."""
    quieted = set(environ.get(QUIETED_ENV, "").split()) | {QUIETED_ENV}
    return {name: value for name, value in environ.items() if name not in quieted}


@dataclass(frozen=True, kw_only=True)
class Job:
    """One run to execute: its directory holds launch.sh; logs go to its logs/."""

    id: str
    run_dir: Path
    kind: str
    parents: tuple[str, ...] = ()
    gpus: int = 0
    cpus: int = 1
    memory_gb: Optional[float] = None  # what a scheduler reserves (the run's resources); local and Ray ignore it
    time_limit_h: Optional[float] = None  # the run's own bound of one attempt, when its spec sets one
    # Jobs of one group that are ready together run in one process (evaluations of one checkpoint:
    # one model load for all of them); None: always alone.
    group: Optional[str] = None

    @property
    def launch_script(self) -> Path:
        return self.run_dir / LAUNCH_SCRIPT


@dataclass(kw_only=True)
class Started:
    """A launched attempt of a job."""

    job: Job
    attempt: int
    pid: Optional[int]  # leader of the script's own process group; None where it runs elsewhere
    log_path: Path
    job_id: Optional[str] = None  # the executor's own id of this attempt (a Ray submission id)
    detail: Optional[str] = None  # how it ended, in the executor's words, once `poll` returned
    # An executor with a queue (`queues`) says when the attempt's job began on a node, and when it
    # ended where it knows better than the moment `poll` saw it (an attempt that ended unwatched).
    began_at: Optional[str] = None
    ended_at: Optional[str] = None
    queue_state: Optional[str] = None  # the queue's word for its job ("PENDING (Resources)"), where it has one
    handle: Any = field(default=None, repr=False)  # the executor's own


@runtime_checkable
class Executor(Protocol):
    groups: bool  # whether `start` takes `also` (the scheduler then groups jobs that are ready together)

    def refusal(self, job: Job) -> Optional[str]:
        """Why `job` can never run on this executor (e.g. more GPUs than exist), or None."""

    def fits(self, job: Job) -> bool:
        """Whether `job`'s resources are free right now."""

    def start(self, job: Job, *, attempt: int, log_path: Path, also: Sequence[Job] = ()) -> Started:
        """Launch `job` (call only when it `fits`); with `also` (jobs of its group, on executors whose
        `groups` is true), its script does their work too, in the same process."""

    def poll(self, started: Started) -> Optional[int]:
        """The exit code once finished (negative: killed by that signal), else None."""

    def stop(self, running: list[Started], *, grace_s: float) -> None:
        """Terminate every process of these attempts: SIGTERM, `grace_s`, then SIGKILL."""

    def reattach(self, record: RunRecord, job: Job, *, log_path: Path) -> Optional[Started]:
        """Take over a run a dead runner left `running` when its attempt still exists (running or
        finished), so it is neither killed nor run twice; None when it cannot be found again."""

    def reap(self, record: RunRecord, *, grace_s: float) -> int:
        """Kill what survives of a run whose runner died and that `reattach` did not take over;
        returns how many processes (or jobs)."""
