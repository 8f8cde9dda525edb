"""A reward step whose judge faults pass the limit fails a trl run (verl's watcher: see
test_verl_watch.py). The faults are real ones: a sandbox nobody listens on, tests the judge
cannot read."""

from __future__ import annotations

import socket
from types import SimpleNamespace

import pytest

from engine.errors import UserError
from engine.files import read_jsonl
from engine.judge.ground_truth import RewardTests
from engine.train.early_stop import JUDGE_FAULT_SHARE, judge_fault_reason
from engine.train.grpo import RewardGuard
from engine.train.rollout_reward import JudgeReward


def _step(reward: JudgeReward, truths: list[str]) -> None:
    reward(prompts=["p"] * len(truths), completions=["```python\nprint(1)\n```"] * len(truths),
           ground_truth=truths, problem_id=[f"p{i}" for i in range(len(truths))])


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_step_of_judge_faults_fails_the_run(tmp_path):
    url = f"http://127.0.0.1:{_closed_port()}/run_code"  # a broken sandbox
    (tmp_path / "config.yaml").write_text(f"judge: {{backend: sandbox_fusion, url: '{url}'}}\n")
    reward = JudgeReward(tmp_path, mode="dense", keep=0, attempt="1")
    tests = RewardTests(problem_id="p", kind="stdio", stdio_tests=[{"input": "", "output": "1\n"}]).model_dump_json()
    _step(reward, [tests] * 3 + ["{unreadable tests"])
    assert reward.last["judge_fault_rate"] == 1.0
    guard = RewardGuard(run=None, reward=reward, timeout_rate=None)  # type: ignore[arg-type]
    with pytest.raises(UserError, match=r"judge faults \(INTERNAL_ERROR\) in 100% of the rewards at step 7"):
        guard.on_step_end(None, SimpleNamespace(global_step=7), SimpleNamespace())


def test_the_limit_is_a_share_of_the_step():
    assert judge_fault_reason(JUDGE_FAULT_SHARE, 1) is None
    assert judge_fault_reason(0.5, 2) is not None


def test_a_resumed_attempt_s_first_trace_row_survives_a_torn_last_line(tmp_path):
    # a killed attempt left half a row; the next attempt's rows must all read back (the flywheel
    # harvests them), not the first one glued to the torn line and skipped with it
    (tmp_path / "config.yaml").write_text("judge: {}\n")
    traces = tmp_path / "traces" / "rollouts.jsonl"
    traces.parent.mkdir()
    traces.write_text('{"step": 4, "attempt": "1", "problem_id": "p0", "compl')
    reward = JudgeReward(tmp_path, mode="dense", keep="all", attempt="2")
    tests = RewardTests(problem_id="p", kind="stdio", stdio_tests=[{"input": "", "output": "1\n"}]).model_dump_json()
    _step(reward, [tests] * 2)
    rows = list(read_jsonl(traces))
    assert [(r["attempt"], r["problem_id"], r["verdict"]) for r in rows] == [("2", "p0", "ACCEPTED"),
                                                                           ("2", "p1", "ACCEPTED")]


def test_every_reward_batch_of_a_step_counts_not_only_its_last(tmp_path):
    """With gradient accumulation (an `overrides:` field) trl scores several batches per optimizer
    step: a faulty batch followed by a clean one is still a step of faults."""
    (tmp_path / "config.yaml").write_text("judge: {allow_unsandboxed: true}\n")
    reward = JudgeReward(tmp_path, mode="dense", keep=0, attempt="1")
    tests = RewardTests(problem_id="p", kind="stdio", stdio_tests=[{"input": "", "output": "1\n"}]).model_dump_json()
    _step(reward, ["{unreadable tests"] * 4)  # the judge cannot read them: INTERNAL_ERROR
    _step(reward, [tests] * 4)
    assert reward.last["judge_fault_rate"] == 0.0
    guard = RewardGuard(run=None, reward=reward, timeout_rate=None)  # type: ignore[arg-type]
    with pytest.raises(UserError, match=r"judge faults \(INTERNAL_ERROR\) in 50% of the rewards at step 3"):
        guard.on_step_end(None, SimpleNamespace(global_step=3), SimpleNamespace())
    _step(reward, [tests] * 4)
    guard.on_step_end(None, SimpleNamespace(global_step=4), SimpleNamespace())  # the next step is its own
