"""Seconds per training step of every trl phase on this CPU, run through rlvr-run end to end.

    .venv/bin/python bench/train_cpu.py [--hidden 64] [--layers 2] [--steps 6]

Builds a small model, writes a study (SFT memorizes eight toy problems, then DPO, GRPO,
repair and RAFT start from it), runs it with the local executor, and reads the step times
back from lineage. Prints per phase: median s/step, the steps measured, and for the RL
phases the share of a step spent judging; beside them, plain trl's s/step measured on a 2-core
machine (a 64-hidden model, the same steps, trl alone) as the baseline.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from engine.runs.lineage import LINEAGE_FILE, open_lineage
from engine.runs.pipeline import run_spec
from engine.tinymodel import build_tiny_model

IDS = ["toy/plus_k_12", "toy/times_k_10", "toy/mod_k_10", "toy/sum_plus_k_10",
       "toy/shift_10", "toy/scale_10", "toy/divisible_10", "toy/repeat_10"]
# Plain trl, m64, batch as in the note (SFT b8 messages, DPO 8 pairs, GRPO 8 prompts × 4 at 64 tokens).
BASELINE = {"sft": 0.14, "dpo": 0.39, "grpo": 1.13, "repair": None, "raft": 0.14}

PHASES = """\
  dpo: {{kind: dpo, from: sft, trainer: trl, pairs_from: toy_train, pairs: {{k: 4}},
        hparams: {{max_steps: {steps}, per_device_train_batch_size: 4}}}}
  grpo: {{kind: grpo, from: sft, trainer: trl, train: toy_train, reward: dense, rollout: rollout,
         hparams: {{max_steps: {steps}, per_device_train_batch_size: 16}}}}
  repair: {{kind: repair, from: sft, trainer: trl, train: toy_train, reward: dense, rollout: rollout, rounds: 2,
           hparams: {{max_steps: {steps}, per_device_train_batch_size: 16}}}}
  raft: {{kind: raft, from: sft, train: toy_train, rollout: rollout, cycles: 1, samples_per_prompt: 4,
         hparams: {{max_steps: {steps}, per_device_train_batch_size: 8}}}}
"""


def write_spec(root: Path, model: Path, steps: int) -> Path:
    (root / "train.txt").write_text("\n".join(IDS) + "\n")
    spec = root / "spec.yaml"
    spec.write_text(f"""\
name: bench-train
base_model: {{path: {model}}}
datasets:
  toy_train: {{source: toy, split: train, role: train, ids: train.txt}}
protocols:
  rollout: {{temperature: 0.5, top_p: 1.0, max_tokens: 48, n: 4}}
phases:
  sft: {{kind: sft, trainer: trl, train: toy_train,
        hparams: {{learning_rate: 5.0e-3, max_steps: 100, per_device_train_batch_size: 8, save_steps: 100}}}}
{PHASES.format(steps=steps)}seeds: [1]
""")
    return spec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=6, help="steps of each phase after SFT")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="rlvr-bench-train-"))
    model = build_tiny_model(root / "model", hidden=args.hidden, layers=args.layers, heads=4, kv_heads=2,
                             vocab_size=512)
    began = time.perf_counter()
    # One run at a time: two trainers sharing two cores would time each other, not themselves.
    outcome = run_spec(write_spec(root, model, args.steps), runs_dir=root / "runs", cpus=1)
    wall = time.perf_counter() - began
    print(f"model hidden {args.hidden}, {args.layers} layers; study wall {wall:.0f} s; runs under {root}")
    print(f"{'phase':8} {'state':10} {'s/step':>7} {'steps':>5} {'judge share':>11} {'plain trl':>9}")
    with open_lineage(root / "runs" / LINEAGE_FILE, readonly=True) as lineage:
        for run in outcome.plan.runs:
            series: dict[str, dict[int, float]] = {}
            for m in lineage.metrics(run.id):
                if m.dataset == "train" and m.step > 0:
                    series.setdefault(m.name, {})[m.step] = m.value
            times = series.get("step_time_s", {})
            step_s = statistics.median(times.values()) if times else float("nan")
            judge = series.get("judge_s", {})
            share = (f"{statistics.median(judge[s] / times[s] for s in judge if s in times and times[s]):.0%}"
                     if judge else "-")
            base = BASELINE.get(run.phase)
            print(f"{run.phase:8} {outcome.result.states[run.id].value:10} {step_s:7.2f} {len(times):5d} "
                  f"{share:>11} {base if base is not None else '-':>9}")


if __name__ == "__main__":
    main()
