"""Where a verl study's time goes on a CPU: each verl run's wall time split by verl's own step
timings, and the transformers rollout's batching.

    .venv/bin/python bench/verl_cpu_split.py [--runs-dir runs] [--spec verl-cpu] [--run]

`--run` first runs `specs/verl-cpu.yaml` into a fresh temporary folder. Per verl run: the
attempt's wall time (lineage), the steps' rollout (`timing_s/gen`, the judge inside it),
log-prob passes (`old_log_prob`, `ref`), update, weight sync, validation and saves (verl's
`timing_s/*` in the file log), and the rest: start-up (Ray, verl's actors), data export and
the merge. Then the rollout's requests per `generate` call (the baseline: one call a request).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from datetime import datetime
from pathlib import Path

from engine.files import read_jsonl
from engine.runs.lineage import LINEAGE_FILE, open_lineage
from engine.runs.pipeline import run_spec

PARTS = {"rollout": ("gen",), "log-probs": ("old_log_prob", "ref"), "update": ("update_actor", "adv"),
         "weight sync": ("update_weights",), "validation": ("testing",), "save": ("save_checkpoint",)}


def _seconds(start: str | None, end: str | None) -> float:
    if not start or not end:
        return 0.0
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs-dir", type=Path, default=Path("runs"))
    parser.add_argument("--spec", default="verl-cpu")
    parser.add_argument("--run", action="store_true", help="run specs/verl-cpu.yaml into a fresh folder first")
    args = parser.parse_args()
    runs_dir = args.runs_dir
    if args.run:
        runs_dir = Path(tempfile.mkdtemp(prefix="rlvr-verl-cpu-")) / "runs"
        began = time.perf_counter()
        run_spec(Path(__file__).resolve().parents[1] / "specs" / "verl-cpu.yaml", runs_dir=runs_dir)
        print(f"ran the verl CPU study in {time.perf_counter() - began:.0f} s into {runs_dir}")
    with open_lineage(runs_dir / LINEAGE_FILE, readonly=True) as lineage:
        runs = [r for r in lineage.runs(args.spec) if r.trainer == "verl"]
    print(f"{'run':28} {'wall s':>7} " + " ".join(f"{p:>11}" for p in PARTS) + f" {'start-up+':>10}")
    requests = calls = 0
    for run in runs:
        folder = runs_dir / args.spec / run.id
        wall = _seconds(run.started_at, run.finished_at)
        parts = dict.fromkeys(PARTS, 0.0)
        for log in sorted((folder / "logs").glob("metrics.*.jsonl")):
            for row in read_jsonl(log):
                for part, keys in PARTS.items():
                    parts[part] += sum(float(row["data"].get(f"timing_s/{k}", 0.0)) for k in keys)
        rest = wall - sum(parts.values())
        label = f"{run.phase}{'/' + run.variant if run.variant else ''}@{run.seed} ({run.state.value})"
        print(f"{label:28} {wall:7.0f} " + " ".join(f"{v:11.1f}" for v in parts.values()) + f" {rest:10.0f}")
        for log in sorted((folder / "logs").glob("rollout.*.jsonl")):
            batches = [r for r in read_jsonl(log) if r.get("event") == "batch"]
            requests += sum(r["size"] for r in batches)
            calls += len(batches)
    if calls:
        print(f"rollout: {requests} requests in {calls} generate calls, {requests / calls:.1f} a call "
              f"({requests / calls:.1f}x fewer calls than one a request)")


if __name__ == "__main__":
    main()
