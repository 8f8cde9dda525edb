"""In a test, a builtin's name means the builtin, whatever the program binds to it.

A program that defines its own `set`, `sorted` or `range` would otherwise decide both sides of
an assert (or skip a check's loop) and pass without solving anything. The one exception is the
entry point: MBPP 126 asks for a function named `sum`, and its tests mean that function.
"""

from __future__ import annotations

import pytest

from engine.judge.api import Judge, JudgeConfig
from engine.judge.cases import function_plan
from engine.problem import FunctionTests, Problem

SETS = Problem(id="toy/sets", source="toy", split="test", kind="function", statement="", entry_point="f",
               function_tests=FunctionTests(asserts=["assert set(f(3)) == set([1, 2, 3])",
                                                     "assert sorted(f(2)) == [1, 2]"]))
LOOP = Problem(id="toy/loop", source="toy", split="test", kind="function", statement="", entry_point="f",
               function_tests=FunctionTests(candidate="candidate", check=(
                   "def check(candidate):\n    for n in range(1, 4):\n"
                   "        assert candidate(n) == list(range(1, n + 1))\n")))
RIGHT = "def f(n):\n    return list(range(1, n + 1))\n"
SUM = Problem(id="toy/sum", source="toy", split="test", kind="function", statement="", entry_point="sum",
              function_tests=FunctionTests(asserts=["assert sum(10, 15) == 6"]))


@pytest.fixture(scope="module")
def judge():
    with Judge(JudgeConfig(timeout_s=2.0, cache=False, workers=2)) as j:
        yield j


@pytest.mark.parametrize("problem,program", [
    (SETS, "def set(*a):\n    return 0\ndef sorted(*a):\n    return [1, 2]\ndef f(n):\n    return None\n"),
    (SETS, "set = sorted = lambda *a: 0\ndef f(n):\n    return None\n"),
    (LOOP, "def range(*a):\n    return []\ndef f(n):\n    return None\n"),
    (LOOP, "list = lambda *a: None\ndef f(n):\n    return None\n"),
], ids=["assert-def", "assert-assign", "check-range", "check-list"])
def test_a_program_binding_builtins_decides_nothing(judge, problem, program):
    result = judge.judge(problem, program, code_is_program=True)
    assert not result.accepted and result.passed == 0, result
    assert judge.judge(problem, RIGHT, code_is_program=True).accepted


def test_a_program_may_use_its_own_builtin_named_helpers(judge):
    program = "def max(xs):\n    return -1\ndef f(n):\n    return [x for x in range(1, n + 1) if max([x]) < 0]\n"
    assert judge.judge(SETS, program, code_is_program=True).accepted


def test_an_entry_point_named_like_a_builtin_is_the_programs():
    leaf = function_plan(SUM).public["units"][0]["leaves"][0]
    assert leaf["phase"] == "after"  # `sum(10, 15)` runs after the program, calling its `sum`
    other = function_plan(SETS).public["units"][0]["leaves"]
    assert [leaf.get("phase") for leaf in other] == ["after", "before"]  # `set([1, 2, 3])` is the builtin's


def test_an_entry_point_named_like_a_builtin_is_called(judge):
    assert judge.judge(SUM, "def sum(a, b):\n    return 6\n", code_is_program=True).accepted
    assert not judge.judge(SUM, "def f(a, b):\n    return 6\n", code_is_program=True).accepted


def test_mbpp_126_keeps_its_own_sum_through_the_reward_row(judge, datasets_dir):
    """The converter names `sum` as MBPP 126's entry point (its reference defines it), and the
    reward row carries the entry point, not the reference: the tests still mean the program's."""
    import json

    from engine.data.convert import problem_from_mbpp
    from engine.judge.ground_truth import RewardTests, ground_truth_from_problem

    with open(datasets_dir / "mbpp_full.jsonl") as fh:
        row = next(r for r in map(json.loads, fh) if r["task_id"] == 126)
    problem = problem_from_mbpp(row, sanitized=False)
    assert problem.entry_point == "sum"
    from_row = RewardTests.parse(ground_truth_from_problem(problem)).to_problem()
    assert not from_row.solutions
    assert judge.judge(from_row, row["code"], code_is_program=True).accepted
