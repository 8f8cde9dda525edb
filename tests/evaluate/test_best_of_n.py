"""The best-of-n choice sees only the public tests."""

from __future__ import annotations

from engine.data.toy import toy_problems
from engine.evaluate.best_of_n import choose
from engine.evaluate.records import GenerationRecord, Keys
from engine.judge.api import Judge
from engine.judge.config import JudgeConfig

KEYS = Keys(model="m", protocol="p", idlist="i")


def gen(problem_id: str, sample: int, code: str, tokens: int) -> GenerationRecord:
    return GenerationRecord(dataset="d", problem_id=problem_id, sample=sample, keys=KEYS, prompt_tokens=10,
                            completion_tokens=tokens, finish_reason="stop", latency_s=0.0, seed=0,
                            completion=f"```python\n{code}\n```")


def test_a_sample_that_only_fits_the_public_test_wins_when_shorter():
    problem = next(p for p in toy_problems("valid", 0) if p.kind == "stdio")
    public = next(t for t in problem.stdio_tests if t.kind == "public")
    overfit = f"print({public.output.strip()!r})"  # answers the public example, nothing else
    candidates = [gen(problem.id, 0, problem.solutions[0], tokens=40), gen(problem.id, 1, overfit, tokens=8),
                  gen(problem.id, 2, "print('nope')", tokens=4)]
    with Judge(JudgeConfig(workers=1)) as judge:
        [chosen] = choose([problem], [problem.statement], candidates, judge)
        hidden = [judge.judge(problem, c.completion).pass_ratio for c in candidates]
    assert hidden[0] == 1.0 and hidden[1] < 1.0  # the hidden tests would have picked sample 0
    assert chosen.sample == 1 and chosen.public_pass_ratio == 1.0  # the public tests tie 0 and 1: shorter wins
    assert chosen.candidates == 3 and chosen.cost_tokens == (10 + 40) + (10 + 8) + (10 + 4)


def failed(problem_id: str, sample: int) -> GenerationRecord:
    return GenerationRecord(dataset="d", problem_id=problem_id, sample=sample, keys=KEYS, prompt_tokens=10,
                            completion_tokens=0, finish_reason="error", latency_s=0.0, seed=0, completion="",
                            error="server error")


def test_a_sample_the_server_failed_to_generate_is_never_chosen():
    # all public scores 0: a GEN_ERROR (0 tokens) would win the shorter-answer tie-break
    problem = next(p for p in toy_problems("valid", 0) if p.kind == "stdio")
    candidates = [failed(problem.id, 0), gen(problem.id, 1, "print('nope')", tokens=4)]
    with Judge(JudgeConfig(workers=1)) as judge:
        [chosen] = choose([problem], [problem.statement], candidates, judge)
        blind = next(p for p in toy_problems("valid", 0) if p.kind == "function")  # no public test
        [first] = choose([blind], [blind.statement], [failed(blind.id, 0), gen(blind.id, 1, "x = 1", tokens=4)],
                         judge, without_public="first")
        [none] = choose([problem], [problem.statement], [failed(problem.id, 0), failed(problem.id, 1)], judge)
    assert chosen.sample == 1 and chosen.finish_reason == "stop" and chosen.candidates == 1
    assert first.sample == 1 and first.public_pass_ratio is None  # `first`: the first real sample
    # every sample failed: the fault stands as a fault (the completion check bounds it), no choice
    assert none.finish_reason == "error" and none.candidates == 0 and none.public_pass_ratio is None
