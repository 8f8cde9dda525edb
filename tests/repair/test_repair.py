"""The repair loop and its feedback, with the real judge on toy problems."""

from __future__ import annotations

import pytest

from engine.data.toy import toy_problems
from engine.judge.api import Judge
from engine.judge.config import JudgeConfig
from engine.repair.feedback import feedback
from engine.repair.loop import Answer, repair
from engine.isolation.public import public_view


@pytest.fixture(scope="module")
def judge():
    with Judge(JudgeConfig(workers=2)) as j:
        yield j


@pytest.fixture(scope="module")
def problems():
    stdio = [p for p in toy_problems("valid", 0) if p.kind == "stdio"][:3]
    function = [p for p in toy_problems("valid", 0) if p.kind == "function"][:3]
    return stdio + function


WRONG = "```python\nprint(0)\n```"


def test_feedback_shows_public_tests_and_never_a_private_one(problems, judge):
    for problem in problems:
        public = public_view(problem, [{"role": "user", "content": problem.prompt or problem.statement}])
        if problem.kind == "function":  # a toy function prompt shows no example: nothing is public
            assert public is None and "no public tests" in feedback(None)
            continue
        private_inputs = [t.input for t in problem.stdio_tests if t.kind != "public"]
        text = feedback(judge.judge(public, WRONG))
        assert "public tests" in text and len(text) <= 1600
        for secret in private_inputs:
            assert secret.strip() not in text, f"{problem.id}: a private test leaked into the feedback"


def test_failing_answers_get_another_round_and_link_their_parent(problems, judge):
    first = [Answer(key=f"{p.id}/0", problem=p, conversation=[{"role": "user", "content": p.statement}],
                    completion=WRONG, result=judge.judge(p, WRONG)) for p in problems]
    fixed = {p.statement: f"```python\n{p.solutions[0]}\n```" for p in problems}
    seen_feedback = []

    def generate(conversations):  # a policy that fixes its answer once it has feedback
        seen_feedback.extend(c[-1]["content"] for c in conversations)
        return [fixed[c[0]["content"]] for c in conversations]

    chains = repair(first, generate=generate, text=lambda g: g, judge=judge, rounds=3)
    assert len(chains.rounds) == 2  # round 3 not needed: every answer was fixed in round 2
    second = chains.rounds[1]
    assert all(a.round == 2 and a.result.accepted for a in second)
    assert {a.parent for a in second} == {a.key for a in first}
    assert all(c["role"] == "user" and "Fix the program" in c["content"] for c in (a.conversation[-1] for a in second))
    assert len(seen_feedback) == len(problems) and all(a.result.accepted for a in chains.last)


def test_accepted_answers_are_left_alone(problems, judge):
    p = problems[0]
    good = f"```python\n{p.solutions[0]}\n```"
    first = [Answer(key="a", problem=p, conversation=[], completion=good, result=judge.judge(p, good))]
    chains = repair(first, generate=lambda cs: pytest.fail("nothing should be regenerated"), text=str, judge=judge,
                    rounds=3)
    assert len(chains.rounds) == 1 and chains.last[0].key == "a"


def test_the_feedback_is_the_same_for_the_same_answer_however_long_the_judge_took(problems, judge):
    # the judge's wall time in the feedback made the next round's prompt vary between two runs
    problem = next(p for p in problems if p.kind == "stdio")
    public = public_view(problem, [{"role": "user", "content": problem.statement}])
    result = judge.judge(public, "```python\nimport sys\nsys.exit(1/0)\n```")
    slow = result.model_copy(update={"wall_s": result.wall_s + 1.234, "cpu_s": result.cpu_s + 1.0})
    assert feedback(result) == feedback(slow)
    assert "1.2" not in feedback(slow) and "ZeroDivisionError" in feedback(slow)


def test_the_feedback_shows_the_program_s_traceback_not_the_judge_s_own_files(problems, judge):
    # the harness frames name the folder the judge is installed in: another machine, another prompt
    problem = next(p for p in problems if p.kind == "stdio")
    public = public_view(problem, [{"role": "user", "content": problem.statement}])
    text = feedback(judge.judge(public, "```python\ndef f():\n    raise ValueError('x')\nf()\n```"))
    assert 'File "<solution>", line 2, in f' in text and "ValueError: x" in text
    assert "engine/judge" not in text and ".py\"" not in text
