"""Same spec, same machine, same numbers: a small study run twice from scratch gives every
non-timing metric and every generated text (first answers, repair rounds and the feedback that
asked for them, best-of-n's choices) identically. The judge's threads finish in any order; nothing
of that order may reach a prompt, a choice or a number."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from engine.data.toy import toy_problems
from engine.evaluate.records import SampleRecord, read, sample_files
from engine.runs.lineage import RunState
from engine.runs.pipeline import run_spec

SPEC = """\
name: twice
base_model: {{path: {model}}}
datasets:
  toy_train: {{source: toy, split: train, role: train, ids: train.txt}}
  toy_valid: {{source: toy, split: valid, role: valid, ids: valid.txt}}
  toy_test: {{source: toy, split: test, role: test, test_only: true, ids: test.txt}}
protocols:
  greedy: {{preset: greedy, max_tokens: 12}}
  greedy_repair: {{preset: greedy, max_tokens: 12, rounds: 2}}
  sampled: {{temperature: 1.0, top_p: 0.95, n: 3, max_tokens: 12, seed: 7}}
phases:
  base: {{kind: eval}}
  bon: {{kind: best_of_n, from: base, protocol: sampled, n: 3, without_public: first}}
seeds: [1]
evaluate:
  every_phase: {{datasets: [toy_valid], protocol: greedy_repair}}
  final: {{datasets: [toy_test], protocol: greedy}}
allow:
  - {{rule: 3, datasets: [toy_train, toy_valid], reason: "toy families share a template"}}
  - {{rule: 3, datasets: [toy_train, toy_test], reason: "toy families share a template"}}
"""
pytestmark = pytest.mark.slow  # two whole (inference-only) studies: about a minute on two CPUs

# Timing facts: wall clocks, throughputs, latencies (a name with an `s` part: judge_s_mean, samples_per_s)
TIMING = re.compile(r"(^|[/_@])(s|latency)($|[/_@])")
TIMING_FIELDS = {"latency_s", "judge_s", "judge_cpu_s"}


def study(model: Path, root: Path) -> dict[str, object]:
    root.mkdir()
    (root / "spec.yaml").write_text(SPEC.format(model=model))
    (root / "train.txt").write_text("toy/plus_k_12\n")
    valid = toy_problems("valid", 0)
    stdio = [p.id for p in valid if p.kind == "stdio"][:4]  # public tests: repair feedback and best-of-n choose
    function = [p.id for p in valid if p.kind == "function"][:2]
    (root / "valid.txt").write_text("\n".join(stdio + function) + "\n")
    (root / "test.txt").write_text("\n".join(p.id for p in toy_problems("test", 0)[:3]) + "\n")
    outcome = run_spec(root / "spec.yaml", runs_dir=root / "runs", cpus=2)
    assert all(state is RunState.succeeded for state in outcome.result.states.values())
    seen: dict[str, object] = {}
    for run in outcome.plan.runs:
        out = root / "runs" / "twice" / run.id / "outputs"
        if (out / "metrics.json").is_file():
            for d in json.loads((out / "metrics.json").read_text())["datasets"]:
                seen[f"{run.label}/{d['dataset']}/metrics"] = {k: v for k, v in d["metrics"].items()
                                                              if not TIMING.search(k)}
        for path in sample_files(out / "samples"):
            seen[f"{run.label}/{path.name}"] = [
                r.model_dump(exclude={**dict.fromkeys(TIMING_FIELDS | {"keys"}, True),
                                      "tests": {"__all__": {"cpu_s", "wall_s"}}})  # each test's run time
                for r in read(path, SampleRecord)]
    return seen


def test_a_study_run_twice_from_scratch_gives_the_same_numbers_and_texts(tiny_model, tmp_path):
    first, second = study(tiny_model, tmp_path / "one"), study(tiny_model, tmp_path / "two")
    assert first.keys() == second.keys()
    assert any(k.endswith("/metrics") for k in first) and any(k.endswith(".jsonl") for k in first)
    repairs = [r for k, v in first.items() if k.endswith(".jsonl") for r in v if r["round"] == 2]  # type: ignore
    assert repairs and all(r["conversation"] for r in repairs)  # the feedback prompts are compared too
    differ = [k for k in first if first[k] != second[k]]
    assert not differ, f"differ between two runs of one spec: {differ}"
