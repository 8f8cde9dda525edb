"""A runner on the local executor whose output goes to a pipe: `python interrupt_driver.py JOBS.json RUNS_DIR`.

It does what `rlvr-run SPEC` does after planning (lock, record, execute), printing each state change
on stdout as the command does, and the command's one-line summary on stderr when interrupted, so
tests can signal a real runner whose reader (`| head`) goes away.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from engine.cli.run import interrupted_summary
from engine.runs.executors.base import Job
from engine.runs.executors.local import LocalExecutor
from engine.runs.lineage import PlanRecords, RunRecord, open_lineage
from engine.runs.runlock import RunLock
from engine.runs.schedule import execute


def main(jobs_file: str, runs_dir: str) -> int:
    spec = json.loads(Path(jobs_file).read_text())
    jobs = [Job(id=j["id"], run_dir=Path(j["run_dir"]), kind="eval") for j in spec["jobs"]]
    with RunLock(Path(runs_dir)), open_lineage(Path(runs_dir) / "lineage.sqlite") as lineage:
        lineage.record_plan_records(PlanRecords(runs=[
            RunRecord(id=j.id, spec_name="t", phase=j.id, kind=j.kind, run_dir=str(j.run_dir)) for j in jobs]))
        result = execute(jobs, lineage, LocalExecutor(gpus=0, cpus=4), heartbeat_s=0.2, grace_s=5.0,
                         on_change=lambda run_id, state, reason: print(f"{state.value} {run_id}", flush=True))
    if result.interrupted_by:
        print(interrupted_summary("t", result, "spec.yaml"), file=sys.stderr, flush=True)
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
