"""Seconds of overhead per run: the Ray executor (both transfers) beside the local executor.

    .venv/bin/python bench/ray_overhead.py [--runs 10]

Starts a loopback Ray head (CPU only, stopped at the end), then executes the same trivial
runs through each executor with the real scheduler and lineage: each launch.sh writes an
empty eval result and exits, so what is timed is the executor. The runs form a chain (each
waits for the one before), so a run's wall time is its overhead: launch, polling, completion
check, lineage. A second pass lets them all run at once, which shows what a cluster with
free CPUs does to a wide study. Prints seconds per run for each executor.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

from engine.runs.executors.base import Executor, Job
from engine.runs.executors.local import LocalExecutor
from engine.runs.executors.ray import RayExecutor, auth_token_from_env
from engine.runs.lineage import LINEAGE_FILE, PlanRecords, RunRecord, open_lineage
from engine.runs.schedule import execute

HEAD_HELPER = Path(__file__).resolve().parents[1] / "tests" / "runs" / "executors"
LAUNCH = ('set -e\ncd "${RLVR_RUN_DIR:-%s}"\nmkdir -p outputs\n'
          "echo '{\"run_id\": \"bench\", \"datasets\": []}' > outputs/metrics.json\n")


def make_jobs(root: Path, count: int, *, chain: bool) -> list[Job]:
    # Run ids are unique across passes: Ray keeps every submission id the head has seen.
    tag = f"{root.parent.name}-{root.name}-"
    jobs = []
    for i in range(count):
        run_dir = root / f"{tag}{i}"
        run_dir.mkdir(parents=True)
        (run_dir / "launch.sh").write_text(LAUNCH % run_dir)
        parents = (f"{tag}{i - 1}",) if chain and i else ()
        jobs.append(Job(id=f"{tag}{i}", run_dir=run_dir, kind="eval", parents=parents))
    return jobs


def seconds_per_run(executor: Executor, root: Path, count: int, *, chain: bool) -> float:
    jobs = make_jobs(root, count, chain=chain)
    with open_lineage(root / LINEAGE_FILE) as lineage:
        lineage.record_plan_records(PlanRecords(runs=[
            RunRecord(id=j.id, spec_name="bench", phase=j.id, kind=j.kind, run_dir=str(j.run_dir)) for j in jobs]))
        start = time.perf_counter()
        result = execute(jobs, lineage, executor, heartbeat_s=1.0)
        elapsed = time.perf_counter() - start
        reasons = {lineage.run(j.id).reason for j in jobs if result.states[j.id].value != "succeeded"}
    if reasons:
        raise SystemExit(f"bench runs failed under {type(executor).__name__}: {sorted(reasons)}")
    return elapsed / count


def executors(address: str, root: Path) -> dict[str, Executor]:
    token = auth_token_from_env()
    return {
        "local": LocalExecutor(cpus=os.cpu_count() or 1),
        "ray, shared storage": RayExecutor(address=address, shared_dir=root, auth_token=token),
        "ray, working_dir": RayExecutor(address=address, shared_dir=None, auth_token=token),
    }


def main(argv: Optional[list[str]] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args(argv)
    # The tests' loopback head: the same settings, and stopped by pid rather than `ray stop`.
    sys.path.insert(0, str(HEAD_HELPER))
    from ray_head import LoopbackHead

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        head = LoopbackHead(root=root / "head")
        started = time.perf_counter()
        try:
            head.start()
            os.environ.update(head.client_env)
            print(f"loopback Ray head up in {time.perf_counter() - started:.1f} s; {args.runs} trivial runs each")
            print(f"{'executor':<22}{'chained s/run':>15}{'all at once s/run':>20}")
            for name, executor in executors(head.address, root).items():
                slug = name.replace(", ", "-").replace(" ", "_").replace("_storage", "")
                chained = seconds_per_run(executor, root / slug / "chain", args.runs, chain=True)
                wide = seconds_per_run(executor, root / slug / "wide", args.runs, chain=False)
                print(f"{name:<22}{chained:>15.2f}{wide:>20.2f}", flush=True)
        finally:
            head.stop()


if __name__ == "__main__":
    main()
