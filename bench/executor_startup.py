"""Start-up per run of the three executors: local, Ray (loopback head), Slurm (single-node localhost).

    .venv/bin/python bench/executor_startup.py [--runs 5] [--skip ray,slurm]

Starts a loopback Ray head and a localhost Slurm (munged, slurmctld, slurmd: needs slurm-wlm and
munge, and root), both stopped at the end, then measures on each executor, with its default
settings, the real scheduler and lineage:

- trivial runs in a chain (each launch.sh writes an empty eval result and exits; each run waits
  for the one before), so a run's wall time is the executor's start-up and completion overhead;
- the toy study (one evaluation of the tiny model on three toy problems, as in the executors'
  tests) through `run_spec`, the whole study's wall time.

Prints seconds per run and each executor's ratio to local.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Optional

from engine.runs.executors.base import Executor
from engine.runs.executors.local import LocalExecutor
from engine.runs.executors.ray import RayExecutor, auth_token_from_env
from engine.runs.executors.slurm import SlurmExecutor
from engine.runs.pipeline import run_spec

REPO = Path(__file__).resolve().parents[1]
HELPERS = REPO / "tests" / "runs" / "executors"
TOY_SPEC = """\
name: toy-startup-{tag}
base_model: {{path: {model}}}
datasets:
  toy_valid: {{source: toy, split: valid, role: valid, ids: {root}/valid.txt}}
protocols:
  greedy: {{preset: greedy, max_tokens: 8}}
phases:
  base: {{kind: eval}}
seeds: [1]
evaluate:
  every_phase: {{datasets: [toy_valid], protocol: greedy}}
"""
VALID = "toy/count_above_14\ntoy/count_above_2\ntoy/count_above_24\n"


def toy_study_seconds(root: Path, model: Path, tag: str, **run_args) -> float:
    root.mkdir(parents=True)
    (root / "valid.txt").write_text(VALID)
    spec = root / "spec.yaml"
    spec.write_text(TOY_SPEC.format(tag=tag, model=model, root=root))
    start = time.perf_counter()
    outcome = run_spec(spec, runs_dir=root / "runs", heartbeat_s=1.0, **run_args)
    elapsed = time.perf_counter() - start
    if outcome.exit_code:
        raise SystemExit(f"the toy study failed on {tag}: {outcome.result.states}")
    return elapsed


def main(argv: Optional[list[str]] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="trivial chained runs per executor")
    ap.add_argument("--skip", default="", help="comma-separated executors not to measure (ray, slurm)")
    args = ap.parse_args(argv)
    skip = set(filter(None, args.skip.split(",")))
    sys.path[:0] = [str(HELPERS), str(REPO / "bench")]
    from ray_head import LoopbackHead
    from ray_overhead import seconds_per_run
    from slurm_cluster import LocalSlurm, missing

    from engine.tinymodel import build_tiny_model

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model = build_tiny_model(root / "model", hidden=32, layers=1, heads=2, kv_heads=1, vocab_size=512)
        stops: list[Callable[[], None]] = []
        measured: dict[str, tuple[float, float]] = {}
        try:
            plans: dict[str, tuple[Callable[[Path], Executor], dict]] = {
                "local": (lambda r: LocalExecutor(cpus=os.cpu_count() or 1), {"executor": "local"})}
            if "ray" not in skip:
                head = LoopbackHead(root=root / "head")
                head.start()
                stops.append(head.stop)
                os.environ.update(head.client_env)
                plans["ray"] = (lambda r: RayExecutor(address=head.address, shared_dir=r, auth_token=auth_token_from_env()),
                                {"executor": "ray", "address": head.address})
            if "slurm" not in skip:
                why = missing()
                if why:
                    print(f"slurm: not measured ({why})")
                else:
                    cluster = LocalSlurm(root / "slurm")
                    cluster.start()
                    stops.append(cluster.stop)
                    os.environ.update(cluster.env)
                    plans["slurm"] = (lambda r: SlurmExecutor(shared_dir=r), {"executor": "slurm"})
            print(f"{args.runs} trivial chained runs each, then the toy study (1 eval run, 3 problems)")
            print(f"{'executor':<10}{'trivial s/run':>15}{'x local':>9}{'toy study s':>13}{'x local':>9}")
            for name, (make, run_args) in plans.items():
                trivial = seconds_per_run(make(root / name), root / name / "chain", args.runs, chain=True)
                study = toy_study_seconds(root / name / "toy", model, name, **run_args)
                measured[name] = (trivial, study)
                base = measured["local"]
                print(f"{name:<10}{trivial:>15.2f}{trivial / base[0]:>9.1f}{study:>13.1f}{study / base[1]:>9.2f}",
                      flush=True)
        finally:
            for stop in reversed(stops):
                stop()


if __name__ == "__main__":
    main()
