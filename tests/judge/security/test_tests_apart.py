"""Every function test runs apart from the program (engine.judge.local.program.ProgramProcess).

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


def test_a_callable_argument_is_called_back_in_the_runner(judge):
    """A lambda, a builtin or a test's function passed to the program crosses as a callback: the
    program's process asks the runner to call it (a correct program was scored the model's error)."""
    assert judge.judge(CALLBACK, "def apply(fn, v):\n    return fn(v)\n", code_is_program=True).accepted
    assert not judge.judge(CALLBACK, "def apply(fn, v):\n    return fn(v) + 1\n", code_is_program=True).accepted
    keyed = Problem(id="toy/keyed", source="toy", split="test", kind="function", statement="", entry_point="pick",
                    function_tests=FunctionTests(setup="def rank(w):\n    return -len(w)", asserts=[
                        "assert pick(['ab', 'abc', 'a'], rank) == 'abc'", "assert pick([3, -7, 5], abs) == 3"]))
    good = "def pick(xs, key):\n    return min(xs, key=key)\n"
    assert judge.judge(keyed, good, code_is_program=True).accepted
    # a callback that calls into the program again while the program waits on it
    nested = Problem(id="toy/nested", source="toy", split="test", kind="function", statement="", entry_point="twice",
                     function_tests=FunctionTests(asserts=["assert twice(lambda v: inc(v), 1) == 3"]))
    program = "def inc(v):\n    return v + 1\ndef twice(fn, v):\n    return fn(fn(v))\n"
    assert judge.judge(nested, program, code_is_program=True).accepted


def test_an_argument_that_cannot_cross_is_a_judge_fault(judge):
    """Neither plain data nor callable (an instance of a class the tests define): the judge's own
    limit, said as such, never the model's error."""
    problem = Problem(id="toy/box", source="toy", split="test", kind="function", statement="", entry_point="f",
                      function_tests=FunctionTests(setup="class Box:\n    v = 3", asserts=["assert f(Box()) == 3"]))
    result = judge.judge(problem, "def f(b):\n    return b.v\n", code_is_program=True)
    assert result.verdict.value == "INTERNAL_ERROR" and "cannot pass" in result.failures[0].message


def test_the_programs_objects_cross_as_handles(judge):
    """An instance of the program's class (MBPP's `Pair`) stays in the program's process: the tests
    hold a handle they can pass back, ask attributes, truth, length, items and text of."""
    problem = Problem(id="toy/pairs", source="toy", split="test", kind="function", statement="", entry_point="chain",
                      function_tests=FunctionTests(asserts=[
                          "assert chain([Pair(5, 24), Pair(15, 25), Pair(27, 40)], 3) == 2",
                          "assert Pair(1, 2).b == 2", "assert len(Bag([1, 2])) == 2 and list(Bag([4])) == [4]",
                          "assert str(Pair(1, 2)) == 'P(1,2)' and Bag([7])[0] == 7"]))
    program = ("class Pair:\n    def __init__(self, a, b):\n        self.a, self.b = a, b\n"
               "    def __str__(self):\n        return f'P({self.a},{self.b})'\n"
               "    def __eq__(self, other):\n        return True\n"
               "class Bag(list):\n    pass\n"
               "def chain(ps, n):\n    ps = sorted(ps, key=lambda p: p.b)\n    end, k = -1, 0\n"
               "    for p in ps:\n        if p.a > end:\n            end, k = p.b, k + 1\n    return k\n")
    result = judge.judge(problem, program, code_is_program=True)
    assert result.accepted, result.failures[:1]
    # a comparison of two of its objects is never the program's `__eq__` to decide
    same = problem.model_copy(update={"function_tests": FunctionTests(asserts=["assert Pair(1, 2) == Pair(3, 4)"])})
    assert judge.judge(same, program, code_is_program=True).verdict.value == "WRONG_ANSWER"


def test_the_program_process_never_holds_the_tests(judge, table_from_memory):
    """Before the fix the program's process was forked from the runner after it had read the job:
    this program found the tests' constants in an inherited frame and was ACCEPTED."""
    result = judge.judge(table_from_memory.problem, table_from_memory.program, code_is_program=True)
    assert result.verdict.value == "WRONG_ANSWER", result
    assert judge.judge(table_from_memory.problem, table_from_memory.honest, code_is_program=True).accepted
