"""Runs a dead runner left `running`: taken over, or stopped and failed, before anything is submitted.

An attempt the executor can find again (a Slurm or Ray job, by its id or its name) is re-attached
and goes on; whatever else of such a run is still alive (another spec's, an older plan's, one not
found again) is stopped, and seen stopped, and the run is failed with the reason: nothing else may
write its run directory meanwhile.
"""

from __future__ import annotations

import socket
from datetime import datetime, timezone
from typing import Optional, Sequence

from engine.errors import UserError
from engine.runs.executors.base import LOG_DIR, Executor, Job, Started
from engine.runs.lineage import Lineage, RunRecord, RunState, parse_iso

S = RunState


def recover_dead_runs(
    lineage: Lineage, executor: Executor, *, stale_s: float, grace_s: float, jobs: Sequence[Job] = (),
) -> tuple[list[RunRecord], list[Started]]:
    """Take over, or mark failed, every run left `running` by a runner that died.

    An attempt the executor can find again (a Ray job, by its id) is re-attached and
    goes on; the rest are failed with the reason, their leftovers on this host killed.
    Holding the runs lock proves no live runner here owns them; a run recorded on
    another host counts as dead only once its heartbeat is older than `stale_s`.
    """
    host = socket.gethostname()
    by_id = {job.id: job for job in jobs}
    recovered, attached = [], []
    # Process leaders first: a run done in another run's process (evaluations of one checkpoint)
    # whose job id never reached lineage (the runner died right after submitting) is in its
    # leader's job, which its own name would never find.
    def leader_of(rec: RunRecord) -> Optional[str]:
        row = lineage.attempt(rec.id, rec.attempt)
        return row.leader if row else None

    for rec in sorted(lineage.runs(state=S.running), key=lambda r: leader_of(r) is not None):
        leader = leader_of(rec)
        if rec.job_id is None and leader is not None:
            found = next((s for s in attached if s.job.id == leader and s.job_id), None)
            if found:
                lineage.record_launch(rec.id, rec.pid, found.job_id)
                rec = lineage.run(rec.id)
        last = rec.heartbeat_at or "never"
        elsewhere = bool(rec.host) and rec.host != host
        if elsewhere and (age := _age_s(rec.heartbeat_at)) < stale_s:
            raise UserError(
                f"run {rec.id} is running on host {rec.host} (heartbeat {age:.0f}s ago); "
                "stop that runner first, or wait until it finishes"
            )
        # A cluster's job outlives its runner wherever that ran (a SLURM allocation's head
        # node changes between allocations), so it is looked for before anything is failed.
        job = by_id.get(rec.id)
        started = job and executor.reattach(rec, job, log_path=job.run_dir / LOG_DIR / f"attempt-{rec.attempt}.log")
        if started:
            if started.job_id and started.job_id != rec.job_id:  # found by its name: recorded like any other
                lineage.record_launch(rec.id, rec.pid, started.job_id)
            attached.append(started)
            continue
        # Not this plan's (another spec's, an older plan's), or not found again: whatever of it is
        # still alive is stopped, and seen stopped, before anything is submitted into its directory.
        killed = executor.reap(rec, grace_s=grace_s)
        what = f"job {rec.job_id}" if rec.job_id else f"script pid {rec.pid}"
        fate = "gone" if not killed else (f"still alive: cancelled ({killed} job(s)) and seen ended" if rec.job_id
                                          else f"killed {killed} surviving process(es)")
        who = f"runner on {rec.host}" if elsewhere else "runner"
        reason = f"{who} died: {what} {fate}, last heartbeat {last}"
        # Its attempt ended at its last sign of life, not now: the time until this runner came holds no work.
        recovered.append(lineage.set_state(rec.id, S.failed, reason, at=rec.heartbeat_at))
    return recovered, attached


def _age_s(stamp: Optional[str]) -> float:
    then = parse_iso(stamp)
    return float("inf") if then is None else (datetime.now(timezone.utc) - then).total_seconds()
