"""engine/reward.py without verl: the ground-truth schema, never-raise, wall bound, fork safety.

Samples are judged by the `sandbox_fusion` backend against the local HTTP server
of tests/judge/sandbox_fusion_server.py (127.0.0.1, documented schema, runs the
code for real), so slow and broken servers can be scripted. The verl-loader
tests (both backends) are in test_reward_verl.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket

import pytest

from engine import reward
from engine.judge import reward as reward_score
from engine.judge.ground_truth import RewardTests, ground_truth_from_problem
from engine.problem import FunctionTests, Problem, StdioTest

ADD = Problem(
    id="toy/add", source="toy", split="train", kind="function", statement="add", entry_point="add",
    prompt="def add(a, b):\n", function_tests=FunctionTests(asserts=["assert add(1, 2) == 3", "assert add(0, 0) == 0"]),
)
ECHO = Problem(
    id="toy/echo", source="toy", split="train", kind="stdio", statement="echo", time_limit_s=2.0,
    stdio_tests=[StdioTest(input="a\n", output="a\n"), StdioTest(input="b\n", output="b\n")],
)
GOOD = "```python\ndef add(a, b):\n    return a + b\n```"


@pytest.fixture(scope="module")
def server(sf_server_module):
    with sf_server_module.SandboxFusionServer() as s:
        yield s


@pytest.fixture
def kw(server):
    server.default = ("run",)
    return {"backend": "sandbox_fusion", "url": server.url, "timeout_s": 2.0}


def test_ground_truth_round_trip():
    text = ground_truth_from_problem(ECHO)
    assert json.loads(text)["v"] == 1 and "statement" not in json.loads(text)
    back = RewardTests.parse(text).to_problem()
    assert back.stdio_tests == ECHO.stdio_tests and back.kind == "stdio" and back.time_limit_s == 2.0
    assert RewardTests.parse(json.loads(ground_truth_from_problem(ADD))).to_problem().function_tests == ADD.function_tests


def test_a_prompts_samples_share_one_parsed_problem():
    """The n samples of a prompt carry the same ground-truth text: parsed once, and the local
    judge's workers, which keep plans by problem, are sent its tests once."""
    text = ground_truth_from_problem(ECHO)
    assert reward_score._problem_of(text) is reward_score._problem_of(text)
    assert reward_score._problem_of(json.loads(text)) is not reward_score._problem_of(json.loads(text))


def test_dense_and_sparse(kw):
    gt = ground_truth_from_problem(ADD)
    half = "```python\ndef add(a, b):\n    return 3\n```"
    assert reward.compute_score(data_source="toy", solution_str=GOOD, ground_truth=gt, **kw)["score"] == 1.0
    dense = reward.compute_score(data_source="toy", solution_str=half, ground_truth=gt, **kw)
    assert dense["score"] == 0.5 and dense["acc"] == 0.0 and dense["verdict_code"] == reward.VERDICT_CODES["WRONG_ANSWER"]
    sparse = reward.compute_score(data_source="toy", solution_str=half, ground_truth=gt, extra_info={"reward_mode": "sparse"}, **kw)
    assert sparse["score"] == 0.0
    # reward_kwargs (the run's config) win over the row's extra_info
    forced = reward.compute_score(data_source="toy", solution_str=half, ground_truth=gt,
                                  extra_info={"reward_mode": "sparse"}, **{**kw, "mode": "dense"})
    assert forced["score"] == 0.5


def test_faults_never_raise_and_are_visible(kw, caplog):
    before = reward_score.STATS["internal_errors"]
    with caplog.at_level(logging.WARNING, logger="rlvr.reward"):
        bad_json = reward.compute_score(data_source="toy", solution_str=GOOD, ground_truth="{not json", **kw)
        bad_mode = reward.compute_score(data_source="toy", solution_str=GOOD, ground_truth=ground_truth_from_problem(ADD),
                                        **{**kw, "mode": "shaped"})
    for out in (bad_json, bad_mode):
        assert out["score"] == 0.0 and out["internal_error"] == 1 and out["verdict"] == "INTERNAL_ERROR"
    assert reward_score.STATS["internal_errors"] == before + 2
    assert "reward mode must be dense or sparse" in caplog.text


def test_server_down_is_an_internal_error_not_a_zero_for_the_model():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = reward.compute_score(data_source="toy", solution_str=GOOD, ground_truth=ground_truth_from_problem(ADD),
                               backend="sandbox_fusion", url=f"http://127.0.0.1:{port}")
    assert out["internal_error"] == 1 and out["score"] == 0.0 and out["total"] == 2


def test_wall_clock_bound(kw, server):
    server.default = ("sleep", 3.0)
    out = reward.compute_score(data_source="toy", solution_str=GOOD, ground_truth=ground_truth_from_problem(ECHO),
                               **{**kw, "wall_timeout_s": 0.5})
    assert out["internal_error"] == 1 and out["reward_wall_s"] < 2.0


def test_async_variant_matches(kw):
    gt = ground_truth_from_problem(ADD)
    out = asyncio.run(reward.compute_score_async(data_source="toy", solution_str=GOOD, ground_truth=gt, **kw))
    assert out["score"] == 1.0 and list(out) == list(reward.compute_score(data_source="toy", solution_str="", ground_truth=gt, **kw))


def test_a_forked_child_builds_its_own_judge(kw):
    """The parent's judge (thread pool, client) is not reused after fork: the child still scores."""
    gt = ground_truth_from_problem(ADD)
    assert reward.compute_score(data_source="toy", solution_str=GOOD, ground_truth=gt, **kw)["score"] == 1.0
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: score, report, leave without running pytest's teardown
        try:
            out = reward.compute_score(data_source="toy", solution_str=GOOD, ground_truth=gt, **{**kw, "wall_timeout_s": 20})
            os.write(write, json.dumps(out).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as fh:
        child = json.loads(fh.read() or "{}")
    os.waitpid(pid, 0)
    assert child.get("score") == 1.0 and child.get("internal_error") == 0
