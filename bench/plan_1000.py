"""Time validate + plan of a generated spec with ~1,000 runs.

    .venv/bin/python bench/plan_1000.py [--seeds 10] [--variants 30] [--repeats 5] [--profile]

The spec: base eval, SFT, DPO, GRPO and `--variants` GRPO variants (an lr × kl × reward
grid, some warm-started from DPO), every trained run per seed and evaluated after the
phase and at the end. Validation runs without the content-leakage check (rule 3 reads
every dataset; it has its own bench). The first repeat is reported apart (imports).
"uncached" repeats clear the per-process caches of override parsing and Hydra
composition (one compose per distinct verl command-line shape), as a fresh
`rlvr-run` process sees them; "cached" repeats keep them.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import tempfile
import time
from pathlib import Path

from engine.isolation.validate import validate_spec
from engine.plan.expand import plan
from engine.train import verl_compose

HEAD = """name: bench-1000
base_model: qwen2.5-coder-7b-instruct
datasets:
  cc_train:  {source: codecontests, split: train, role: train}
  cc_valid:  {source: codecontests, split: valid, role: valid}
  cc_test:   {source: codecontests, split: test, role: test, test_only: true}
  humaneval: {source: humaneval, split: test, role: test, test_only: true}
protocols:
  greedy:  {preset: greedy, max_tokens: 2048}
  rollout: {preset: rollout_8, max_tokens: 2048}
phases:
  base: {kind: eval}
  sft:  {kind: sft, from: base, trainer: verl, train: cc_train, select_on: cc_valid, hparams: {lr: 1.0e-5}}
  dpo:  {kind: dpo, from: sft, trainer: trl, pairs_from: cc_train, select_on: cc_valid}
  grpo: {kind: grpo, from: sft, trainer: verl, train: cc_train, reward: dense, rollout: rollout,
         select_on: cc_valid, hparams: {lr: 1.0e-6, kl_coef: 0.001},
         overrides: {trainer.save_freq: 25}}
variants:
"""
TAIL = """evaluate:
  every_phase: {datasets: [cc_valid], protocol: greedy}
  final:       {datasets: [cc_test, humaneval], protocol: greedy}
"""


def spec_text(seeds: int, variants: int) -> str:
    lines = []
    for i in range(variants):
        reward = "sparse" if i % 2 else "dense"
        start = ", from: dpo" if i % 5 == 0 else ""
        lines.append(f"  v{i:03d}: {{phase: grpo, reward: {reward}{start}, "
                     f"hparams: {{lr: {1 + i}.0e-7, kl_coef: {0.001 * (1 + i % 3):.3f}}}}}")
    seed_list = ", ".join(str(s) for s in range(1, seeds + 1))
    return HEAD + "\n".join(lines) + f"\nseeds: [{seed_list}]\n" + TAIL


def timed(path: Path, clear: bool = False) -> tuple[float, float, int]:
    if clear:
        verl_compose._parse_line.cache_clear()
        verl_compose._compose.cache_clear()
    t0 = time.perf_counter()
    validated = validate_spec(path, content=False)
    t1 = time.perf_counter()
    the_plan = plan(validated)
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1, len(the_plan.runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--variants", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--profile", action="store_true", help="print the top functions of one warm repeat")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.yaml"
        path.write_text(spec_text(args.seeds, args.variants))
        cold = timed(path)
        print(f"spec: {args.variants + 4} phases/variants x {args.seeds} seeds -> {cold[2]} runs")
        print(f"first (imports + composes): validate {cold[0]:.3f} s, plan {cold[1]:.3f} s, "
              f"total {cold[0] + cold[1]:.3f} s")
        for label, clear in (("uncached", True), ("cached", False)):
            runs = [timed(path, clear) for _ in range(args.repeats)]
            v, p = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
            print(f"{label} median of {args.repeats}: validate {v:.3f} s, plan {p:.3f} s, "
                  f"total {v + p:.3f} s ({(v + p) / cold[2] * 1e3:.2f} ms/run)")
        if args.profile:
            prof = cProfile.Profile()
            prof.runcall(timed, path)
            pstats.Stats(prof).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    main()
