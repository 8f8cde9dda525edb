"""On a GPU a trainer holds the memory an engine would need: checkpoints saved while it trains are
scored after it, each in a process of its own. No GPU here: `_on_gpu` is forced, the rest is real
(a materialized sft run, the tiny model as its checkpoint, the scoring process, the judge)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from engine.plan.model import Plan
from engine.runs.materialize import materialize
from engine.runs.preflight import preflight
from engine.spec.model import PhaseKind
from engine.train import selection
from engine.train.outcome import CheckpointScore, TrainingOutcome, write_outcome
from engine.train.session import TrainRun

SPEC = """\
name: scoring
base_model: {{path: {model}}}
datasets:
  toy_train: {{source: toy, split: train, role: train}}
  toy_valid: {{source: toy, split: valid, role: valid, ids: valid_3.txt}}
protocols:
  greedy: {{preset: greedy, max_tokens: 8}}
phases:
  sft: {{kind: sft, trainer: trl, train: toy_train, select_on: toy_valid}}
seeds: [1]
allow:
  - {{rule: 3, datasets: [toy_train, toy_valid], reason: "toy families share a template"}}
"""


def sft_run(tiny_model: Path, tmp_path: Path) -> TrainRun:
    """The smoke-sized sft run, materialized (nothing trained)."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(model=tiny_model))
    (tmp_path / "valid_3.txt").write_text("toy/count_above_14\ntoy/count_above_2\ntoy/count_above_24\n")
    checked = preflight(spec)
    plan: Plan = checked.plan
    [run_dir] = [d for d in materialize(plan, checked.validated, tmp_path / "runs", repo=tmp_path)
                 if d.run.kind is PhaseKind.sft]
    return TrainRun.from_argv("test", ["--run-dir", str(run_dir.path), "--model", str(tiny_model)])


def test_a_resumed_run_chooses_from_the_scores_it_kept_without_scoring_again(tiny_model, tmp_path):
    """Scores kept in training.json (a run resumed after its checkpoints were scored) are not
    scored again; the best select_metric wins, ties go to the higher pass ratio, then the later step."""
    run = sft_run(tiny_model, tmp_path)
    scores = {2: (0.5, 0.6), 4: (0.5, 0.7), 6: (0.3, 0.9), 8: (0.5, 0.7)}
    for step in scores:
        (run.checkpoints / f"checkpoint-{step}").mkdir(parents=True)
        (run.checkpoints / f"checkpoint-{step}" / "trainer_state.json").write_text("{}")
    write_outcome(run.run_dir, TrainingOutcome(trainer="trl", checkpoints=[
        CheckpointScore(step=step, path=f"checkpoints/checkpoint-{step}",
                        metrics={"toy_valid": {"accepted@1": acc, "pass_ratio_mean": ratio}})
        for step, (acc, ratio) in scores.items()]))
    chosen = selection.choose(run)  # a checkpoint with no score would be loaded and scored: none is
    assert chosen.step == 8 and chosen.path == "checkpoints/checkpoint-8"
    assert chosen.why == "best accepted@1 on toy_valid (0.500) of 4 checkpoints"
    assert [c.step for c in run.outcome().checkpoints] == [2, 4, 6, 8]


@pytest.mark.slow  # scores two checkpoints of the tiny model, each in its own process
def test_checkpoints_saved_on_a_gpu_are_scored_after_training_each_in_its_own_process(tiny_model, tmp_path,
                                                                                        monkeypatch):
    run = sft_run(tiny_model, tmp_path)
    for step in (2, 4):
        shutil.copytree(tiny_model, run.checkpoints / f"checkpoint-{step}")
        (run.checkpoints / f"checkpoint-{step}" / "trainer_state.json").write_text("{}")
    monkeypatch.setattr(selection, "_on_gpu", lambda: True)
    apart: list[Path] = []
    real = selection._score_apart
    monkeypatch.setattr(selection, "_score_apart", lambda r, c, s: apart.append(c) or real(r, c, s))
    chosen = selection.choose(run)
    scores = run.outcome().checkpoints
    assert [s.step for s in scores] == [2, 4] and [c.name for c in apart] == ["checkpoint-2", "checkpoint-4"]
    assert all("accepted@1" in s.metrics["toy_valid"] for s in scores)
    assert chosen.step in (2, 4)
    selection.choose(run)  # scored once: a second choice scores nothing again
    assert len(apart) == 2
