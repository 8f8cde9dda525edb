"""Public tests are exactly what the model was shown: the prompt's worked examples, run as checks;
a function problem's scoring assertions never stand in for them (HumanEval's are hidden)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.data.loaders import load_dataset_problems
from engine.data.toy import toy_problems
from engine.errors import SpecError, UserError
from engine.evaluate.best_of_n import choose
from engine.evaluate.records import GenerationRecord, Keys
from engine.isolation.public import public_view, shown_text, worked_examples
from engine.isolation.validate import validate_spec
from engine.judge.api import Judge
from engine.judge.config import JudgeConfig
from engine.problem import FunctionTests, Problem
from engine.prompts.templates import PromptChoice, full_solution
from engine.repair.loop import Answer, repair
from engine.spec.model import DatasetSpec
from engine.spec.registry import load_registry

# Prompts whose own worked examples disagree with the reference solution (HumanEval's known
# errata): their public tests are what the model was shown, so they stay, and fail it.
WRONG_EXAMPLES = {"HumanEval/47", "HumanEval/116"}


@pytest.fixture(scope="module")
def humaneval() -> list[Problem]:
    return load_dataset_problems(DatasetSpec(source="humaneval", role="test"), name="humaneval").problems


@pytest.fixture(scope="module")
def judge():
    with Judge(JudgeConfig(workers=2)) as j:
        yield j


def _hidden(problem: Problem) -> list[str]:
    return problem.function_tests.asserts if problem.function_tests else []


def test_humaneval_public_tests_are_the_prompt_examples_never_a_hidden_assert(humaneval):
    with_public = 0
    for problem in humaneval:
        view = public_view(problem, problem.prompt)
        if view is None:
            continue
        with_public += 1
        shown = view.function_tests.asserts
        assert not set(shown) & set(_hidden(problem)), f"{problem.id}: a hidden assert became public"
        assert view.function_tests.check is None and not view.function_tests.challenge
        for check in shown:  # every public call is written in the prompt, with its result
            call = check.removeprefix("assert ").split(" == ")[0].split(" is None")[0]
            assert call.split("(")[0] in problem.prompt, (problem.id, check)
    assert 110 <= with_public < len(humaneval)  # the rest show no example: no public test at all
    he0 = next(p for p in humaneval if p.id == "HumanEval/0")
    assert public_view(he0, he0.prompt).function_tests.asserts == [
        "assert has_close_elements([1.0, 2.0, 3.0], 0.5) == False",
        "assert has_close_elements([1.0, 2.8, 3.0, 4.0, 5.0, 2.0], 0.3) == True"]


def test_reference_solutions_pass_their_public_tests(humaneval, judge):
    views = [(p, public_view(p, p.prompt)) for p in humaneval]
    views = [(p, v) for p, v in views if v is not None]
    results = judge.judge_many([(v, full_solution(p, p.solutions[0])) for p, v in views])
    failing = {p.id for (p, _), r in zip(views, results) if not r.accepted}
    assert failing == WRONG_EXAMPLES


def test_repair_feedback_on_humaneval_never_shows_a_hidden_test(humaneval, judge):
    problems = [p for p in humaneval if public_view(p, p.prompt) is not None][:8]
    wrong = "```python\ndef nothing():\n    return None\n```"
    first = [Answer(key=p.id, problem=p, conversation=[{"role": "user", "content": p.prompt}], completion=wrong,
                    result=judge.judge(p, wrong)) for p in problems]
    asked: list[str] = []

    def generate(conversations):
        asked.extend(c[-1]["content"] for c in conversations)
        return [wrong] * len(conversations)

    repair(first, generate=generate, text=lambda g: g, judge=judge, rounds=2)
    assert len(asked) == 8
    for problem, text in zip(problems, asked):
        assert "public tests" in text
        for hidden in _hidden(problem):
            assert hidden.removeprefix("assert ").strip() not in text, f"{problem.id}: hidden test in feedback"


def test_doctest_and_arrow_examples_become_checks():
    text = '''
    >>> f([])
    >>> f([1, 2]) == 3
    >>> f([4])  # one element
    4

    f([5, 5]) ➞ 10.
    f(n) == f(n - 1) + 1
    f(abc) => True
    g(1) == 2
    """'''
    assert worked_examples(text, "f") == ["assert f([]) is None", "assert f([1, 2]) == 3", "assert f([4]) == 4",
                                          "assert f([5, 5]) == 10"]


def test_an_mbpp_problem_has_the_test_its_template_shows_and_only_that():
    problem = Problem(id="mbpp/2", source="mbpp", split="test", kind="function", entry_point="similar",
                      statement="Write a function to find the shared elements from the given two lists.",
                      function_tests=FunctionTests(asserts=["assert similar((3, 4), (5, 4)) == (4,)",
                                                            "assert similar((1, 2), (2, 1)) == (1, 2)"]))
    registry = load_registry()
    shows = PromptChoice(registry=registry, template="function_chat").prompt(problem)
    hides = PromptChoice(registry=registry, template="short_chat").prompt(problem)
    assert public_view(problem, shows).function_tests.asserts == ["assert similar((3, 4), (5, 4)) == (4,)"]
    assert public_view(problem, hides) is None


def test_stdio_problems_keep_their_source_marked_public_tests():
    problem = next(p for p in toy_problems("valid", 0) if p.kind == "stdio")
    view = public_view(problem, "")
    assert view is not None and [t.kind for t in view.stdio_tests] == ["public"]


def test_the_models_own_turns_are_not_what_it_was_shown():
    messages = [{"role": "user", "content": "def f(x):\n    pass"},
                {"role": "assistant", "content": ">>> f(1)\n2"}, {"role": "user", "content": "f(3) == 4"}]
    assert shown_text(messages) == "def f(x):\n    pass"


KEYS = Keys(model="m", protocol="p", idlist="i")


def _gen(problem_id: str, sample: int, tokens: int) -> GenerationRecord:
    return GenerationRecord(dataset="d", problem_id=problem_id, sample=sample, keys=KEYS, prompt_tokens=10,
                            completion_tokens=tokens, finish_reason="stop", latency_s=0.0, seed=0,
                            completion="```python\nprint(1)\n```")


def test_best_of_n_without_public_tests_refuses_or_takes_the_declared_first_sample(judge):
    problem = next(p for p in toy_problems("valid", 0) if p.kind == "function")
    candidates = [_gen(problem.id, 0, 40), _gen(problem.id, 1, 4)]
    with pytest.raises(UserError, match="toy_valid: 1 of 1 problems have no public test"):
        choose([problem], [problem.prompt], candidates, judge, dataset="toy_valid")
    [chosen] = choose([problem], [problem.prompt], candidates, judge, without_public="first")
    assert chosen.sample == 0 and chosen.public_pass_ratio is None  # not the shorter sample 1


SPEC = """\
name: bon
base_model: tiny-coder
datasets:
  toy_test: {source: toy, split: test, role: test, ids: registry/idlists/toy_test_21.txt}
protocols:
  greedy: {preset: greedy, max_tokens: 64, prompt: short_chat}
  passk: {temperature: 0.8, n: 4, max_tokens: 64, seed: 1, prompt: short_chat}
phases:
  base: {kind: eval}
  bon: {kind: best_of_n, from: base, protocol: passk, n: 4%s}
evaluate:
  final: {datasets: [toy_test], protocol: greedy}
seeds: [1]
"""


def test_validate_refuses_a_blind_best_of_n_naming_the_dataset(tmp_path: Path):
    spec = tmp_path / "bon.yaml"
    spec.write_text(SPEC % "")
    with pytest.raises(SpecError) as info:
        validate_spec(spec)
    [diagnostic] = info.value.diagnostics
    assert diagnostic.path == "phases.bon" and diagnostic.line == 10
    assert "'toy_test'" in diagnostic.message and "12 of 21 problems" in diagnostic.message
    assert "without_public: first" in diagnostic.fix
    spec.write_text(SPEC % ", without_public: first")
    validate_spec(spec)


def test_best_of_n_refuses_a_choice_the_judge_faulted_on():
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    problem = next(p for p in toy_problems("valid", 0) if p.kind == "stdio")  # public: its source's mark
    candidates = [_gen(problem.id, 0, 40), _gen(problem.id, 1, 4)]
    # a sandbox nobody listens on: every public verdict is a fault, never a 0 that loses the choice
    with Judge(JudgeConfig(backend="sandbox_fusion", url=f"http://127.0.0.1:{port}/run_code")) as broken:
        with pytest.raises(UserError, match="judge faulted \\(INTERNAL_ERROR\\) on the public tests of 2 of 2"):
            choose([problem], [""], candidates, broken, dataset="toy_valid")
