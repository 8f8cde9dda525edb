"""How callers feed the judge: the old call shapes against the new ones, side by side in one run.

    .venv/bin/python bench/judge_shapes.py [--samples 500] [--timeouts 0.05] [--group 16] [--datasets DIR]

Samples are HumanEval canonical solutions; a share of them (`--timeouts`) is replaced by a busy
loop, which runs into the per-test CPU limit (1 s; RLIMIT_CPU counts whole seconds). Each figure
runs the old shape and the new one on the same warm judge (workers started, plans built), one
right after the other:

(a) evaluation judging of all samples: `judge_many` over chunks of 64, each waiting for its
    slowest sample (before) vs one `judge_stream` over all (after); against the ideal wall time =
    the CPU work of the whole set / the cores (the CPU measured in the same run);
(b) one GRPO step's group of samples as the reward sees it (the first `--group` samples, a
    timeout among them): a thread per sample each judging one job (verl, before), four threads of
    one job each (trl, before), and `compute_score_batch` (after, one stream);
(c) two evaluation runs at once on this machine, each judging the whole set: each run's judge
    sized to every CPU and pinned worker i to CPU i (before), each sized from `RLVR_CPUS` (the
    executor's share: cores / 2) and floating (after).

Ratios are before / after (above 1: the new shape is faster). The machine may be shared: the
load averages are printed before and after; judge ratios within one run, not absolute rates.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from engine.data.convert import problem_from_humaneval  # noqa: E402
from engine.judge import reward as reward_score  # noqa: E402
from engine.judge.api import Judge, JudgeConfig  # noqa: E402
from engine.judge.ground_truth import ground_truth_from_problem  # noqa: E402
from engine.judge.reward_settings import RewardSettings  # noqa: E402

BUSY = "def _spin():\n    while True:\n        pass\n_spin()\n"
CHUNK = 64  # the evaluation runner's chunk before judging streamed
TIMEOUT_S = 1.0


def samples(datasets: Path, n: int, share: float) -> list[tuple]:
    rows = [json.loads(line) for line in open(datasets / "humaneval.jsonl")]
    problems = [problem_from_humaneval(r) for r in rows]
    items = [(problems[k % len(rows)], rows[k % len(rows)]["prompt"] + rows[k % len(rows)]["canonical_solution"]
              + f"\n# sample {k}\n") for k in range(n)]
    every = max(1, round(1 / share)) if share > 0 else n + 1
    return [(p, BUSY + f"# {k}\n") if k % every == every // 2 else (p, code) for k, (p, code) in enumerate(items)]


def cpu_now(judge: Judge) -> float:
    """CPU seconds of this process, its reaped children and the judge's workers with everything
    they forked (runners are reaped by the nurseries, whose children times count them)."""
    import psutil

    own = resource.getrusage(resource.RUSAGE_SELF)
    total = own.ru_utime + own.ru_stime
    for w in judge.backend._all:
        try:
            p = psutil.Process(w.pid)
            for proc in [p, *p.children()]:
                t = proc.cpu_times()
                total += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            pass
    return total


def timed(judge: Judge, run) -> tuple[float, float]:
    c0, t0 = cpu_now(judge), time.perf_counter()
    run()
    return time.perf_counter() - t0, cpu_now(judge) - c0


def eval_figure(judge: Judge, items: list, cores: int) -> None:
    def chunked():
        for lo in range(0, len(items), CHUNK):
            judge.judge_many(items[lo:lo + CHUNK], code_is_program=True)

    def streamed():
        for _ in judge.judge_stream(items, code_is_program=True):
            pass

    before, cpu_b = timed(judge, chunked)
    after, cpu_a = timed(judge, streamed)
    ideal = min(cpu_b, cpu_a) / cores
    print(f"(a) evaluation, {len(items)} samples: chunks of {CHUNK} {before:6.2f} s ({before / ideal:.2f}x ideal) | "
          f"one stream {after:6.2f} s ({after / ideal:.2f}x ideal) | ideal {ideal:.2f} s "
          f"(CPU {cpu_b:.1f} / {cpu_a:.1f} s on {cores} cores) | before/after {before / after:.2f}")


def reward_figure(judge: Judge, group: list, cores: int) -> None:
    truths = [ground_truth_from_problem(p) for p, _ in group]
    texts = [f"```python\n{code}\n```" for _, code in group]
    problems = [p for p, _ in group]

    def thread_per_sample():  # the verl reward before: each call judged alone on its own thread
        with ThreadPoolExecutor(len(group)) as pool:
            list(pool.map(lambda k: judge.judge(problems[k], texts[k]), range(len(group))))

    def trl_threads():  # the trl reward before: four threads of one job each
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda k: judge.judge(problems[k], texts[k]), range(len(group))))

    def batch():
        reward_score.compute_score_batch(["bench"] * len(group), texts, truths, timeout_s=TIMEOUT_S, workers=cores)

    warm = [f"```python\n{code}\n# warm-up\n```" for _, code in group]  # the reward's judge: workers up, plans built
    reward_score.compute_score_batch(["bench"] * len(group), warm, truths, timeout_s=TIMEOUT_S, workers=cores)
    verl_b, _ = timed(judge, thread_per_sample)
    trl_b, _ = timed(judge, trl_threads)
    settings = RewardSettings.resolve({"timeout_s": TIMEOUT_S, "workers": cores}, None)
    after, _ = timed(reward_score._JUDGES.get(settings), batch)
    print(f"(b) GRPO step, group of {len(group)} on {cores} cores: thread per sample {verl_b:5.2f} s | "
          f"4 threads of one job {trl_b:5.2f} s | one batch {after:5.2f} s | before/after "
          f"{verl_b / after:.2f} (verl), {trl_b / after:.2f} (trl)")


RUN = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
from engine.judge.api import Judge, JudgeConfig
items = __import__("pickle").loads(bytes.fromhex(sys.stdin.read()))
extra = json.loads(sys.argv[2])
with Judge(JudgeConfig(timeout_s=%s, cache=False, **extra)) as judge:
    judge.judge_many(items[:2], code_is_program=True)
    print("ready", flush=True)
    sys.stdout.flush()
    t0 = time.perf_counter()
    for _ in judge.judge_stream(items, code_is_program=True):
        pass
    print(json.dumps({"wall": time.perf_counter() - t0, "workers": judge.config.workers}), flush=True)
""" % TIMEOUT_S


def concurrent_figure(items: list, cores: int) -> None:
    import pickle

    payload = pickle.dumps(items).hex()

    def two_runs(extra: dict, env: dict) -> tuple[float, list[dict]]:
        procs = [subprocess.Popen([sys.executable, "-c", RUN, str(REPO), json.dumps(extra)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, env={**os.environ, **env}) for _ in range(2)]
        for p in procs:
            p.stdin.write(payload)
            p.stdin.close()
        for p in procs:
            assert p.stdout.readline().strip() == "ready"
        t0 = time.perf_counter()
        out = [json.loads(p.stdout.readline()) for p in procs]
        for p in procs:
            p.wait()
        return time.perf_counter() - t0, out

    share = max(1, cores // 2)
    before, b = two_runs({"workers": cores, "pin_workers": True}, {})
    after, a = two_runs({}, {"RLVR_CPUS": str(share)})
    print(f"(c) two evaluation runs at once, {len(items)} samples each: all CPUs pinned i->i "
          f"({b[0]['workers']} workers each) {before:6.2f} s | RLVR_CPUS={share} floating ({a[0]['workers']} each) "
          f"{after:6.2f} s | before/after {before / after:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=500)
    parser.add_argument("--timeouts", type=float, default=0.05, help="share of samples that time out")
    parser.add_argument("--group", type=int, default=16, help="samples of one GRPO step's group")
    parser.add_argument("--datasets", type=Path, default=REPO.parent / "shared" / "datasets")
    parser.add_argument("--skip-concurrent", action="store_true")
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0))
    items = samples(args.datasets, args.samples, args.timeouts)
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {cores} cores; "
          f"{sum(code.startswith(BUSY) for _, code in items)} of {len(items)} samples time out")
    with Judge(JudgeConfig(timeout_s=TIMEOUT_S, cache=False, workers=cores)) as judge:
        judge.judge_many(items[:CHUNK], code_is_program=True)  # workers up, plans built
        print(f"judge {judge.version}")
        eval_figure(judge, items, cores)
        group = items[:args.group]
        if not any(code.startswith(BUSY) for _, code in group):
            group[-1] = next(item for item in items if item[1].startswith(BUSY))
        reward_figure(judge, group, cores)
    if not args.skip_concurrent:
        concurrent_figure(items, cores)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
