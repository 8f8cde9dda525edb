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
from engine.train.session import TrainRun

pytestmark = pytest.mark.slow  # trains, then scores each checkpoint in its own process

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


def test_checkpoints_saved_on_a_gpu_are_scored_after_training_each_in_its_own_process(tiny_model, tmp_path,
                                                                                        monkeypatch):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(model=tiny_model))
    (tmp_path / "valid_3.txt").write_text("toy/count_above_14\ntoy/count_above_2\ntoy/count_above_24\n")
    checked = preflight(spec)
    plan: Plan = checked.plan
    [run_dir] = [d for d in materialize(plan, checked.validated, tmp_path / "runs", repo=tmp_path)
                 if d.run.kind is PhaseKind.sft]
    run = TrainRun.from_argv("test", ["--run-dir", str(run_dir.path), "--model", str(tiny_model)])
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
