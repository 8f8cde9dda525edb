"""A flywheel DPO run on what a GRPO run left: the rejected answers come from the policy the DPO
starts from, asked with the prompt that drew them, and a harvest with nothing to learn from is a
result. The runs are materialized from a spec; the GRPO run's outputs (its model, its traces, its
chosen checkpoint) are written here instead of trained, the rest is real (the judge, the hand-off)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from engine.runs.materialize import materialize
from engine.runs.preflight import preflight
from engine.train import dpo, flywheel
from engine.train.flywheel_rows import flywheel_counts
from engine.train.outcome import Chosen, TrainingOutcome, read_outcome, write_outcome
from engine.train.session import TrainRun

SPEC = """\
name: wheel
base_model: {{path: {model}}}
datasets:
  toy_train: {{source: toy, split: train, role: train, ids: train_2.txt}}
protocols:
  greedy: {{preset: greedy, max_tokens: 8}}
  grpo_rollout: {{temperature: 1.0, max_tokens: 8, n: 2, prompt: short_chat}}
  dpo_rollout: {{temperature: 1.0, max_tokens: 8, n: 2}}
phases:
  sft: {{kind: sft, trainer: trl, train: toy_train}}
  grpo: {{kind: grpo, from: sft, trainer: trl, train: toy_train, reward: dense, rollout: grpo_rollout, traces: all}}
  dpo_fw:
    kind: dpo
    from: grpo
    trainer: trl
    rollout: dpo_rollout
    pairs_from: {{failures: [WRONG_ANSWER], of: grpo, chosen: [reference]}}
  dpo_fw_sft:
    kind: dpo
    from: sft
    trainer: trl
    rollout: dpo_rollout
    pairs_from: {{failures: [WRONG_ANSWER], of: grpo, chosen: [reference]}}
seeds: [1]
"""
PROBLEMS = ["toy/plus_k_12", "toy/times_k_10"]


@pytest.fixture
def runs(tiny_model, tmp_path) -> dict[str, Path]:
    (tmp_path / "spec.yaml").write_text(SPEC.format(model=tiny_model))
    (tmp_path / "train_2.txt").write_text("\n".join(PROBLEMS) + "\n")
    checked = preflight(tmp_path / "spec.yaml")
    dirs = {d.run.phase: d.path for d in materialize(checked.plan, checked.validated, tmp_path / "runs", repo=tmp_path)}
    shutil.copytree(tiny_model, dirs["grpo"] / "model")  # what GRPO handed on
    return dirs


def traces(run_dir: Path, rows: list[dict]) -> None:
    (run_dir / "traces").mkdir(parents=True, exist_ok=True)
    (run_dir / "traces" / "rollouts.jsonl").write_text("".join(
        json.dumps({"attempt": "1", "pass_ratio": 0.0, "tokens": 3, "rounds": 1, **row}) + "\n" for row in rows))


def run_of(dirs: dict[str, Path], phase: str, model: Path) -> TrainRun:
    return TrainRun.from_argv("test", ["--run-dir", str(dirs[phase]), "--model", str(model)])


def test_a_harvest_with_nothing_to_learn_from_hands_on_the_parent_unchanged_and_says_so(runs):
    # the policy answered every training rollout right: no hard negative exists, and that is the result
    traces(runs["grpo"], [{"step": s, "problem_id": p, "completion": "right", "verdict": "ACCEPTED", "pass_ratio": 1.0}
                          for s in (1, 2) for p in PROBLEMS])
    parent = runs["grpo"] / "model"
    assert dpo.main(["--run-dir", str(runs["dpo_fw"]), "--model", str(parent)]) == 0
    outcome = read_outcome(runs["dpo_fw"])
    assert outcome is not None and outcome.unchanged and "no failure of WRONG_ANSWER" in outcome.unchanged
    assert outcome.chosen is not None and "unchanged" in outcome.chosen.why and outcome.expected_steps == 0
    for weights in parent.glob("*.safetensors"):  # the parent's model, byte for byte
        assert (runs["dpo_fw"] / "model" / weights.name).read_bytes() == weights.read_bytes()
    report = json.loads((runs["dpo_fw"] / "data" / "pairs.report.json").read_text())
    assert report["pairs"] == 0 and "no failure of WRONG_ANSWER among 4" in report["nothing_to_learn"]
    counts = flywheel_counts(runs["dpo_fw"])
    assert counts["nothing_to_learn"] == 1.0 and counts["pairs"] == 0


def test_hard_negatives_come_from_the_policy_the_dpo_starts_from_with_the_prompt_that_drew_them(runs):
    a, b = PROBLEMS
    asked = [{"role": "user", "content": "the prompt step 4 was asked"}]
    traces(runs["grpo"], [
        {"step": 1, "problem_id": a, "completion": "from the first policy", "verdict": "WRONG_ANSWER"},
        {"step": 4, "problem_id": a, "completion": "from the chosen checkpoint", "verdict": "WRONG_ANSWER",
         "prompt": asked},
        {"step": 6, "problem_id": a, "completion": "from a policy past the chosen one", "verdict": "WRONG_ANSWER"},
        {"step": 6, "problem_id": b, "completion": "traced without its prompt", "verdict": "WRONG_ANSWER"},
    ])
    # GRPO handed on its step-3 checkpoint: the policy that drew step 4's rollouts
    write_outcome(runs["grpo"], TrainingOutcome(trainer="trl", chosen=Chosen(step=3, path="checkpoints/checkpoint-3",
                                                                             why="best")))
    pairs, report = dpo.hard_negative_pairs(run_of(runs, "dpo_fw", runs["grpo"] / "model"))
    by_problem = {p.problem_id: p for p in pairs}
    assert report.start_policy == 3
    assert by_problem[a].rejected == "from the chosen checkpoint" and by_problem[a].rejected_step == 4
    assert dpo._plain(by_problem[a].prompt) == asked
    # no prompt in the trace: GRPO's own template renders it (short_chat), not the DPO run's rollout template
    grpo_prompt = flywheel.source_choice(runs["grpo"]).prompt
    own_prompt = run_of(runs, "dpo_fw", runs["grpo"] / "model").choice("rollout").prompt
    problem = next(p for loaded in run_of(runs, "dpo_fw", runs["grpo"] / "model").datasets("harvest")
                   for p in loaded.problems if p.id == b)
    assert dpo._plain(grpo_prompt(problem)) != dpo._plain(own_prompt(problem))
    assert dpo._plain(by_problem[b].prompt) == dpo._plain(grpo_prompt(problem))

    # a DPO that starts from GRPO's own parent (sft) takes the rollouts that parent drew: step 1
    pairs, report = dpo.hard_negative_pairs(run_of(runs, "dpo_fw_sft", runs["sft"] / "model"))
    assert report.start_policy == 0
    assert {p.problem_id: p.rejected for p in pairs}[a] == "from the first policy"
