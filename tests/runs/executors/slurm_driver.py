"""A runner process on the Slurm executor: `python slurm_driver.py JOBS.json RUNS_DIR`.

It does what `rlvr-run SPEC --executor slurm` does after planning (lock, record, execute) on
jobs the test wrote, so tests can SIGINT a real runner. SLURM_CONF comes from the environment.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from engine.runs.executors.base import Job
from engine.runs.executors.slurm import SlurmExecutor
from engine.runs.lineage import PlanRecords, RunRecord, open_lineage
from engine.runs.runlock import RunLock
from engine.runs.schedule import execute


def main(jobs_file: str, runs_dir: str) -> int:
    spec = json.loads(Path(jobs_file).read_text())
    jobs = [Job(id=j["id"], run_dir=Path(j["run_dir"]), kind=j["kind"], parents=tuple(j["parents"])) for j in spec["jobs"]]
    executor = SlurmExecutor(shared_dir=Path(runs_dir), status_every_s=0.3)
    with RunLock(Path(runs_dir)), open_lineage(Path(runs_dir) / "lineage.sqlite") as lineage:
        runs = [RunRecord(id=j.id, spec_name="t", phase=j.id, kind=j.kind, run_dir=str(j.run_dir)) for j in jobs]
        lineage.record_plan_records(PlanRecords(runs=runs))
        print("runner started", flush=True)
        result = execute(jobs, lineage, executor, heartbeat_s=0.2, grace_s=10.0)
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
