"""Wall time per phase of a smoke study run (from lineage: each run's start and finish).

    .venv/bin/python bench/smoke_phases.py [--runs-dir runs] [--spec smoke] [--run]

`--run` first runs `specs/smoke.yaml` into a fresh temporary runs folder (as `make demo` does).
Prints per phase: training wall time per seed, its evaluations' wall time, and the study's
wall time from the first start to the last finish against the 15-minute budget.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path

from engine.runs.lineage import LINEAGE_FILE, open_lineage
from engine.runs.pipeline import run_spec

BUDGET_S = 15 * 60


def _seconds(start: str | None, end: str | None) -> float:
    if not start or not end:
        return 0.0
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs-dir", type=Path, default=Path("runs"))
    parser.add_argument("--spec", default="smoke")
    parser.add_argument("--run", action="store_true", help="run specs/smoke.yaml into a fresh folder first")
    args = parser.parse_args()
    runs_dir = args.runs_dir
    if args.run:
        runs_dir = Path(tempfile.mkdtemp(prefix="rlvr-smoke-")) / "runs"
        began = time.perf_counter()
        run_spec(Path(__file__).resolve().parents[1] / "specs" / "smoke.yaml", runs_dir=runs_dir)
        print(f"ran the smoke study in {time.perf_counter() - began:.0f} s into {runs_dir}")
    with open_lineage(runs_dir / LINEAGE_FILE, readonly=True) as lineage:
        runs = lineage.runs(args.spec)
    train: dict[str, list[float]] = defaultdict(list)
    evals: dict[str, list[float]] = defaultdict(list)
    for run in runs:
        unit = run.phase + (f"/{run.variant}" if run.variant else "")
        kind = run.kind.value if hasattr(run.kind, "value") else run.kind
        (evals if kind == "eval" else train)[unit].append(_seconds(run.started_at, run.finished_at))
    starts = [r.started_at for r in runs if r.started_at]
    ends = [r.finished_at for r in runs if r.finished_at]
    print(f"{'phase':18} {'runs':>4} {'train s (per seed)':>24} {'eval runs':>9} {'eval s total':>12}")
    for unit in dict.fromkeys([r.phase + (f"/{r.variant}" if r.variant else "") for r in runs]):
        per_seed = ", ".join(f"{s:.0f}" for s in train.get(unit, [])) or "—"
        print(f"{unit:18} {len(train.get(unit, [])) + len(evals.get(unit, [])):4d} {per_seed:>24} "
              f"{len(evals.get(unit, [])):9d} {sum(evals.get(unit, [])):12.0f}")
    wall = _seconds(min(starts), max(ends)) if starts and ends else 0.0
    print(f"study wall time {wall:.0f} s ({wall / 60:.1f} min; budget {BUDGET_S / 60:.0f} min, "
          f"{wall / BUDGET_S:.0%} of it); runs {len(runs)}: "
          + json.dumps({s: sum(1 for r in runs if r.state.value == s) for s in {r.state.value for r in runs}}))


if __name__ == "__main__":
    main()
