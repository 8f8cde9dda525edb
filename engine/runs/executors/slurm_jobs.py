"""Find a run's Slurm jobs by their names in its run directory, and scancel jobs until Slurm shows them ended."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

from engine.runs.executors import slurm_commands as slurm
from engine.runs.executors.base import Job
from engine.runs.executors.slurm_commands import JobState, SlurmUnreachable
from engine.runs.lineage import RunRecord


def job_name_of(run_id: str, attempt: int) -> str:
    return f"rlvr-{run_id}-a{attempt}"


def named_job(job: Job, attempt: int) -> Optional[JobState]:
    """This run directory's job of that attempt, found by its name. The name alone is not
    enough: the same study in another runs directory (a colleague's, a second copy) has jobs
    of the same run ids and attempts, and squeue lists every user's."""
    found = slurm.job_states(name=job_name_of(job.id, attempt))
    here = job.run_dir.resolve()
    mine = sorted((s for s in found.values() if s.work_dir and Path(s.work_dir).resolve() == here),
                  key=lambda s: int(s.job_id) if s.job_id.isdigit() else 0)
    return mine[-1] if mine else None


def live_jobs_of(record: RunRecord) -> list[str]:
    """The run's jobs Slurm still runs or queues: the one lineage recorded, and those named after
    any of its attempts whose directory is the run's (a job whose id never reached lineage)."""
    live = []
    if record.job_id and record.job_id.isdigit():
        live += [i for i, st in slurm.job_states([record.job_id]).items() if not st.ended]
    if record.run_dir and record.attempt:
        here = Path(record.run_dir).resolve()
        names = ",".join(job_name_of(record.id, n) for n in range(1, record.attempt + 1))
        live += [i for i, st in slurm.job_states(name=names).items()
                 if not st.ended and st.work_dir and Path(st.work_dir).resolve() == here and i not in live]
    return live


def cancel_confirmed(ids: list[str], grace_s: float) -> dict[str, str]:
    """scancel `ids` (tried again while it fails), then watch them end for up to `grace_s`,
    asking again halfway; what is left, by id, in words ("still RUNNING after scancel")."""
    if not ids:
        return {}
    try:
        slurm.cancel(ids)
    except SlurmUnreachable as exc:
        return {i: f"may still run: {exc}" for i in ids}
    deadline, asked_again = time.monotonic() + grace_s, False
    while True:
        try:
            states = slurm.job_states(ids)
        except SlurmUnreachable as exc:
            return {i: f"may still run: after scancel, squeue failed ({exc})" for i in ids}
        # COMPLETING: Slurm is ending it (its processes get SIGKILL after KillWait)
        ids = [i for i in ids if i in states and not states[i].ended and states[i].state != "COMPLETING"]
        if not ids:
            return {}
        if time.monotonic() >= deadline:
            return {i: f"still {states[i].describe()} after scancel" for i in ids}
        if not asked_again and time.monotonic() >= deadline - grace_s / 2:
            asked_again = True
            try:
                slurm.cancel(ids)
            except SlurmUnreachable:
                pass
        time.sleep(0.2)
