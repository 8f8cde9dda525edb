"""A toy study run, then edited and run again, in a real lineage file with real sample records:
base + SFT on three seeds scoring 0.75; then the SFT learning rate made useless (its runs score
0.000) and seed 3 dropped. The runs the edit replaced stay in lineage, as they do after
`rlvr-run SPEC` on an edited spec. For the tests of the pages, `status`, `price` and the ETA."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Optional

from engine.evaluate.eval_run import METRICS_FILE, DatasetMetrics, EvalOutput
from engine.evaluate.records import Keys, SampleRecord, append
from engine.runs.lineage import Metric, PlanRecords, RunRecord, RunState, SpecRecord, open_lineage

NAME = "toy"
PROBLEMS = 20
PROTOCOL = {"name": "greedy", "temperature": 0.0, "top_p": 1.0, "max_tokens": 64, "n": 1}
KEYS = Keys(model="m", protocol="p" * 64, idlist="i" * 64)
SPEC = """\
name: toy
base_model: tiny-coder
seeds: {seeds}
datasets:
  toy_train: {{source: toy, split: train, role: train}}
  toy_valid: {{source: toy, split: valid, role: valid}}
protocols:
  greedy: {{preset: greedy, max_tokens: 64}}
evaluate:
  every_phase: {{datasets: [toy_valid], protocol: greedy}}
phases:
  base: {{kind: eval}}
  sft:
    kind: sft
    from: base
    train: toy_train
    hparams: {{learning_rate: {lr}, max_steps: 600}}
"""
LR_LINE = 17  # `hparams:` of sft in SPEC
SEEDS_LINE = 3


def spec_text(seeds: list[int], lr: str) -> str:
    return SPEC.format(seeds=json.dumps(seeds), lr=lr)


def record_plan(root: Path, seeds: list[int], lr: str, *, accepted: int,
                leave: Optional[dict[str, RunState]] = None) -> dict[str, str]:
    """Record the spec and its plan as `rlvr-run SPEC` does, and run it: every new run succeeds
    (its SFT evaluations accept `accepted` of the problems) unless `leave` names the state it is
    left in. Returns each run's label (`sft@1`, `eval:sft@1`, `eval:base`) → id."""
    text = spec_text(seeds, lr)
    runs: list[RunRecord] = []
    ids: dict[str, str] = {}

    def add(label: str, phase: str, seed: Optional[int], kind: str, config: dict) -> str:
        rid = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:12]
        run_dir = root / NAME / rid
        run_dir.mkdir(parents=True, exist_ok=True)
        runs.append(RunRecord(id=rid, spec_name=NAME, phase=phase, seed=seed, kind=kind,
                              config_json=json.dumps({"run_id": rid, **config}), run_dir=str(run_dir)))
        ids[label] = rid
        return rid

    def evaluation(phase: str, seed: Optional[int], parent: Optional[str]) -> dict:
        return {"spec": NAME, "phase": phase, "variant": None, "kind": "eval", "schedule": "every_phase", "seed": seed,
                "parents": [parent] if parent else [], "evaluates": parent,
                "datasets": {"toy_valid": {"source": "toy", "split": "valid", "uses": ["evaluate"]}},
                "protocols": {"evaluate": PROTOCOL}}

    add("eval:base", "base", None, "eval", evaluation("base", None, None))
    for seed in seeds:
        sft = add(f"sft@{seed}", "sft", seed, "sft", {
            "spec": NAME, "phase": "sft", "variant": None, "kind": "sft", "schedule": None, "seed": seed,
            "parents": [], "evaluates": None, "hparams": {"learning_rate": float(lr), "max_steps": 600},
            "datasets": {"toy_train": {"source": "toy", "split": "train", "uses": ["train"]}}})
        add(f"eval:sft@{seed}", "sft", seed, "eval", evaluation("sft", seed, sft))
    with open_lineage(root / "lineage.sqlite") as lineage:
        lineage.record_spec(SpecRecord(name=NAME, path=str(root / "toy.yaml"), text=text,
                                       sha256=hashlib.sha256(text.encode()).hexdigest()))
        new = set(lineage.record_plan_records(PlanRecords(runs=runs)))
        for label, rid in ids.items():
            if rid not in new:
                continue  # planned before: an unchanged run keeps its state and numbers
            lineage.set_state(rid, RunState.queued)
            state = (leave or {}).get(label, RunState.succeeded)
            if state is RunState.queued:
                continue
            lineage.set_state(rid, RunState.running)
            lineage.set_state(rid, state, "exit 0, outputs complete" if state is RunState.succeeded else "exit 1")
            if state is RunState.succeeded and label.startswith("eval:"):
                seed = next(r.seed for r in runs if r.id == rid)
                lineage.record_outputs(_evaluate(Path(root / NAME / rid), rid, seed, 1 if label == "eval:base" else accepted))
    return ids


def _evaluate(run_dir: Path, rid: str, seed: Optional[int], accepted: int) -> list[Metric]:
    """Sample records and metrics of one evaluation: problems p0.. accepted in a seed-dependent set."""
    records = [SampleRecord(dataset="toy_valid", problem_id=f"p{i:02d}", sample=0, keys=KEYS, prompt_tokens=10,
                            completion_tokens=5, finish_reason="stop", latency_s=0.1, seed=0, completion="x",
                            verdict="ACCEPTED" if ok else "WRONG_ANSWER", accepted=ok, pass_ratio=float(ok),
                            passed=int(ok), total=1, format_ok=True, judge_s=0.01, judge_version="judge-v1")
               for i in range(PROBLEMS) for ok in [(i + (seed or 0)) % PROBLEMS < accepted]]
    append(run_dir / "outputs" / "samples" / "toy_valid.jsonl", records)
    value = accepted / PROBLEMS
    values = {"accepted@1": value, "pass_ratio_mean": value, "exec_success": 1.0, "problems": float(PROBLEMS),
              "samples": float(PROBLEMS)}
    (run_dir / "outputs" / METRICS_FILE).write_text(EvalOutput(run_id=rid, datasets=[DatasetMetrics(
        dataset="toy_valid", protocol="greedy", protocol_sha256=KEYS.protocol, idlist_sha256=KEYS.idlist,
        judge_version="judge-v1", seed=seed, expected_samples=PROBLEMS, model=KEYS.model, metrics=values)]).model_dump_json())
    return [Metric(run_id=rid, dataset="toy_valid", protocol="greedy", seed=seed, name=name, value=v,
                   protocol_sha256=KEYS.protocol, idlist_sha256=KEYS.idlist, judge_version="judge-v1")
            for name, v in values.items()]


def build(root: Path, *, stale_queued: bool = False) -> tuple[dict[str, str], dict[str, str]]:
    """The study before (three seeds, SFT scoring 0.75) and after the edit (seeds 1 and 2, a
    useless learning rate: 0.000). `stale_queued`: the first run was killed with seed 3's
    evaluation still queued. Returns (before, after) label → id."""
    before = record_plan(root, [1, 2, 3], "2.0e-3", accepted=15,
                         leave={"eval:sft@3": RunState.queued} if stale_queued else None)
    after = record_plan(root, [1, 2], "1.0e-9", accepted=0)
    return before, after
