"""A real trl GRPO run that trains on nothing: the random-weight base model fails every rollout,
so every group's rewards are equal (frac_reward_zero_std 1.0) and no step updates it. The run
succeeds, lineage says it changed nothing and why, the zero-advantage share is a recorded series,
and the results page names the run and the evaluations resting on it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from engine.report.generate import write_reports
from engine.runs.completion import UNCHANGED
from engine.runs.lineage import LINEAGE_FILE, RunState, open_lineage
from engine.runs.pipeline import run_spec

sys.path.insert(0, str(Path(__file__).parent))
from test_training_runs import small_model, write_spec  # noqa: E402,F401  (the fixture is used by name)

pytestmark = pytest.mark.slow  # trains on a CPU (about a minute)

FROM_BASE = """\
  grpo:
    kind: grpo
    trainer: trl
    train: toy_train
    reward: sparse
    rollout: rollout
    hparams: {max_steps: 2, per_device_train_batch_size: 8}
"""


def test_a_grpo_run_that_trained_on_nothing_succeeds_and_says_so(small_model, tmp_path):  # noqa: F811
    root = tmp_path / "study"
    outcome = run_spec(write_spec(root, small_model, sft_steps=4, save=4, more=FROM_BASE), runs_dir=root / "runs")
    runs = {r.label: r for r in outcome.plan.runs}
    assert all(state is RunState.succeeded for state in outcome.result.states.values())
    with open_lineage(root / "runs" / LINEAGE_FILE, readonly=True) as lineage:
        grpo, sft = lineage.run(runs["grpo@1"].id), lineage.run(runs["sft@1"].id)
        shares = [m.value for m in lineage.metrics(grpo.id) if m.name == "zero_std_share"]
    assert f"{UNCHANGED}every one of its 2 steps had only zero-advantage groups" in grpo.reason
    assert shares == [1.0, 1.0]
    assert UNCHANGED not in (sft.reason or "")
    [report] = write_reports(root / "runs")
    results = (report.dir / "results.md").read_text()
    assert "## Runs that changed nothing" in results and grpo.id in results
