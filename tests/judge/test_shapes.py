"""Callers hand the judge everything pending in one stream: best-of-n, repair feedback, the GRPO
rewards (trl per step, verl's concurrent calls and its batch entry); the judge sizes itself from
the run's CPUs; its result cache is bounded."""

from __future__ import annotations

import threading

import pytest

from engine.data.toy import toy_problems
from engine.evaluate.best_of_n import choose
from engine.evaluate.records import GenerationRecord, Keys
from engine.judge import reward as reward_score
from engine.judge.api import Judge
from engine.judge.config import JudgeConfig, usable_cpus
from engine.judge.ground_truth import ground_truth_from_problem
from engine.judge.local.pool import worker_cpus
from engine.problem import FunctionTests, Problem
from engine.repair.loop import Answer, repair
from engine.train.rollout_reward import JudgeReward

ADD = Problem(id="toy/add", source="toy", split="train", kind="function", statement="add", entry_point="add",
              prompt="def add(a, b):\n", function_tests=FunctionTests(asserts=["assert add(1, 2) == 3",
                                                                               "assert add(0, 0) == 0"]))
GOOD = "```python\ndef add(a, b):\n    return a + b\n```"
HALF = "```python\ndef add(a, b):\n    return 3\n```"


@pytest.fixture
def streams(monkeypatch) -> list[int]:
    """How many items each `judge_stream` call was given (a spy on the real judge)."""
    calls: list[int] = []
    real = Judge.judge_stream

    def counted(self, items, **kw):
        items = list(items)
        calls.append(len(items))
        return real(self, items, **kw)

    monkeypatch.setattr(Judge, "judge_stream", counted)
    return calls


def test_best_of_n_judges_every_problems_candidates_in_one_stream(streams):
    problems = [p for p in toy_problems("valid", 0) if p.kind == "stdio"][:3]
    keys = Keys(model="m", protocol="p", idlist="i")
    gens = [GenerationRecord(dataset="d", problem_id=p.id, sample=k, keys=keys, prompt_tokens=1, completion_tokens=1,
                             finish_reason="stop", latency_s=0.0, seed=0, completion=f"```python\n{p.solutions[0]}\n```")
            for p in problems for k in range(2)]
    with Judge(JudgeConfig(workers=2)) as judge:
        chosen = choose(problems, [p.statement for p in problems], gens, judge)
    assert [c.public_pass_ratio for c in chosen] == [1.0] * 3
    assert streams == [6]


def test_repair_feedback_for_a_round_is_one_stream(streams):
    problem = next(p for p in toy_problems("valid", 0) if p.kind == "stdio")
    wrong = "```python\nprint('nope')\n```"
    first = [Answer(key=f"a{k}", problem=problem, conversation=[{"role": "user", "content": problem.statement}],
                    completion=wrong + f"\n# {k}", result=_failed(problem)) for k in range(3)]
    fixed = f"```python\n{problem.solutions[0]}\n```"
    with Judge(JudgeConfig(workers=2)) as judge:
        chains = repair(first, judge=judge, rounds=2, text=lambda g: g, generate=lambda convs: [fixed for _ in convs])
    assert [a.result.accepted for a in chains.rounds[-1]] == [True] * 3
    assert "public tests" in chains.rounds[-1][0].feedback
    assert streams == [3, 3]  # public feedback for the round, then the new answers


def _failed(problem: Problem):
    from engine.judge.verdict import SampleResult, Verdict

    return SampleResult(problem_id=problem.id, verdict=Verdict.WRONG_ANSWER, accepted=False, passed=0, total=1,
                        pass_ratio=0.0)


def test_the_batch_reward_is_one_stream_and_equals_the_per_sample_reward(streams):
    truth = ground_truth_from_problem(ADD)
    texts = [GOOD, HALF, "no code here", GOOD + "\n# again"]
    batch = reward_score.compute_score_batch(["toy"] * 4, texts, [truth] * 4, [None, None, {"reward_mode": "sparse"}, None])
    assert [r["score"] for r in batch] == [1.0, 0.5, 0.0, 1.0]
    assert sorted(streams) == [1, 3]  # one stream per reward mode present (dense, sparse)
    del streams[:]
    single = [reward_score.compute_score("toy", t, truth) for t in texts[:2]]
    assert [r["score"] for r in single] == [r["score"] for r in batch[:2]]
    assert [r["verdict"] for r in single] == [r["verdict"] for r in batch[:2]]


def test_concurrent_reward_calls_are_judged_together(streams):
    """verl's reward loop scores a step's samples as concurrent calls: they share one stream, with
    no thread per sample."""
    truth = ground_truth_from_problem(ADD)
    out: list[dict] = [{}] * 8
    gate = threading.Barrier(8)

    def call(k: int) -> None:
        gate.wait()
        out[k] = reward_score.compute_score("toy", GOOD + f"\n# {k}", truth)

    threads = [threading.Thread(target=call, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r["score"] for r in out] == [1.0] * 8
    assert sum(streams) == 8 and len(streams) <= 2


def test_the_trl_reward_judges_a_step_in_one_call(streams, tmp_path):
    truth = ground_truth_from_problem(ADD)
    (tmp_path / "config.yaml").write_text("judge: {timeout_s: 2.0}\n")  # the run's frozen judge settings
    reward = JudgeReward(tmp_path, mode="dense", keep=2, attempt="1")
    rewards = reward(prompts=["p"] * 4, completions=[GOOD, HALF, GOOD, HALF], ground_truth=[truth] * 4,
                     problem_id=[ADD.id] * 4)
    assert rewards == [1.0, 0.5, 1.0, 0.5] and streams == [4]


def test_the_result_cache_keeps_the_most_recently_used():
    programs = [f"def add(a, b):\n    return a + b  # {k}\n" for k in range(3)]
    with Judge(JudgeConfig(workers=1, cache_size=2)) as judge:
        for p in programs:
            judge.judge(ADD, p, code_is_program=True)
        assert judge.stats()["cache_entries"] == 2
        assert judge.judge(ADD, programs[2], code_is_program=True).cached  # kept
        assert not judge.judge(ADD, programs[0], code_is_program=True).cached  # forgotten first


def test_the_judge_sizes_itself_from_the_runs_cpus(monkeypatch):
    monkeypatch.setenv("RLVR_CPUS", "1")
    assert usable_cpus() == 1 and JudgeConfig().workers == 1
    # Inside a run the workers float: concurrent runs would otherwise all pin worker i to CPU i.
    assert worker_cpus(JudgeConfig(workers=64)) is None
    monkeypatch.setenv("RLVR_CPUS", "not a number")
    assert JudgeConfig().workers == usable_cpus() >= 1
