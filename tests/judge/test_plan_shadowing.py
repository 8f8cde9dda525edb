"""The shortcut that skips parsing a program to learn which builtins it shadows must be sound.

`cases._declares_none_of` may only say True when parsing would find none of the names bound at
top level (else a test operand using, say, the program's own `sum` would be evaluated with the
builtin before the program ran). Checked on every HumanEval and MBPP reference program against
its tests' builtins, and on programs written to slip a binding past a line-based look.
"""

from __future__ import annotations

import json

import pytest

from engine.data.convert import problem_from_humaneval, problem_from_mbpp
from engine.judge.cases import _WORD, _builtins_named_in, _declares_none_of, _top_level_names, function_plan


def _suspects(problem, program: str) -> set[str]:
    t = problem.function_tests
    key = (problem.entry_point, t.candidate, t.setup, tuple(t.asserts), tuple(t.challenge), t.check)
    return set(_builtins_named_in(key) & set(_WORD.findall(program)))


def _programs(shared_datasets):
    with open(shared_datasets / "humaneval.jsonl") as fh:
        for row in map(json.loads, fh):
            yield problem_from_humaneval(row), row["prompt"] + row["canonical_solution"]
    with open(shared_datasets / "mbpp_full.jsonl") as fh:
        for row in map(json.loads, fh):
            yield problem_from_mbpp(row, sanitized=False), row["code"]


def test_the_shortcut_agrees_with_parsing_on_real_programs(shared_datasets):
    shortcut = parsed = 0
    for problem, program in _programs(shared_datasets):
        suspects = _suspects(problem, program)
        if not suspects:
            continue
        if _declares_none_of(program, suspects):
            shortcut += 1
            assert not suspects & _top_level_names(program), problem.id
        else:
            parsed += 1
    assert shortcut > 2 * parsed  # the point of it: most programs are not parsed


SHADOWING = [
    "import os; sum = 1\n",
    "from m import (a,\n    sum)\n",
    "from m import a, \\\n    sum\n",
    "import a.b as sum\n",
    "from x import y as sum\n",
    "def f():\n    pass\nsum = 1\n",
    "if True:\n    sum = 1\n",
    "for sum in []:\n    pass\n",
    "def sum(a):\n    pass\n",
    "async def sum():\n    pass\n",
    "class sum:\n    pass\n",
    "@dec\ndef sum():\n    pass\n",
    "with open('f') as sum:\n    pass\n",
    "(a,\n sum) = 1, 2\n",
    "sum: int = 1\n",
    "[sum] = [1]\n",
    '"""doc"""\nsum = 1\n',
    "def f(): pass\n\x0csum = 1\n",
    "x = [y for sum in range(3)]\n",
    "try:\n    pass\nexcept E:\n    sum = 1\n",
]


@pytest.mark.parametrize("program", SHADOWING)
def test_the_shortcut_never_misses_a_top_level_binding(program):
    assert "sum" in _top_level_names(program)
    assert not _declares_none_of(program, {"sum"})


def test_a_program_that_shadows_a_builtin_gets_its_operands_after_it_ran():
    from engine.problem import FunctionTests, Problem

    problem = Problem(id="toy/sum", source="toy", split="test", kind="function", statement="", entry_point="sum",
                      function_tests=FunctionTests(asserts=["assert sum(10, 15) == 6"]))
    plain, shadowed = function_plan(problem, "def f(): pass\n"), function_plan(problem, "def sum(a, b):\n    return 6\n")
    assert plain.public != shadowed.public  # the call moved from before the program to after it
