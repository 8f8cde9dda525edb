"""A reward step whose judge faults pass the limit fails a trl run (verl's watcher: see
test_verl_watch.py). The faults are real ones: the judge cannot read these tests."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from engine.errors import UserError
from engine.train.early_stop import JUDGE_FAULT_SHARE, judge_fault_reason
from engine.train.grpo import RewardGuard
from engine.train.rollout_reward import JudgeReward


def _step(reward: JudgeReward, truths: list[str]) -> None:
    reward(prompts=["p"] * len(truths), completions=["```python\nprint(1)\n```"] * len(truths),
           ground_truth=truths, problem_id=[f"p{i}" for i in range(len(truths))])


def test_a_step_of_judge_faults_fails_the_run(tmp_path):
    reward = JudgeReward(tmp_path, mode="dense", keep=0, attempt="1")
    _step(reward, ["{unreadable tests"] * 4)
    assert reward.last["judge_fault_rate"] == 1.0
    guard = RewardGuard(run=None, reward=reward, timeout_rate=None)  # type: ignore[arg-type]
    with pytest.raises(UserError, match=r"judge faults \(INTERNAL_ERROR\) in 100% of the rewards at step 7"):
        guard.on_step_end(None, SimpleNamespace(global_step=7), SimpleNamespace())


def test_the_limit_is_a_share_of_the_step():
    assert judge_fault_reason(JUDGE_FAULT_SHARE, 1) is None
    assert judge_fault_reason(0.5, 2) is not None
