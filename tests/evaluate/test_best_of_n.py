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
