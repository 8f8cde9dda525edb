"""The reward judges like the evaluation: verl's `compute_score` and trl's `JudgeReward` read the
run's frozen `judge:` block (backend, limits, compare mode) from its config.yaml, so a program
gets from the reward the verdict the run's evaluations give it — never the defaults'."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from engine.judge import reward as reward_score
from engine.judge.api import Judge
from engine.judge.ground_truth import ground_truth_from_problem
from engine.judge.reward_settings import RewardSettings
from engine.judge.verdict import Verdict
from engine.plan.frozen import read_frozen_run
from engine.problem import Problem, StdioTest
from engine.train.rollout_reward import JudgeReward

THIRD = Problem(id="toy/third", source="toy", split="train", kind="stdio", statement="print 1/3",
                stdio_tests=[StdioTest(input="\n", output="0.3333333\n")])
CLOSE = "```python\nprint('0.33333334')\n```"  # right within 1e-6, not token for token
SLOW = "```python\nimport time\nt = time.process_time()\nwhile time.process_time() - t < 1.5:\n    pass\nprint('0.3333333')\n```"
HUNGRY = "```python\nblock = bytearray(300 * 1024 * 1024)\nprint('0.3333333')\n```"


def _run_dir(tmp_path: Path, judge: dict) -> Path:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    config = {"run_id": "r", "kind": "grpo", "base_model": {"path": "tiny"}, "datasets": {}, "judge": judge}
    with (run_dir / "config.yaml").open("w") as handle:
        YAML(typ="safe").dump(config, handle)
    return run_dir


def _verdicts(run_dir: Path, program: str) -> tuple[str, str, str]:
    """(evaluation, verl reward, trl reward) verdicts of `program` on THIRD."""
    with Judge(read_frozen_run(run_dir).judge_config()) as judge:
        evaluation = judge.judge(THIRD, program).verdict.value
    truth = ground_truth_from_problem(THIRD)
    verl = reward_score.compute_score("rlvr", program, truth, run_config=str(run_dir / "config.yaml"))
    trl = JudgeReward(run_dir, mode="dense", keep="all", attempt="a")
    trl(prompts=["p"], completions=[program], ground_truth=[truth], problem_id=[THIRD.id])
    traced = json.loads((run_dir / "traces" / "rollouts.jsonl").read_text().splitlines()[-1])
    return evaluation, verl["verdict"], traced["verdict"]


@pytest.mark.parametrize("judge, program, verdict", [
    ({"timeout_s": 0.5}, SLOW, Verdict.TIMEOUT),  # default 6 s: accepted
    ({"memory_mb": 128}, HUNGRY, None),  # default 1024 MB: accepted
    ({"compare": "float", "float_tol": 1e-6}, CLOSE, Verdict.ACCEPTED),  # default tokens: wrong answer
], ids=["timeout", "memory", "compare-float"])
def test_reward_and_evaluation_agree_under_the_runs_judge(tmp_path, judge, program, verdict):
    evaluation, verl, trl = _verdicts(_run_dir(tmp_path, judge), program)
    assert verl == evaluation and trl == evaluation
    assert evaluation != Verdict.ACCEPTED.value if verdict is None else evaluation == verdict.value
    with Judge(RewardSettings().judge_config()) as default:  # what the reward judged with before
        assert default.judge(THIRD, program).verdict.value != evaluation


def test_reward_uses_the_runs_sandbox_fusion_backend(tmp_path, sf_server_module):
    with sf_server_module.SandboxFusionServer() as server:
        server.default = ("run",)
        run_dir = _run_dir(tmp_path, {"backend": "sandbox_fusion", "url": server.url, "compare": "float"})
        evaluation, verl, trl = _verdicts(run_dir, CLOSE)
        assert evaluation == verl == trl == Verdict.ACCEPTED.value
        # the evaluation's judge and the rewards' (verl's and trl's share one per process, and its
        # cache answers the second) both ran the program over HTTP
        assert len(server.requests) == 2


def test_judge_kwargs_beside_a_run_config_are_refused(tmp_path):
    run_dir = _run_dir(tmp_path, {"timeout_s": 0.5})
    out = reward_score.compute_score("rlvr", CLOSE, ground_truth_from_problem(THIRD),
                                     run_config=str(run_dir / "config.yaml"), timeout_s=6)
    assert out["internal_error"] == 1


def test_the_reward_logs_where_its_time_went(tmp_path):
    """A step's metric log shows the judge's share of the step: batch time, the longest queue wait,
    the slowest sample, timeouts (the cost page puts them beside generation and update)."""
    run_dir = _run_dir(tmp_path, {"timeout_s": 0.5})
    truth = ground_truth_from_problem(THIRD)
    logged: dict[str, float] = {}
    reward = JudgeReward(run_dir, mode="dense", keep=0, attempt="a")
    fresh = [p.replace("```python\n", "```python\n# never judged before in this process\n") for p in (SLOW, CLOSE)]
    reward.begin_step()
    time.sleep(0.2)  # the step's generation, before the rollouts are scored
    reward(prompts=["p", "p"], completions=fresh, ground_truth=[truth, truth], problem_id=[THIRD.id] * 2,
           log_metric=logged.__setitem__)
    assert logged["judge/timeouts"] == 1.0 and logged["judge/timeout_rate"] == 0.5
    assert 0.5 <= logged["judge/slowest_sample_s"] <= logged["judge/judge_s"]
    assert 0.0 <= logged["judge/judge_queue_wait_s"] <= logged["judge/judge_s"]
    assert 0.2 <= logged["judge/generate_s"] < 0.2 + logged["judge/judge_s"]
