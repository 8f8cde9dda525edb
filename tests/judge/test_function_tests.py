"""Function tests (MBPP asserts, HumanEval `check`) through the real judge: dense per-assert scores,
verdicts, failure reports, trusted comparison of stdlib containers, and the content-hash cache."""

from __future__ import annotations

import json
import os

import pytest

from engine.data.convert import problem_from_humaneval, problem_from_mbpp
from engine.judge.api import Judge, JudgeConfig
from engine.problem import FunctionTests, Problem


def _rows(path) -> dict:
    with open(path) as fh:
        return {json.loads(line)["task_id"]: json.loads(line) for line in fh}


@pytest.fixture(scope="module")
def mbpp(datasets_dir) -> dict:
    return {k: problem_from_mbpp(r, sanitized=False) for k, r in _rows(datasets_dir / "mbpp_full.jsonl").items()}


@pytest.fixture(scope="module")
def humaneval(datasets_dir) -> dict:
    return {k: problem_from_humaneval(r) for k, r in _rows(datasets_dir / "humaneval.jsonl").items()}


@pytest.fixture(scope="module")
def judge():
    with Judge(JudgeConfig(timeout_s=1.0, wall_timeout_s=10.0, memory_mb=512, cache=False, workers=2,
                           max_failures_reported=2)) as j:
        yield j


def test_mbpp_dense_pass_ratio_per_assert(judge, mbpp):
    problem = mbpp[17]  # square_perimeter: 10 -> 40, 5 -> 20, 4 -> 16
    result = judge.judge(problem, "def square_perimeter(a):\n    return 4 * a + (a == 4)\n", code_is_program=True)
    assert (result.passed, result.total, result.verdict.value) == (2, 3, "WRONG_ANSWER")
    assert result.pass_ratio == pytest.approx(2 / 3) and [f.index for f in result.failures] == [2]


def test_first_k_failures_report_input_expected_got(judge, mbpp):
    result = judge.judge(mbpp[17], "def square_perimeter(a):\n    return 3 * a\n", code_is_program=True)
    assert result.passed == 0 and [f.index for f in result.failures] == [0, 1]  # K = 2 of 3
    first = result.failures[0]
    assert first.input == "assert square_perimeter(10)==40" and first.expected == "40" and first.got == "30"


def test_challenge_tests_count(judge, mbpp):
    problem = mbpp[11]
    assert len(problem.function_tests.challenge) == 2
    result = judge.judge(problem, problem.solutions[0], code_is_program=True)
    assert result.accepted and result.total == 5
    # A solution that only handles the plain tests loses exactly the challenge ones it gets wrong.
    naive = "def remove_Occ(s, ch):\n    return s.replace(ch, '') if s.count(ch) <= 2 else s\n"
    partial = judge.judge(problem, naive, code_is_program=True)
    assert (partial.passed, partial.total) == (4, 5) and partial.failures[0].index == 3


def test_humaneval_flat_check_is_split_per_assert(judge, humaneval):
    problem = humaneval["HumanEval/0"]
    assert len(problem.function_tests.asserts) > 3 and problem.function_tests.check is None
    wrong = problem.prompt + "    return len(numbers) > 3\n"
    result = judge.judge(problem, wrong, code_is_program=True)
    assert 0 < result.passed < result.total == len(problem.function_tests.asserts)


def test_humaneval_check_with_a_loop_stays_one_unit(judge, humaneval):
    problem = humaneval["HumanEval/32"]  # `check` loops over random cases: not a flat list of asserts
    assert problem.function_tests.check and not problem.function_tests.asserts
    assert judge.judge(problem, problem.solutions[0], code_is_program=True).accepted
    wrong = judge.judge(problem, problem.prompt + "    return 0.0\n", code_is_program=True)
    assert (wrong.passed, wrong.total, wrong.verdict.value) == (0, 1, "WRONG_ANSWER")


def test_syntax_error(judge, mbpp):
    result = judge.judge(mbpp[17], "def square_perimeter(a)\n    return 4 * a\n", code_is_program=True)
    assert result.verdict.value == "SYNTAX_ERROR" and result.passed == 0 and result.total == 3
    assert "SyntaxError" in result.failures[0].message


def test_memory_limit(judge, mbpp):
    program = "def square_perimeter(a):\n    block = [0] * (200 * 1024 * 1024)\n    return 4 * a\n"
    result = judge.judge(mbpp[17], program, code_is_program=True)
    assert result.verdict.value == "MEMORY_LIMIT" and result.passed == 0


def test_runtime_error_and_timeout_are_per_assert(judge, mbpp):
    program = ("def square_perimeter(a):\n    if a == 5:\n        raise ValueError('five')\n"
               "    while a == 4: pass\n    return 4 * a\n")
    result = judge.judge(mbpp[17], program, code_is_program=True)
    assert [(f.index, f.verdict.value) for f in result.failures] == [(1, "RUNTIME_ERROR"), (2, "TIMEOUT")]
    assert result.passed == 1 and "ValueError: five" in result.failures[0].message


def test_counter_result_compares_like_the_stdlib(judge, mbpp):
    problem = mbpp[88]  # returns collections.Counter; the asserts compare with dict literals
    assert judge.judge(problem, problem.solutions[0], code_is_program=True).accepted
    off_by_one = "import collections\ndef freq_count(xs):\n    c = collections.Counter(xs)\n    c[xs[0]] += 1\n    return c\n"
    assert judge.judge(problem, off_by_one, code_is_program=True).passed == 0


def test_a_lying_dict_subclass_still_fails(judge, mbpp):
    lying = ("class D(dict):\n    def __eq__(self, other): return True\n    def __ne__(self, other): return False\n"
             "def freq_count(xs):\n    return D()\n")
    result = judge.judge(mbpp[88], lying, code_is_program=True)
    assert result.verdict.value == "WRONG_ANSWER" and result.passed == 0
    # Even the right counts inside a foreign class do not pass: only the stdlib's own classes are trusted.
    impostor = ("import collections\nclass C(collections.Counter):\n    pass\n"
                "def freq_count(xs):\n    return C(xs)\n")
    assert judge.judge(mbpp[88], impostor, code_is_program=True).passed == 0


def test_patched_counter_class_cannot_change_the_comparison(judge, mbpp):
    patched = ("import collections\ncollections.Counter.__eq__ = lambda self, other: True\n"
               "def freq_count(xs):\n    return collections.Counter()\n")
    assert judge.judge(mbpp[88], patched, code_is_program=True).passed == 0


ORDERED = Problem(id="toy/od", source="toy", split="test", kind="function", statement="od", entry_point="od",
                  function_tests=FunctionTests(setup="from collections import OrderedDict",
                                               asserts=["assert od() == OrderedDict([('a', 1), ('b', 2)])"]))


def test_ordered_dicts_compare_in_order(judge):
    right = "from collections import OrderedDict\ndef od():\n    return OrderedDict([('a', 1), ('b', 2)])\n"
    moved = ("from collections import OrderedDict\ndef od():\n    d = OrderedDict([('a', 1), ('b', 2)])\n"
             "    d.move_to_end('a')\n    return d\n")
    assert judge.judge(ORDERED, right, code_is_program=True).accepted
    assert judge.judge(ORDERED, moved, code_is_program=True).verdict.value == "WRONG_ANSWER"


def test_program_shadowing_a_builtin_is_what_the_tests_call(judge, mbpp):
    problem = mbpp[126]  # the reference defines its own `sum(a, b)`
    assert judge.judge(problem, problem.solutions[0], code_is_program=True).accepted


def test_content_hash_cache_judges_identical_jobs_once(mbpp):
    problem = mbpp[17]
    renamed = problem.model_copy(update={"id": "elsewhere/17"})
    program = problem.solutions[0]
    with Judge(JudgeConfig(timeout_s=1.0, workers=2)) as judge:
        first = judge.judge_many([(problem, program), (problem, program), (renamed, program)], code_is_program=True)
        again = judge.judge(problem, program, code_is_program=True)
        other_limits = judge.judge(problem, program, code_is_program=True, stop_on_first_failure=True)
        stats = judge.stats()
    assert all(r.accepted for r in [*first, again, other_limits])
    assert [r.cached for r in first] == [False, True, True] and again.cached and not other_limits.cached
    assert first[2].problem_id == "elsewhere/17"
    assert (stats["cache_hits"], stats["cache_misses"]) == (1, 4)  # lookups: 3 + 1 + 1; in-batch twins wait
    assert stats["cache_hit_rate"] == pytest.approx(1 / 5)


def test_stats_reports_the_isolation_in_force(judge):
    iso = judge.stats()["isolation"]
    assert iso.startswith("rlimits+setsid") and "seccomp(no-keyrings)" in iso
    if os.geteuid() == 0:
        assert "netns" in iso and "ipcns(no-sysv-ipc,no-mqueue)" in iso and "pidns-per-sample" in iso and "uid=" in iso
    else:
        assert "fallback" in iso


SORTS = Problem(id="toy/sorts", source="toy", split="test", kind="function", statement="", entry_point="order",
                function_tests=FunctionTests(asserts=["assert sorted(order([3, 1])) == [1, 3]",
                                                      "assert sorted(order([2, 9, 5])) == [2, 5, 9]"]))


@pytest.mark.parametrize("where", ["module", "first test"])
def test_builtins_a_program_patches_are_put_back_before_each_test(judge, where):
    """Each test starts from the pristine builtins, whether the program patched them while loading
    or during an earlier test: the patch cannot decide a later operand."""
    patch = "import builtins\nbuiltins.sorted = lambda *a, **k: [0]\n"
    program = (patch + "def order(xs):\n    return xs\n" if where == "module" else
               "def order(xs):\n    exec(" + repr(patch) + ")\n    return xs\n")
    result = judge.judge(SORTS, program, code_is_program=True)
    assert result.accepted, (result.verdict, result.failures)


@pytest.mark.parametrize("broken", [False, True], ids=["parsed together", "one does not parse"])
def test_asserts_parsed_together_still_judge_one_by_one(judge, broken):
    """A problem's asserts are parsed in one go (when one does not parse, each on its own);
    operands spanning lines, continued lines and `:=` keep their meaning either way."""
    asserts = ["assert f(3) == (\n    4 +\n    5)", "assert (y := f(2)) == 4 and y > 3", "assert f(1) == 1 + \\\n    0"]
    if broken:
        asserts.insert(1, "assert f(2) ==")
    problem = Problem(id="toy/square", source="toy", split="test", kind="function", statement="", entry_point="f",
                      function_tests=FunctionTests(asserts=asserts))
    result = judge.judge(problem, "def f(x):\n    return x * x\n", code_is_program=True)
    assert (result.passed, result.total) == (3, len(asserts)), result.failures
    assert [f.index for f in result.failures] == ([1] if broken else [])


def _check_problem(check: str) -> Problem:
    return Problem(id="toy/raises", source="toy", split="test", kind="function", statement="", entry_point="half",
                   function_tests=FunctionTests(candidate="candidate", check=check))


def test_a_check_that_expects_the_program_to_raise_catches_its_exception(judge):
    """Check functions run apart from the program and call into its process; an exception it
    raises reaches them as the same builtin class, so `except ValueError:` catches it as it would
    in one process (a correct program used to be RUNTIME_ERROR)."""
    problem = _check_problem("def check(candidate):\n    assert candidate(4) == 2\n    try:\n        candidate(-1)\n"
                             "        raise AssertionError('no error')\n    except ValueError:\n        pass\n")
    honest = "def half(x):\n    if x < 0:\n        raise ValueError('negative')\n    return x // 2\n"
    assert judge.judge(problem, honest, code_is_program=True).verdict.value == "ACCEPTED"
    wrong = honest.replace("ValueError('negative')", "KeyError('negative')")
    result = judge.judge(problem, wrong, code_is_program=True)
    assert result.verdict.value == "RUNTIME_ERROR" and "KeyError" in result.failures[0].message


def test_stop_iteration_from_the_program_does_not_end_the_tests_iteration(judge):
    """StopIteration stays the program's failure: raised into `all(map(...))` it would end the
    iteration early and pass the test."""
    problem = _check_problem("def check(candidate):\n"
                             "    assert all(map(lambda c: candidate(c[0]) == c[1], [(4, 2), (9, 4), (-6, -3)]))\n")
    result = judge.judge(problem, "def half(x):\n    raise StopIteration\n", code_is_program=True)
    assert not result.accepted and result.verdict.value == "RUNTIME_ERROR", (result.verdict, result.failures[:1])
