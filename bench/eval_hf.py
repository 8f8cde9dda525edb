"""The hf generation backend with the tiny model: one prompt at a time, 8 prompts per call (the
runner's old shape: each call waits for its longest sample), and every prompt in one stream at
the backend's batch size, side by side in one run; and the share of an eval run's wall time
spent generating vs judging.

    .venv/bin/python bench/eval_hf.py [--problems 42] [--max-tokens 64] [--batch 16]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from engine.data.toy import toy_problems
from engine.evaluate.backends.base import Decoding, generate
from engine.evaluate.backends.hf import HFBackend
from engine.judge.api import Judge
from engine.judge.config import JudgeConfig
from engine.prompts.templates import PromptChoice
from engine.spec.registry import find_registry, load_registry
from engine.tinymodel import build_tiny_model


def timed(backend: HFBackend, prompts: list, decoding: Decoding, batch: int, per_call: int) -> tuple[float, int, list]:
    backend.batch_size = batch
    began = time.perf_counter()
    out = [gens for start in range(0, len(prompts), per_call)
           for gens in generate(backend, prompts[start:start + per_call], decoding)]
    return time.perf_counter() - began, sum(g.completion_tokens for gens in out for g in gens), out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--problems", type=int, default=42)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args()
    model = build_tiny_model(Path(tempfile.mkdtemp()) / "m", hidden=128, layers=4)
    problems = toy_problems("valid", 0)[: args.problems]
    choice = PromptChoice(registry=load_registry(find_registry(None)))
    prompts = [[m.model_dump() for m in choice.prompt(p)] for p in problems]
    decoding = Decoding(max_tokens=args.max_tokens)
    backend = HFBackend(model=str(model))
    rows = {}
    shapes = (("one at a time", 1, 1), ("8 per call", args.batch, 8), (f"all at once ({args.batch})", args.batch,
                                                                       len(prompts)))
    for label, batch, per_call in shapes:
        seconds, tokens, out = timed(backend, prompts, decoding, batch, per_call)
        rows[label] = (seconds, tokens)
        print(f"{label:>18}: {len(prompts) / seconds:6.2f} samples/s  {tokens / seconds:7.1f} tokens/s  ({seconds:.1f} s)")
    (one, _), (eight, _), (many, _) = rows.values()
    print(f"all at once vs one at a time: {one / many:.2f}x; vs 8 per call: {eight / many:.2f}x")
    with Judge(JudgeConfig()) as judge:
        began = time.perf_counter()
        judge.judge_many([(p, gens[0].text) for p, gens in zip(problems, out)])
        judge_s = time.perf_counter() - began
    print(f"eval wall time: generation {many:.1f} s ({many / (many + judge_s):.0%}), "
          f"judging {judge_s:.2f} s ({judge_s / (many + judge_s):.0%})")


if __name__ == "__main__":
    main()
