"""Paired A/B of the local judge between two checkouts (judge changes are measured with it).

    .venv/bin/python bench/judge_ab.py BASELINE_CHECKOUT CANDIDATE_CHECKOUT [--pairs 16] [--workers 2]
                                       [--stdio PROBLEMS]

Each checkout gets its own driver process with a warm judge (workers started, plans built).
The two drivers judge the same samples in turn, alternating which goes first, so both see the
same moment of a machine whose speed drifts by tens of percent within a minute. The samples are
the 164 HumanEval canonical solutions, or with --stdio the reference solutions of that many light
CodeContests-derived problems (stdin tests, up to 5 each as in `judge_throughput.py`; then a unit is one test, not one
sample). Per run: units/s and CPU ms per unit split by role (caller = the driver process,
worker, nursery, runners = the nursery's reaped children). Reported: medians per checkout and
the median of the paired candidate/baseline ratios (CPU and units/s), with every pair shown.
Make a baseline checkout with `git worktree add /tmp/base <commit>`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

DATASETS = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"
ROLES = ("caller", "worker", "nursery", "runners")

DRIVER = r"""
import json, os, resource, sys, time
sys.path.insert(0, sys.argv[1])
import psutil
from engine.data.convert import problem_from_humaneval
from engine.judge.api import Judge, JudgeConfig

if sys.argv[4] == "0":
    rows = [json.loads(line) for line in open(sys.argv[2] + "/humaneval.jsonl")]
    items = [(problem_from_humaneval(r), r["prompt"] + r["canonical_solution"]) for r in rows]
else:
    import gzip
    from engine.data.convert import problem_from_codecontests_derived
    with gzip.open(sys.argv[2] + "/codecontests_train_sample_derived.jsonl.gz", "rt") as fh:
        problems = [problem_from_codecontests_derived(json.loads(line)) for line in fh]
    # Light problems (the reference runs fast): the per-test overhead is measured, not the algorithm.
    light = [p for p in problems if sum(len(t.input) for t in p.stdio_tests[:5]) < 2000][:int(sys.argv[4])]
    items = [(p.model_copy(update={"stdio_tests": p.stdio_tests[:5]}), p.solutions[0]) for p in light]
units = sum(len(p.stdio_tests) for p, _ in items) if sys.argv[4] != "0" else len(items)

def cpu(procs):
    own = resource.getrusage(resource.RUSAGE_SELF)
    out = {"caller": own.ru_utime + own.ru_stime, "worker": 0.0, "nursery": 0.0, "runners": 0.0}
    for role, proc in procs:
        t = proc.cpu_times()
        out[role] += t.user + t.system
        if role == "nursery":
            out["runners"] += t.children_user + t.children_system
    return out

with Judge(JudgeConfig(timeout_s=3.0, cache=False, workers=int(sys.argv[3]))) as judge:
    judge.judge_many(items, code_is_program=True)
    procs = []
    for w in judge.backend._all:
        p = psutil.Process(w.pid)
        procs += [("worker", p)] + [("nursery", c) for c in p.children()]
    for _ in sys.stdin:
        before, t0 = cpu(procs), time.perf_counter()
        ok = sum(r.accepted for r in judge.judge_many(items, code_is_program=True))
        wall, after = time.perf_counter() - t0, cpu(procs)
        run = {k: 1000 * (after[k] - before[k]) / units for k in before}
        print(json.dumps({**run, "rate": units / wall, "ok": ok, "of": len(items)}), flush=True)
"""


def start(checkout: str, workers: int, stdio: int, datasets: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", DRIVER, checkout, str(datasets), str(workers), str(stdio)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def measure(driver: subprocess.Popen) -> dict:
    driver.stdin.write("go\n")
    driver.stdin.flush()
    return json.loads(driver.stdout.readline())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("baseline")
    parser.add_argument("candidate")
    parser.add_argument("--pairs", type=int, default=16)
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--stdio", type=int, default=0, metavar="PROBLEMS")
    parser.add_argument("--datasets", type=Path, default=DATASETS)
    args = parser.parse_args()
    drivers = [start(side, args.workers, args.stdio, args.datasets) for side in (args.baseline, args.candidate)]
    runs: list[list[dict]] = [[], []]
    try:
        for k in range(args.pairs):
            for side in ((0, 1) if k % 2 == 0 else (1, 0)):
                runs[side].append(measure(drivers[side]))
    finally:
        for d in drivers:
            d.stdin.close()
            d.wait()
    for name, side in (("baseline", runs[0]), ("candidate", runs[1])):
        total = statistics.median(sum(r[k] for k in ROLES) for r in side)
        parts = " ".join(f"{k} {statistics.median(r[k] for r in side):.2f}" for k in ROLES)
        unit = "test" if args.stdio else "sample"
        print(f"{name:9} {statistics.median(r['rate'] for r in side):6.1f} {unit}s/s | CPU ms/{unit} {total:.2f} "
              f"({parts}) | accepted {min(r['ok'] for r in side)}/{side[0]['of']}")
    cpu = [sum(b[k] for k in ROLES) / sum(a[k] for k in ROLES) for a, b in zip(*runs)]
    rate = [b["rate"] / a["rate"] for a, b in zip(*runs)]
    print(f"candidate/baseline, median of {args.pairs} pairs: CPU {statistics.median(cpu):.3f}, "
          f"units/s {statistics.median(rate):.3f}")
    print("pairs (CPU, units/s): " + "; ".join(f"{c:.2f}, {r:.2f}" for c, r in zip(cpu, rate)))


if __name__ == "__main__":
    main()
