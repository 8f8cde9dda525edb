"""The `run` verb: validate → plan → (print the plan | materialize → record → execute).

A dry run reads lineage (if any) only to show each run's state and writes
nothing. A real run takes the runs lock first, so two runners never share a
runs directory; recovery of runs a dead runner left behind happens inside
`execute`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from engine.errors import UserError
from engine.executor.base import Job
from engine.executor.local import LocalExecutor
from engine.executor.scheduler import ExecutionResult, execute
from engine.lineage import FINISHED, LINEAGE_FILE, RunState, open_lineage
from engine.materialize import RunDir, materialize
from engine.plan import Plan, Run, describe_plan, plan
from engine.runlock import RunLock
from engine.validate import validate_spec

SKIP_UNMET_FLAG = "--skip-unmet"
UNMET_SHOWN = 8


@dataclass(kw_only=True)
class RunOutcome:
    plan: Plan
    result: Optional[ExecutionResult] = None  # None for a dry run

    @property
    def exit_code(self) -> int:
        return self.result.exit_code if self.result else 0


def run_spec(
    path: Path | str,
    *,
    runs_dir: Path | str = "runs",
    dry_run: bool = False,
    gpus: int = 0,
    cpus: Optional[int] = None,
    skip_unmet: bool = False,
    console: Optional[Console] = None,
    heartbeat_s: float = 5.0,
    grace_s: float = 10.0,
) -> RunOutcome:
    console = console or Console()
    runs_dir = Path(runs_dir)
    with console.status("validating", spinner="dots") as status:
        validated = validate_spec(Path(path), on_step=lambda step: status.update(f"validating: {step}"))
    the_plan = plan(validated)
    states = read_states(runs_dir, the_plan)
    unmet = unmet_runs(the_plan, states, gpus=gpus)
    if dry_run:
        console.print(describe_plan(the_plan, states))
        if unmet:
            console.print(f"[yellow]warning:[/] {unmet_message(unmet, gpus)}")
        return RunOutcome(plan=the_plan)
    if unmet and not skip_unmet:
        raise UserError(unmet_message(unmet, gpus))
    if validated.unverified:
        raise UserError(unverified_message(validated.unverified))
    executor = LocalExecutor(gpus=gpus, cpus=cpus or os.cpu_count() or 1)
    with RunLock(runs_dir), open_lineage(runs_dir / LINEAGE_FILE) as lineage:
        states = {r.id: r.state.value for r in lineage.runs(the_plan.spec_name)}
        run_dirs = materialize(the_plan, validated, runs_dir, states=states)
        lineage.record_plan(the_plan, validated, {d.run.id: d.path for d in run_dirs})
        jobs = [job_of(d) for d in run_dirs]
        todo = sum(1 for j in jobs if states.get(j.id) != RunState.succeeded.value)
        with _Reporter(console, the_plan, total=todo) as report:
            result = execute(jobs, lineage, executor, heartbeat_s=heartbeat_s, grace_s=grace_s, on_change=report.change)
    counts = ", ".join(f"{state} {n}" for state, n in sorted(result.counts().items()))
    console.print(f"{the_plan.spec_name}: {counts}" + (" (interrupted)" if result.interrupted_by else ""))
    return RunOutcome(plan=the_plan, result=result)


def read_states(runs_dir: Path, the_plan: Plan) -> dict[str, str]:
    """Lineage states of the plan's runs, read-only; empty when nothing has run."""
    path = Path(runs_dir) / LINEAGE_FILE
    if not path.exists():
        return {}
    with open_lineage(path, readonly=True) as lineage:
        return {r.id: r.state.value for r in lineage.runs(the_plan.spec_name)}


def unmet_runs(the_plan: Plan, states: dict[str, str], *, gpus: int) -> list[Run]:
    """Runs still to do that need more GPUs than this machine offers."""
    return [r for r in the_plan.runs if states.get(r.id) != RunState.succeeded.value and r.resources.gpus > gpus]


def unmet_message(unmet: list[Run], gpus: int) -> str:
    need = max(r.resources.gpus for r in unmet)
    lines = [f"{len(unmet)} run(s) need more GPUs than this machine offers (--gpus {gpus}):"]
    lines += [f"  {r.id} {r.label} needs {r.resources.gpus} GPU(s)" for r in unmet[:UNMET_SHOWN]]
    if len(unmet) > UNMET_SHOWN:
        lines.append(f"  … and {len(unmet) - UNMET_SHOWN} more (the plan above lists them all)")
    lines.append(
        f"fix: pass --gpus {need} on a machine that has them, run the spec on a cluster, or pass "
        f"{SKIP_UNMET_FLAG} to run the rest (these runs are then failed and their descendants blocked)"
    )
    return "\n".join(lines)


def unverified_message(unverified: list[str]) -> str:
    """Why a real run may not start: data-level isolation checks that could not run here."""
    return (
        "data-level checks could not run, so nothing is started (a leaky experiment burns GPU hours):\n"
        + "\n".join(f"  {item}" for item in unverified)
        + "\nfix: make the datasets loadable here (connect to the Hugging Face Hub once — problems are "
        "cached — or set RLVR_RUN_DATA_MIRROR to a folder of the raw files), then run again; "
        "`rlvr-run validate SPEC` shows the reasons"
    )


def job_of(run_dir: RunDir) -> Job:
    run = run_dir.run
    return Job(
        id=run.id, run_dir=run_dir.path, kind=run.kind.value, parents=tuple(run.parents),
        gpus=run.resources.gpus, cpus=run.resources.cpus,
    )


class _Reporter:
    """A progress bar over finished runs, with one line per state change above it."""

    STYLES = {"running": "yellow", "succeeded": "green", "failed": "red", "blocked": "magenta", "cancelled": "dim"}

    def __init__(self, console: Console, the_plan: Plan, *, total: int) -> None:
        self.labels = {r.id: r.label for r in the_plan.runs}
        self.progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=console, transient=True,
        )
        self.task = self.progress.add_task(f"running {the_plan.spec_name}", total=total)

    def __enter__(self) -> "_Reporter":
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def change(self, run_id: str, state: RunState, reason: str) -> None:
        if state is RunState.queued:
            return
        style = self.STYLES.get(state.value, "")
        note = f" — {reason}" if state is not RunState.running and state is not RunState.succeeded else ""
        self.progress.console.print(
            f"[{style}]{state.value:>9}[/] {run_id} {self.labels.get(run_id, '')}{note}", highlight=False
        )
        if state in FINISHED or state is RunState.blocked:
            self.progress.advance(self.task)
