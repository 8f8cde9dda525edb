"""Seconds per test when a protocol judges only a problem's N most demanding tests, against all of them.

    .venv/bin/python bench/judge_demanding_tests.py [--problems 40] [--n 15] [--rounds 2]

On the CodeContests-derived sample (real stdin/stdout tests), each picked problem's reference
Python solution is judged by this project's judge (`engine.judge.Judge`, local backend, cache off,
one worker, so a sample's seconds are the seconds one judge worker is busy with it) twice: on all
of its tests, and on the `most_demanding` selection (`engine.judge.cases.most_demanding`: the N
tests with the largest inputs). The judge's reward is dense (no stop at the first failure), so every
test of a sample runs, whether it passes or not (most reference solutions pass all; the table says
how many): these are the seconds of a sample that runs all its tests. Printed: the test counts of
the whole sample, then per protocol the wall and CPU seconds per test and per sample, and the ratio
of the top-N per-test and per-sample figures to the all-tests ones (registry/hardware.yaml quotes
them: `judge_cpu_s` is a sample judged on all its tests, `priors.demanding_test_factor` the
per-test ratio).

Problems are those with more than N tests (the others are judged the same either way), in file
order; the rounds are interleaved (all, top-N, all, top-N, ...) so a drift of the shared machine
hits both alike, and the median over rounds is reported.
"""

from __future__ import annotations

import argparse
import gzip
import json
import resource
import statistics
import time
from pathlib import Path

import psutil

from engine.data.convert import problem_from_codecontests_derived
from engine.judge.api import Judge
from engine.judge.cases import most_demanding
from engine.judge.config import JudgeConfig

DATASETS = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"
TIMEOUT_S = 12.0  # the per-test limit of the DeepCoder reward for CodeContests-style problems


def load() -> list:
    with gzip.open(DATASETS / "codecontests_train_sample_derived.jsonl.gz", "rt") as fh:
        return [problem_from_codecontests_derived(json.loads(line)) for line in fh]


def cpu_of(pids: list[int]) -> float:
    """CPU seconds of this process, its reaped children, and the live judge workers with theirs."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    total = own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
    procs = [psutil.Process(p) for p in pids]
    for proc in procs + [c for p in procs for c in p.children(recursive=True)]:
        try:
            t = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


def measure(judge: Judge, items: list) -> tuple[float, float, int]:
    """Wall and CPU seconds of judging `items` one after another on the judge's one worker, and how
    many samples it accepted."""
    pids = [w.pid for w in judge.backend._all]
    cpu0, t0 = cpu_of(pids), time.perf_counter()
    accepted = sum(r.accepted for r in judge.judge_many(items, code_is_program=True))
    return time.perf_counter() - t0, cpu_of(pids) - cpu0, accepted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=40)
    parser.add_argument("--n", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    problems = [p for p in load() if p.kind == "stdio" and p.solutions]
    counts = sorted(len(p.stdio_tests) for p in problems)
    more = [p for p in problems if len(p.stdio_tests) > args.n]
    print(f"{len(problems)} CodeContests-derived problems with a Python solution: tests per problem "
          f"mean {statistics.mean(counts):.1f}, median {statistics.median(counts):g}, max {counts[-1]}; "
          f"{len(more)} have more than {args.n}")
    picked = more[:args.problems]
    every = [(p, p.solutions[0]) for p in picked]
    top = [(most_demanding(p, args.n), s) for p, s in every]
    tests = {"all": sum(len(p.stdio_tests) for p, _ in every), f"top{args.n}": sum(len(p.stdio_tests) for p, _ in top)}
    rows: dict[str, list[tuple[float, float, int]]] = {name: [] for name in tests}
    with Judge(JudgeConfig(timeout_s=TIMEOUT_S, cache=False, workers=1)) as judge:
        judge.judge_many(every[:1], code_is_program=True)  # start the worker before timing
        for _ in range(args.rounds):
            rows["all"].append(measure(judge, every))
            rows[f"top{args.n}"].append(measure(judge, top))

    print(f"\n{len(picked)} problems, reference solutions, one judge worker, timeout {TIMEOUT_S:g} s per test, "
          f"median of {args.rounds} rounds")
    print(f"{'protocol':10} {'tests':>6} {'tests/sample':>12} {'wall s/test':>12} {'CPU s/test':>11} "
          f"{'wall s/sample':>14} {'CPU s/sample':>13} {'accepted':>9}")
    figures = {}
    for name, runs in rows.items():
        wall = statistics.median(r[0] for r in runs)
        cpu = statistics.median(r[1] for r in runs)
        figures[name] = (wall / tests[name], cpu / tests[name], wall / len(picked), cpu / len(picked))
        print(f"{name:10} {tests[name]:6d} {tests[name] / len(picked):12.1f} {figures[name][0]:12.4f} "
              f"{figures[name][1]:11.4f} {figures[name][2]:14.3f} {figures[name][3]:13.3f} "
              f"{min(r[2] for r in runs):6d}/{len(picked)}")
    a, t = figures["all"], figures[f"top{args.n}"]
    print(f"\ntop{args.n} / all: per test wall {t[0] / a[0]:.2f}x, CPU {t[1] / a[1]:.2f}x; "
          f"per sample wall {t[2] / a[2]:.2f}x, CPU {t[3] / a[3]:.2f}x")


if __name__ == "__main__":
    main()
