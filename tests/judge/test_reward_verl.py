"""engine/reward.py loaded through verl's own custom-reward loader (verl 0.9.1 on CPU), real samples.

`get_custom_reward_fn` is what verl's reward-loop workers call; its result is
called exactly as `NaiveRewardManager.run_single` does (keywords, reward_kwargs
merged). The returned dicts then go through verl's own validation aggregation
(`process_validation_metrics`) and the numpy stacking the agent loop applies.
The judge runs on both backends: `local`, and `sandbox_fusion` against the local
HTTP server of tests/judge/sandbox_fusion_server.py (127.0.0.1, runs code for real).
verl's import takes ~7 s, so everything verl-related lives in this one module.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from engine.data.convert import (
    problem_from_codecontests_derived,
    problem_from_humaneval,
)
from engine.judge.ground_truth import ground_truth_from_problem

REWARD_PY = Path(__file__).resolve().parents[2] / "engine" / "reward.py"


@pytest.fixture(scope="module", params=["local", "sandbox_fusion"])
def score(request):
    from omegaconf import OmegaConf
    from verl.trainer.ppo.reward import get_custom_reward_fn

    kwargs = {"timeout_s": 5.0}
    server = None
    if request.param == "sandbox_fusion":
        server = request.getfixturevalue("sf_server_module").SandboxFusionServer().__enter__()
        kwargs.update(backend="sandbox_fusion", url=server.url + "/run_code", workers=8)
    config = OmegaConf.create(
        {"reward": {"custom_reward_function": {"path": str(REWARD_PY), "name": "compute_score", "reward_kwargs": kwargs}}}
    )
    fn = get_custom_reward_fn(config)
    yield fn
    if server is not None:
        server.__exit__(None, None, None)


@pytest.fixture(scope="module")
def humaneval(datasets_dir):
    rows = [json.loads(line) for line in (datasets_dir / "humaneval.jsonl").open()]
    return {r["task_id"]: r for r in rows}


def _call(fn, problem, text, mode=None):
    extra = {"index": 0, "num_turns": 1, "rollout_reward_scores": {}}
    if mode:
        extra["reward_mode"] = mode
    return fn(data_source=problem.source, solution_str=text, ground_truth=ground_truth_from_problem(problem), extra_info=extra)


def test_loader_sees_a_sync_function(score):
    import inspect

    assert not inspect.iscoroutinefunction(score)  # verl runs it in its loop's thread pool


def test_canonical_solutions_score_one(score, humaneval):
    for task in ("HumanEval/0", "HumanEval/2", "HumanEval/53", "HumanEval/163"):
        row = humaneval[task]
        out = _call(score, problem_from_humaneval(row), "```python\n" + row["prompt"] + row["canonical_solution"] + "\n```")
        assert out["score"] == 1.0 and out["acc"] == 1.0 and out["verdict"] == "ACCEPTED", (task, out)


def test_wrong_solution_scores_below_one_and_dense_is_a_fraction(score, humaneval):
    problem = problem_from_humaneval(humaneval["HumanEval/0"])  # has_close_elements, 7 asserts
    wrong = "def has_close_elements(numbers, threshold):\n    return False\n"
    out = _call(score, problem, f"```python\n{wrong}```")
    assert 0.0 < out["score"] < 1.0
    assert out["score"] == pytest.approx(out["passed"] / out["total"]) and out["verdict"] == "WRONG_ANSWER"
    sparse = _call(score, problem, f"```python\n{wrong}```", mode="sparse")
    assert sparse["score"] == 0.0 and sparse["acc"] == 0.0


def test_sparse_mode_is_zero_or_one(score, humaneval):
    row = humaneval["HumanEval/2"]
    good = _call(score, problem_from_humaneval(row), row["prompt"] + row["canonical_solution"], mode="sparse")
    assert good["score"] == 1.0


def test_multi_turn_output_scores_the_last_block(score, humaneval):
    row = humaneval["HumanEval/0"]
    problem = problem_from_humaneval(row)
    first = "```python\ndef has_close_elements(numbers, threshold):\n    return False\n```"
    text = f"{first}\nuser: 3 of 7 tests failed, try again\nassistant: fixed:\n```python\n{row['prompt']}{row['canonical_solution']}```"
    assert _call(score, problem, text)["score"] == 1.0
    assert _call(score, problem, f"```python\n{row['prompt']}{row['canonical_solution']}```\nretry:\n{first}")["score"] < 1.0


def test_codecontests_solution_scores_one(score, datasets_dir):
    with gzip.open(datasets_dir / "codecontests_train_sample_derived.jsonl.gz", "rt") as fh:
        row = json.loads(fh.readline())  # 1000_E, a single-answer problem
    problem = problem_from_codecontests_derived(row)
    problem = problem.model_copy(update={"stdio_tests": problem.stdio_tests[:5]})
    out = _call(score, problem, "```python\n" + problem.solutions[0] + "\n```")
    assert out["score"] == 1.0 and out["total"] == 5, out


def test_garbage_scores_zero_with_no_code(score, humaneval):
    out = _call(score, problem_from_humaneval(humaneval["HumanEval/0"]), "I am not sure how to solve this, sorry!")
    assert out["score"] == 0.0 and out["verdict"] == "NO_CODE" and out["internal_error"] == 0


def test_reward_loop_and_validation_accept_the_dicts(score, humaneval):
    """What verl does with the dicts: every key → reward_extra_info, stacked per key, validation metrics."""
    from verl.trainer.ppo.metric_utils import process_validation_metrics

    row = humaneval["HumanEval/0"]
    problem = problem_from_humaneval(row)
    texts = [row["prompt"] + row["canonical_solution"], "def has_close_elements(a, b):\n    return False\n", "no code"]
    outs = [_call(score, problem, t) for t in texts] + [score(data_source="x", solution_str="x", ground_truth="{bad")]
    keys = list(outs[0])
    assert all(list(o) == keys for o in outs)  # the agent loop indexes every sample by the first one's keys
    stacked = {k: np.array([o[k] for o in outs]) for k in keys}
    assert stacked["score"].dtype.kind == "f" and stacked["verdict_code"].dtype.kind == "i"
    metrics = process_validation_metrics(["humaneval"] * 4, ["u0"] * 4, {k: list(v) for k, v in stacked.items()})
    assert metrics["humaneval"]["score"]["mean@4"] == pytest.approx(np.mean(stacked["score"]))
    assert "verdict" not in metrics["humaneval"]  # strings are skipped, not averaged
    assert metrics["humaneval"]["internal_error"]["mean@4"] == 0.25  # the bad ground truth is visible
