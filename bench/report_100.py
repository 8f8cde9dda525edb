"""Result pages of a ~100-run synthetic study: seconds to regenerate (target < 2 s); `--seeds 82`
for a ~1,000-run one (target < 20 s).

    .venv/bin/python bench/report_100.py [--seeds 8] [--problems 100] [--baseline DIR]

Builds a real lineage file with per-problem records (tests/report/synthetic.py), then times
`write_reports` once with every figure drawn (cold: the first in its process, so it also parses
the registry and compiles the templates), again with the figures whose data did not change kept
and the per-problem values of unchanged records kept (regenerated, as `rlvr-run run` does after
each run), and without the failure-case page (the one that runs the judge: the refresh while a
study runs), against the time to only read the study from lineage (the floor). Each figure is wall seconds
and, in brackets, CPU seconds of the process: on a machine shared with other work the CPU
seconds are the steadier figure. Everything runs in a fresh interpreter per source tree; with
`--baseline DIR` (another source tree, e.g. `git archive <commit> | tar -x -C DIR`) that tree
builds its own study (each tree reads its own lineage schema) and is measured the same way,
for ratios that hold on a busy machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

MEASURE = """
import json, shutil, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, "tests/report")
from synthetic import build
from engine.report.generate import write_reports
from engine.report.study import load_study
from engine.runs.lineage import open_lineage

def timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return [time.perf_counter() - wall, time.process_time() - cpu]

root = Path(tempfile.mkdtemp(prefix="rlvr-bench-report-"))
try:
    path = build(root, seeds=int(sys.argv[1]), problems=int(sys.argv[2]))
    with open_lineage(path, readonly=True) as lineage:
        runs = len(lineage.runs(spec_name="synth"))
        read = timed(lambda: load_study(lineage, "synth"))
    cold = timed(lambda: write_reports(root))
    again = timed(lambda: write_reports(root))
    quick = timed(lambda: write_reports(root, failures=False))
    print(json.dumps({"runs": runs, "read": read, "cold": cold, "again": again, "quick": quick}))
finally:
    shutil.rmtree(root, ignore_errors=True)
"""


def measure(tree: Path, seeds: int, problems: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree), "MPLBACKEND": "Agg"}
    done = subprocess.run([sys.executable, "-c", MEASURE, str(seeds), str(problems)], cwd=tree, env=env, check=True,
                          capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _fmt(pair: list[float]) -> str:
    return f"{pair[0]:6.2f} s ({pair[1]:5.2f} s CPU)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--problems", type=int, default=100)
    parser.add_argument("--baseline", type=Path, help="another rlvr-run source tree to compare with")
    args = parser.parse_args()
    ours = measure(ROOT, args.seeds, args.problems)
    base = measure(args.baseline.resolve(), args.seeds, args.problems) if args.baseline else None
    target = 2.0 if ours["runs"] <= 150 else 20.0
    print(f"{ours['runs']} runs, {args.seeds} seeds, {args.problems} problems per evaluation")
    rows = (("read lineage only", "read", "floor"), ("pages without failures", "quick", ""),
            ("all pages, cold", "cold", f"target < {target:.0f} s"), ("all pages, regenerated", "again", ""))
    for label, key, note in rows:
        line = f"{label:23} {_fmt(ours[key])}"
        if key != "read":
            line += f"  {ours[key][1] / max(ours['read'][1], 1e-9):5.1f}x the floor (CPU)"
        if base is not None:
            line += (f"  | baseline {_fmt(base[key])}, {base[key][0] / ours[key][0]:.1f}x faster "
                     f"({base[key][1] / ours[key][1]:.1f}x CPU)")
        print(line + (f"  [{note}]" if note else ""))


if __name__ == "__main__":
    main()
