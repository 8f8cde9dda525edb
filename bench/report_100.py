"""Result pages of a ~100-run synthetic study: seconds to regenerate (target < 2 s).

    .venv/bin/python bench/report_100.py [--seeds 8]

Builds a real lineage file with per-problem records (tests/report/synthetic.py), then times
`write_reports` with and without the failure-case page (the one that runs the judge), three
times each, against the time to only read the study from lineage (the floor).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from engine.report.generate import write_reports
from engine.report.study import load_study
from engine.runs.lineage import open_lineage

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "report"))
from synthetic import build  # noqa: E402


def timed(fn, reps: int = 3) -> float:
    times = []
    for _ in range(reps):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--problems", type=int, default=100)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="rlvr-bench-report-"))
    lineage_path = build(root, seeds=args.seeds, problems=args.problems)
    with open_lineage(lineage_path, readonly=True) as lineage:
        runs = len(lineage.runs(spec_name="synth"))
        read_s = timed(lambda: load_study(lineage, "synth"))
    cold = timed(lambda: write_reports(root), reps=1)  # every figure drawn
    full = timed(lambda: write_reports(root))  # figures whose data did not change are kept
    quick = timed(lambda: write_reports(root, failures=False))
    print(f"{runs} runs, {args.seeds} seeds, {args.problems} problems per evaluation")
    print(f"read lineage only      {read_s:6.2f} s   (floor)")
    print(f"pages without failures {quick:6.2f} s   ({quick / read_s:.1f}x the floor)")
    print(f"all pages, cold        {cold:6.2f} s   ({cold / read_s:.1f}x the floor; target < 2 s)")
    print(f"all pages, regenerated {full:6.2f} s   ({full / read_s:.1f}x the floor)")


if __name__ == "__main__":
    main()
