"""The `run` verb: validate → plan → check the trainers → (plan only | materialize → record → execute).

A dry run reads lineage (if any) only to show each run's state and writes nothing. A real
run takes the runs lock first, so two runners never share a runs directory; recovery of
runs a dead runner left behind happens inside `execute`. The library never prints: what
happens is told through `on_event`, and what stops a run is a typed error carrying data.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Union

from engine.data.cache import cache_root
from engine.errors import UserError
from engine.plan.model import Plan, Run, evaluation_key
from engine.resources import visible_gpus
from engine.runs.executors.base import Executor, Job
from engine.runs.executors.local import LocalExecutor
from engine.runs.executors.ray import RayExecutor, auth_token_from_env
from engine.runs.executors.slurm import SlurmExecutor
from engine.runs.lineage import LINEAGE_FILE, RunState, open_lineage
from engine.runs.materialize import RunDir, materialize
from engine.runs.preflight import preflight
from engine.runs.runlock import RunLock
from engine.runs.schedule import ExecutionResult, execute
from engine.spec.model import ExecutorSpec, PhaseKind, Transfer
from engine.spec.validated import ValidatedSpec
from engine.tinymodel import build_tiny_model


@dataclass(frozen=True)
class Validating:
    step: str


@dataclass(frozen=True)
class Planned:
    plan: Plan
    states: dict[str, str]  # run id → lineage state, for runs that have one
    unmet: list[Run]  # runs needing more GPUs than offered
    gpus: int
    dry_run: bool


@dataclass(frozen=True)
class Executing:
    plan: Plan
    todo: int  # runs not yet succeeded


@dataclass(frozen=True)
class RunChanged:
    run_id: str
    state: RunState
    reason: str


@dataclass(frozen=True)
class Resuming:
    """A run this runner takes up again: re-attached to its live job, or resumed in a new attempt."""

    run_id: str
    what: str  # "resuming from checkpoint-40, attempt 2"


Event = Union[Validating, Planned, Executing, RunChanged, Resuming]
EventHandler = Callable[[Event], None]


class UnmetResources(UserError):
    """Runs need more GPUs than this machine offers."""

    def __init__(self, runs: list[Run], gpus: int) -> None:
        self.runs, self.gpus = runs, gpus
        super().__init__(f"{len(runs)} run(s) need more GPUs than this machine offers ({gpus})")


class UnverifiedData(UserError):
    """Data-level isolation checks could not run here, so nothing may start."""

    def __init__(self, items: list[str]) -> None:
        self.items = items
        super().__init__("data-level checks could not run, so nothing is started "
                         "(a leaky experiment burns GPU hours):\n" + "\n".join(f"  {i}" for i in items))


@dataclass(kw_only=True)
class RunOutcome:
    plan: Plan
    result: Optional[ExecutionResult] = None  # None for a dry run
    validated: Optional[ValidatedSpec] = None  # what the plan came from (a dry run prices it)

    @property
    def exit_code(self) -> int:
        return self.result.exit_code if self.result else 0


def _ignore(event: Event) -> None:
    return None


def run_spec(
    path: Path | str,
    *,
    runs_dir: Path | str = "runs",
    dry_run: bool = False,
    gpus: Optional[int] = None,
    cpus: Optional[int] = None,
    skip_unmet: bool = False,
    executor: Optional[str] = None,
    address: Optional[str] = None,
    on_event: EventHandler = _ignore,
    heartbeat_s: float = 5.0,
    grace_s: float = 10.0,
) -> RunOutcome:
    """`executor` ("local" | "ray" | "slurm") and `address` override the spec's `executor:` block; `gpus`
    defaults to the GPUs this machine shows (CUDA_VISIBLE_DEVICES when set)."""
    runs_dir = Path(runs_dir)
    if not dry_run and runs_dir.is_dir():
        # A runner already there is said at once, not after seconds of validation; the lock is
        # taken for good below, so two runners starting together are still kept apart.
        RunLock(runs_dir).acquire().release()
    gpus = len(visible_gpus()) if gpus is None else gpus
    checked = preflight(Path(path), on_step=lambda step: on_event(Validating(step)))
    validated, the_plan = checked.validated, checked.plan
    choice = ExecutorChoice.of(validated.spec.executor, kind=executor, address=address, runs_dir=runs_dir)
    real = None if dry_run else choice.open(gpus=gpus, cpus=cpus)
    gpus = real.cluster_gpus() if isinstance(real, (RayExecutor, SlurmExecutor)) else gpus
    states = read_states(runs_dir, the_plan)
    # A dry run for a cluster connects to nothing: this machine's GPUs say nothing of its nodes.
    unmet = [] if real is None and choice.kind != "local" else unmet_runs(the_plan, states, gpus=gpus)
    on_event(Planned(plan=the_plan, states=states, unmet=unmet, gpus=gpus, dry_run=dry_run))
    if real is None:
        return RunOutcome(plan=the_plan, validated=validated)
    if unmet and not skip_unmet:
        raise UnmetResources(unmet, gpus)
    if validated.unverified:
        raise UnverifiedData(validated.unverified)
    build_base_model(validated)
    with RunLock(runs_dir), open_lineage(runs_dir / LINEAGE_FILE) as lineage:
        states = {r.id: r.state.value for r in lineage.runs(the_plan.spec_name)}
        run_dirs = materialize(the_plan, validated, runs_dir, states=states)
        lineage.record_plan(the_plan, validated, {d.run.id: d.path for d in run_dirs})
        jobs = [job_of(d) for d in run_dirs]
        on_event(Executing(plan=the_plan, todo=sum(1 for j in jobs if states.get(j.id) != RunState.succeeded.value)))
        result = execute(jobs, lineage, real, heartbeat_s=heartbeat_s, grace_s=grace_s,
                         on_change=lambda run_id, state, reason: on_event(RunChanged(run_id, state, reason)),
                         on_resume=lambda run_id, what: on_event(Resuming(run_id, what)))
    return RunOutcome(plan=the_plan, result=result)


def build_base_model(validated: ValidatedSpec) -> Optional[Path]:
    """A registry model with `build:` is built on first use (seconds: a tokenizer trained here)."""
    name = validated.loaded.spec.base_model
    entry = validated.registry.models.get(name) if isinstance(name, str) else None
    if entry is None or entry.build is None:
        return None
    folder = Path(os.path.expanduser(entry.build.folder(name)))
    if not (folder / "config.json").is_file():
        b = entry.build
        folder.parent.mkdir(parents=True, exist_ok=True)
        # A folder of its own: two runners (other runs folders) may build the same model at once.
        partial = Path(tempfile.mkdtemp(prefix=f"{folder.name}.", suffix=".partial", dir=folder.parent))
        try:
            build_tiny_model(partial, hidden=b.hidden, layers=b.layers, heads=b.heads, kv_heads=b.kv_heads,
                             vocab_size=b.vocab_size, seed=b.seed, tokenizer_cache=cache_root() / "tokenizers")
            os.replace(partial, folder)
        except OSError:
            if not (folder / "config.json").is_file():  # not another runner's build finished first
                raise
        finally:
            shutil.rmtree(partial, ignore_errors=True)
    return folder


@dataclass(frozen=True, kw_only=True)
class ExecutorChoice:
    """Where runs execute: the spec's `executor:` block, overridden by the command line."""

    kind: str
    address: Optional[str]
    transfer: Transfer
    shared_dir: Optional[Path]  # None with `transfer: working_dir`
    spec: ExecutorSpec  # the block itself: Slurm's partition, account, qos, time limits, sbatch arguments

    @classmethod
    def of(cls, spec: ExecutorSpec, *, kind: Optional[str], address: Optional[str], runs_dir: Path) -> "ExecutorChoice":
        chosen = kind or spec.kind.value
        if chosen not in ("local", "ray", "slurm"):
            raise UserError(f"unknown executor {chosen!r}: use local, ray or slurm")
        transfer = spec.transfer or Transfer.shared
        if chosen == "slurm" and transfer is Transfer.working_dir:
            raise UserError("executor.transfer: working_dir is for Ray: Slurm jobs read and write their run "
                            "directories on storage every node mounts; drop `transfer` and set `shared_dir`")
        if chosen == "local" or transfer is Transfer.working_dir:
            return cls(kind=chosen, address=address or spec.address, transfer=transfer, shared_dir=None, spec=spec)
        # Without a shared_dir, the runs directory itself is taken to be mounted on every node.
        shared = Path(spec.shared_dir or runs_dir).resolve()
        if not runs_dir.resolve().is_relative_to(shared):
            fix = "" if chosen == "slurm" else ", or set `transfer: working_dir`"
            raise UserError(f"the runs directory {runs_dir.resolve()} is not under the executor's shared_dir "
                            f"{shared}: {chosen.capitalize()} jobs on other nodes would not see the run directories; "
                            f"pass --runs-dir inside the shared storage{fix}")
        return cls(kind=chosen, address=address or spec.address, transfer=transfer, shared_dir=shared, spec=spec)

    def open(self, *, gpus: int, cpus: Optional[int]) -> Executor:
        if self.kind == "local":
            return LocalExecutor(gpus=gpus, cpus=cpus or os.cpu_count() or 1)
        if self.kind == "slurm":
            return self.open_slurm()
        if not self.address:
            raise UserError("the Ray executor needs the cluster's address: pass --address http://HEAD:8265 "
                            "or set executor.address in the spec")
        ray = RayExecutor(address=self.address, shared_dir=self.shared_dir, auth_token=auth_token_from_env())
        ray.connect()
        return ray

    def open_slurm(self) -> SlurmExecutor:
        s = self.spec
        executor = SlurmExecutor(shared_dir=self.shared_dir, partition=s.partition, account=s.account, qos=s.qos,
                                 time_limit_h=dict(s.time_limit_h), sbatch_args=tuple(s.sbatch_args))
        try:
            executor.connect()
        except ConnectionError as exc:
            raise UserError(f"the Slurm executor cannot start: {exc}") from exc
        return executor


def read_states(runs_dir: Path, the_plan: Plan) -> dict[str, str]:
    """Lineage states of the plan's runs, read-only; empty when nothing has run. A lineage of an
    older schema is read as it is: the run that follows upgrades it, and a dry run writes nothing."""
    path = Path(runs_dir) / LINEAGE_FILE
    if not path.exists():
        return {}
    with open_lineage(path, readonly=True, pending_ok=True) as lineage:
        return lineage.run_states(the_plan.spec_name)


def unmet_runs(the_plan: Plan, states: dict[str, str], *, gpus: int) -> list[Run]:
    """Runs still to do that need more GPUs than this machine offers."""
    return [r for r in the_plan.runs if states.get(r.id) != RunState.succeeded.value and r.resources.gpus > gpus]


def job_of(run_dir: RunDir) -> Job:
    run = run_dir.run
    return Job(
        id=run.id, run_dir=run_dir.path, kind=run.kind.value, parents=tuple(run.parents),
        gpus=run.resources.gpus, cpus=run.resources.cpus, group=evaluation_group(run),
        memory_gb=run.resources.memory_gb, time_limit_h=run.resources.time_limit_h,
    )


def evaluation_group(run: Run) -> Optional[str]:
    """Evaluations of one checkpoint (or of the base model) that generate alike share a group: the
    executor runs those that are ready together in one process, which loads the model once.
    Evaluations scoring a best_of_n run's chosen samples load nothing and stay alone."""
    if run.kind is not PhaseKind.eval or any("samples" in e.flows for e in run.edges):
        return None
    return evaluation_key(run.evaluates, run.config)

