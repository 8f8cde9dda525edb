"""Tests that run code of their own run apart from the program (engine.judge.local.program.ProgramProcess).

The program's module runs in a child that only answers the tests' calls; the runner, which alone
writes reports, never runs the program. These check what that changes for honest programs: each
test still gets its own verdict, a test that kills or overruns the program's process costs only
that test, and a call the judge cannot make across processes is a judge fault, not the model's.
"""

from __future__ import annotations

import pytest

from engine.judge.api import Judge, JudgeConfig
from engine.problem import FunctionTests, Problem

# Statements, not bare asserts: each is a unit that runs code of its own.
STMTS = Problem(id="toy/stmts", source="toy", split="test", kind="function", statement="", entry_point="f",
                function_tests=FunctionTests(asserts=["x = f(1)\nassert x == 1", "x = f(2)\nassert x == 2",
                                                      "x = f(3)\nassert x == 3"]))
CALLBACK = Problem(id="toy/callback", source="toy", split="test", kind="function", statement="", entry_point="apply",
                   function_tests=FunctionTests(candidate="candidate", check=(
                       "def check(candidate):\n    assert candidate(lambda v: v + 1, 1) == 2\n")))


@pytest.fixture(scope="module")
def judge():
    with Judge(JudgeConfig(timeout_s=1.0, wall_timeout_s=2.0, cache=False, workers=2)) as j:
        yield j


def _verdicts(judge, problem, program):
    result = judge.judge(problem, program, code_is_program=True)
    every = {f.index: f.verdict.value for f in result.failures}
    return result, [every.get(i, "ACCEPTED") for i in range(result.total)]


def test_each_statement_test_gets_its_own_verdict(judge):
    result, verdicts = _verdicts(judge, STMTS, "def f(n):\n    return n if n != 2 else 0\n")
    assert verdicts == ["ACCEPTED", "WRONG_ANSWER", "ACCEPTED"] and result.passed == 2


@pytest.mark.parametrize("failing,verdict", [
    ("import os\n        os._exit(0)", "RUNTIME_ERROR"),
    ("while True: pass", "TIMEOUT"),
    ("import time\n        time.sleep(30)", "TIMEOUT"),
])
def test_a_test_that_ends_the_program_costs_only_that_test(judge, failing, verdict):
    program = f"def f(n):\n    if n == 2:\n        {failing}\n    return n\n"
    result, verdicts = _verdicts(judge, STMTS, program)
    assert verdicts == ["ACCEPTED", verdict, "ACCEPTED"], result


def test_program_state_lives_in_its_process(judge):
    program = "seen = []\ndef f(n):\n    seen.append(n)\n    return len(seen) if n != 3 else n\n"
    _, verdicts = _verdicts(judge, STMTS, program)
    assert verdicts == ["ACCEPTED", "ACCEPTED", "ACCEPTED"]  # one process for all three calls


def test_an_argument_that_cannot_cross_is_a_judge_fault(judge):
    result = judge.judge(CALLBACK, "def apply(fn, v):\n    return fn(v)\n", code_is_program=True)
    assert result.verdict.value == "INTERNAL_ERROR" and "cannot pass" in result.failures[0].message


def test_which_plans_run_apart():
    from engine.judge.cases import function_plan

    def apart(*asserts: str, setup: str = "") -> bool:
        problem = Problem(id="toy/p", source="toy", split="test", kind="function", statement="", entry_point="f",
                          function_tests=FunctionTests(setup=setup, asserts=list(asserts)))
        return function_plan(problem).public["apart"]

    assert not apart("assert f(1) == 2", "assert not f(0)", "assert f(g(1), [h(2)]) == [1]")  # values f returned
    assert apart("assert abs(f(1) - 0.5) < 1e-6")  # the answer is inside the operand
    assert apart("assert math.isclose(f(1), 0.5)", setup="import math")
    assert apart("assert f(3) == sorted([3, 1, 2])")  # an expected value the program's process would hold
    assert apart("assert near(f(1), 0.5)", setup="def near(a, b):\n    return abs(a - b) < 1e-6")
    assert apart("x = f(1)\nassert x == 1")



def test_the_program_process_never_holds_the_tests(judge, table_from_memory):
    """Before the fix the program's process was forked from the runner after it had read the job:
    this program found the tests' constants in an inherited frame and was ACCEPTED."""
    result = judge.judge(table_from_memory.problem, table_from_memory.program, code_is_program=True)
    assert result.verdict.value == "WRONG_ANSWER", result
    assert judge.judge(table_from_memory.problem, table_from_memory.honest, code_is_program=True).accepted
