"""Calibrate the `cpu` hardware profile on micro-benchmarks of the tiny model (never on a study).

    .venv/bin/python bench/price_calibrate.py [--repeats 3] [--steps 20]

Measures CPU seconds (not wall time) on one thread, as the local executor gives each run one CPU
slot: on a shared machine the wall clock measures the neighbours, the CPU clock the work.
  start-up      a fresh interpreter importing what an evaluation / a trainer imports, loading the model,
                and starting a judge (one worker) that judges one toy solution
  generation    seconds per decoding step of the hf backend at batch 1, 8 and 32 (forced to full length),
                fitted to τ0 + κ·b (gen_step_ms, gen_step_ms_per_seq)
  training      trl SFTTrainer tokens per second on toy rows at the smoke study's batch (16), and a
                forward-only pass (sft_tok_s, update_tok_s, logprob_tok_s); a checkpoint save (save_s)
  judging       seconds per toy reference solution on one judge worker (judge_cpu_s), and the share of
                the tiny model's own sampled programs that time out (timeout_rate; p90: the one-sided
                90 % upper bound, ln 10 / n, when none does)
  tokens        prompt and reference-solution tokens of toy problems under the tiny tokenizer
Prints each figure with its spread, and the `cpu` profile's constants as YAML (p10/p90: the
fastest and slowest repeat, widened by 20 % for a shared machine) to paste into
registry/hardware.yaml.
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parents[1]
TINY = {"hidden": 128, "layers": 4, "heads": 4, "kv_heads": 2, "vocab_size": 1024, "seed": 0}  # registry tiny-coder


def cpu_now() -> float:
    """CPU seconds of this process and of its finished children."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def timed(fn, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        began = cpu_now()
        fn()
        out.append(cpu_now() - began)
    return out


# What a run's process does before its first token or step besides imports and the model's load:
# start its judge's worker pool and judge once (a toy reference solution).
JUDGE_ONCE = ("from engine.judge.api import Judge\nfrom engine.judge.config import JudgeConfig\n"
              "from engine.data.toy import toy_problems\np = toy_problems('train')[0]\n"
              "with Judge(JudgeConfig(workers=1)) as j: j.judge_many([(p, p.solutions[0])])\n")


def startup(model: Path, imports: str, repeats: int, *, backend: bool = False) -> list[float]:
    """A fresh interpreter: imports, the model loaded (through the evaluation's own hf backend, warmed
    up on one token, when `backend`), a judge started."""
    load = (f"from engine.evaluate.backends import make_generator\n"
            f"from engine.evaluate.backends.base import Decoding, Request\n"
            f"b = make_generator('hf', model={str(model)!r})\n"
            "list(b.stream([Request(prompt=[{'role': 'user', 'content': 'hi'}], decoding=Decoding(max_tokens=1))]))\n"
            if backend else
            f"from transformers import AutoModelForCausalLM, AutoTokenizer\n"
            f"AutoTokenizer.from_pretrained({str(model)!r}); AutoModelForCausalLM.from_pretrained({str(model)!r})\n")
    code = f"import {imports}\n" + load + JUDGE_ONCE
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return timed(lambda: subprocess.run([sys.executable, "-c", code], check=True, env=env), repeats)


def step_times(model, tokenizer, prompts: list[str], batch: int, new: int, repeats: int) -> list[float]:
    import torch

    enc = tokenizer((prompts * batch)[:batch], return_tensors="pt", padding=True, add_special_tokens=False)

    def go() -> None:
        with torch.no_grad():
            model.generate(**enc, max_new_tokens=new, min_new_tokens=new, do_sample=False,
                           pad_token_id=tokenizer.pad_token_id)
    return [t / new for t in timed(go, repeats)]


def fit_line(points: list[tuple[float, float]]) -> tuple[float, float]:
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x in xs)
    return my - slope * mx, slope


def band(values: list[float], *, speed: bool = False) -> dict[str, float]:
    lo, mid, hi = min(values), statistics.median(values), max(values)
    if speed:  # a speed's slow end is its low value
        return {"p10": round(lo / 1.2, 4), "p50": round(mid, 4), "p90": round(hi * 1.2, 4)}
    return {"p10": round(lo / 1.2, 4), "p50": round(mid, 4), "p90": round(hi * 1.2, 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20, help="trl SFT steps per repeat")
    parser.add_argument("--skip", default="", help="comma-separated parts not to measure: startup, generation, timeouts")
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from engine.data.toy import toy_problems
    from engine.tinymodel import build_tiny_model

    torch.set_num_threads(1)
    tmp = Path(tempfile.mkdtemp(prefix="rlvr-price-"))
    model_dir = build_tiny_model(tmp / "tiny", **TINY)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    problems = toy_problems("train")
    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": p.statement}], tokenize=False,
                                             add_generation_prompt=True) for p in problems]
    solutions = [p.solutions[0] for p in problems if p.solutions]
    figures: dict[str, list[float]] = {}

    prompt_tokens = [len(tokenizer(t, add_special_tokens=False).input_ids) for t in prompts]
    solution_tokens = [len(tokenizer(s, add_special_tokens=False).input_ids) for s in solutions]
    print(f"toy prompt tokens mean {statistics.fmean(prompt_tokens):.0f}, solution tokens mean "
          f"{statistics.fmean(solution_tokens):.0f} (median {statistics.median(solution_tokens):.0f})")

    skip = set(args.skip.split(","))
    if "startup" not in skip:
        figures["engine_start_s"] = startup(model_dir, "engine.cli.evaluate", args.repeats, backend=True)
        figures["trainer_start_s"] = startup(model_dir, "trl, engine.train.session", args.repeats)
        print(f"start-up: evaluation {statistics.median(figures['engine_start_s']):.1f} s, "
              f"trainer {statistics.median(figures['trainer_start_s']):.1f} s")
    if "generation" not in skip:
        generation(figures, model, tokenizer, prompts, args.repeats)
    training(figures, model, model_dir, tokenizer, prompts, solutions, problems, args, tmp)
    if "timeouts" not in skip:
        timeouts(figures, model, tokenizer, prompts, problems)
    report(figures, prompt_tokens, solution_tokens)


def timeouts(figures, model, tokenizer, prompts, problems, count: int = 96) -> None:
    """The share of the tiny model's sampled programs (toy train prompts, 64 tokens, temperature 1)
    that the judge stops for time, under the smoke study's judge limits (2 s CPU)."""
    import torch

    from engine.judge.api import Judge
    from engine.judge.config import JudgeConfig

    torch.manual_seed(0)
    completions = []
    for lo in range(0, count, 32):
        enc = tokenizer(prompts[lo:lo + 32], return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(**enc, max_new_tokens=64, do_sample=True, temperature=1.0,
                                 pad_token_id=tokenizer.pad_token_id)
        completions += tokenizer.batch_decode(out[:, enc.input_ids.shape[1]:], skip_special_tokens=True)
    with Judge(JudgeConfig(timeout_s=2.0, memory_mb=512, workers=1)) as judge:
        results = judge.judge_many(list(zip(problems[:len(completions)], completions)))
    figures["timeout_rate"] = [float(r.verdict.value == "TIMEOUT") for r in results]  # one 0/1 per program
    share = statistics.fmean(figures["timeout_rate"])
    failing = sum(not r.accepted for r in results) / len(results)
    print(f"timeouts: {share:.1%} of {len(results)} sampled programs; failing: {failing:.1%} (priors.failing_share)")


def generation(figures, model, tokenizer, prompts, repeats: int) -> None:
    per_batch = {b: step_times(model, tokenizer, prompts, b, 32, repeats) for b in (1, 8, 32)}
    tau0, kappa = fit_line([(b, statistics.median(v)) for b, v in per_batch.items()])
    # per repeat fits give the band
    fits = [fit_line([(b, per_batch[b][i]) for b in per_batch]) for i in range(repeats)]
    figures["gen_step_ms"] = [max(f[0], 1e-4) * 1000 for f in fits]
    figures["gen_step_ms_per_seq"] = [max(f[1], 1e-6) * 1000 for f in fits]
    print("generation s/step: " + ", ".join(f"b={b} {statistics.median(v) * 1000:.2f} ms" for b, v in per_batch.items())
          + f" → τ0 {tau0 * 1000:.2f} ms + κ {kappa * 1000:.3f} ms·b")


def training(figures, model, model_dir, tokenizer, prompts, solutions, problems, args, tmp) -> None:
    import torch

    from engine.judge.api import Judge
    from engine.judge.config import JudgeConfig

    batch = 16
    texts = [p + s for p, s in zip(prompts, solutions)]
    enc = tokenizer((texts * batch)[:batch], return_tensors="pt", padding=True, add_special_tokens=False)
    tokens = int(enc.attention_mask.sum())
    with torch.no_grad():
        forward = timed(lambda: model(**enc), args.repeats * 3)
    figures["logprob_tok_s"] = [tokens / t for t in forward]
    figures["sft_tok_s"] = sft_throughput(model_dir, prompts, solutions, tokenizer, args.steps, args.repeats, tmp)
    figures["update_tok_s"] = list(figures["sft_tok_s"])
    print(f"training: trl SFT {statistics.median(figures['sft_tok_s']):.0f} tok/s, forward "
          f"{statistics.median(figures['logprob_tok_s']):.0f} tok/s (batch {batch}, {tokens} tokens)")

    figures["save_s"] = timed(lambda: model.save_pretrained(tmp / "saved"), args.repeats)
    pairs = [(p, p.solutions[0]) for p in problems if p.solutions][:96]

    def judge_all() -> None:  # the worker's CPU time counts once it has exited
        with Judge(JudgeConfig(workers=1)) as judge:
            judge.judge_many(pairs)
    figures["judge_cpu_s"] = [t / len(pairs) for t in timed(judge_all, args.repeats)]
    print(f"judge: {statistics.median(figures['judge_cpu_s']) * 1000:.1f} ms per toy sample on one worker")
    figures["step_overhead_s"] = [0.0]


def report(figures, prompt_tokens, solution_tokens) -> None:
    print("\n# registry/hardware.yaml profiles.cpu.constants (measured by bench/price_calibrate.py)")
    speeds = {"logprob_tok_s", "sft_tok_s", "update_tok_s"}
    for name, values in figures.items():
        if name == "timeout_rate":  # a share seen once: from none up to its 90 % upper bound
            share, n = statistics.fmean(values), len(values)
            b = {"p10": 0.0, "p50": round(share, 4), "p90": round(max(share * 1.5, math.log(10) / n), 4)}
        else:
            b = band(values, speed=name in speeds)
        print(f"      {name}: {{p10: {b['p10']}, p50: {b['p50']}, p90: {b['p90']}}}")
    print(f"    priors: prompt_tokens {statistics.fmean(prompt_tokens):.0f}, "
          f"sft_target_tokens {statistics.fmean(solution_tokens):.0f}")


def sft_throughput(model_dir: Path, prompts: list[str], solutions: list[str], tokenizer, steps: int, repeats: int,
                   tmp: Path) -> list[float]:
    """Tokens per second of trl's SFTTrainer at batch 16 (the smoke study's), start-up excluded."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    from engine.train.session import CPU_DEFAULTS, CPU_OWNED

    rows = Dataset.from_list([{"prompt": [{"role": "user", "content": p}], "completion": [{"role": "assistant",
                              "content": s}]} for p, s in zip(prompts, solutions)])
    mean_tokens = statistics.fmean(len(tokenizer(p + s, add_special_tokens=False).input_ids)
                                   for p, s in zip(prompts, solutions))

    class Clock(TrainerCallback):
        began = 0.0
        elapsed = 0.0

        def on_step_begin(self, args, state, control, **kw):  # noqa: ANN001
            if state.global_step == 1:  # the first step pays warm-up
                Clock.began = cpu_now()

        def on_train_end(self, args, state, control, **kw):  # noqa: ANN001
            Clock.elapsed = cpu_now() - Clock.began

    out = []
    for i in range(repeats):
        # trained as the trl session trains on a CPU (float32, no gradient checkpointing): trl's own
        # defaults (bf16 autocast, checkpointing) measured 8.5x slower than the smoke study's SFT
        config = SFTConfig(output_dir=str(tmp / f"sft{i}"), max_steps=steps, per_device_train_batch_size=16,
                           learning_rate=1e-3, report_to=[], save_strategy="no", logging_steps=1,
                           use_cpu=True, dataloader_num_workers=0, **CPU_DEFAULTS, **CPU_OWNED)
        trainer = SFTTrainer(model=AutoModelForCausalLM.from_pretrained(model_dir), args=config, train_dataset=rows,
                             processing_class=tokenizer, callbacks=[Clock()])
        trainer.train()
        out.append((steps - 1) * 16 * mean_tokens / Clock.elapsed)
    return out


if __name__ == "__main__":
    main()
