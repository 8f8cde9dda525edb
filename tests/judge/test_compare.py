"""Output comparison for stdin/stdout tests, and the per-problem checker hook through the real judge."""

from __future__ import annotations

import pytest

from engine.judge.api import Judge, JudgeConfig
from engine.judge.checkers import CHECKERS, get_checker, register
from engine.judge.compare import outputs_match
from engine.problem import Problem, StdioTest


@pytest.mark.parametrize("expected,got,same", [
    ("1 2 3\n", "1 2 3", True),
    ("1 2 3\n", "1\n2\n3\n\n", True),  # line structure and amount of whitespace do not matter
    ("1 2 3\n", "  1\t2   3  \r\n", True),
    ("YES\n", "yes\n", False),  # case-sensitive by default
    ("1 2 3\n", "1 2\n", False),  # a missing token: no zip truncation
    ("1 2\n", "1 2 3\n", False),  # an extra token
    ("", "", True),
    ("", "0", False),
    ("0.5\n", "0.50\n", False),  # tokens mode is textual
])
def test_tokens_mode(expected, got, same):
    assert outputs_match(expected, got, mode="tokens") is same


@pytest.mark.parametrize("expected,got,tol,same", [
    ("0.5\n", "0.50\n", 1e-6, True),
    ("1.0000001", "1.0000002", 1e-6, True),  # absolute
    ("1000000.0", "1000000.5", 1e-6, True),  # relative: 0.5 <= 1e-6 * 1e6
    ("1000000.0", "1000002.0", 1e-6, False),
    ("0.001", "0.0011", 1e-6, False),
    ("3", "3.0000001", 1e-6, True),  # one side has a fraction: numeric
    ("3", "4", 0.5, False),  # two integers stay exact whatever the tolerance
    ("1.5 abc", "1.5000001 abc", 1e-6, True),
    ("1.5 abc", "1.5 ABC", 1e-6, False),
    ("nan", "nan", 1e-6, True),  # identical tokens
    ("1.0", "nan", 1e-6, False),
    ("1.0", "inf", 1e-6, False),
    ("1.0 2.0", "1.0", 1e-6, False),  # length mismatch
])
def test_float_mode(expected, got, tol, same):
    assert outputs_match(expected, got, mode="float", tol=tol) is same


@pytest.mark.parametrize("expected,got,same", [
    ("1 2\n", "1 2\n", True),
    ("1 2\n", "1 2", True),  # trailing whitespace at the very end
    ("1 2\n", "1 2\r\n", True),  # CRLF
    ("1 2\n", "1  2\n", False),
    ("1 2\n3\n", "1 2 3\n", False),
])
def test_exact_mode(expected, got, same):
    assert outputs_match(expected, got, mode="exact") is same


def test_unknown_mode_is_an_error():
    with pytest.raises(ValueError, match="unknown compare mode"):
        outputs_match("1", "1", mode="fuzzy")


def test_named_checkers():
    assert get_checker("yes_no")("", "YES\n", "yes") and not get_checker("yes_no")("", "YES", "NO")
    assert get_checker("float_1e-4")("", "0.33333", "0.3333") and not get_checker("float_1e-9")("", "0.33333", "0.3333")
    with pytest.raises(KeyError, match="unknown checker"):
        get_checker("nope")
    with pytest.raises(ValueError, match="registered twice"):
        register("yes_no")(lambda i, e, g: True)
    assert {"yes_no", "float_1e-4", "float_1e-6", "float_1e-9"} <= set(CHECKERS)


ANSWER = Problem(id="toy/yes", source="toy", split="test", kind="stdio", statement="even?",
                 stdio_tests=[StdioTest(input="4\n", output="YES\n"), StdioTest(input="3\n", output="NO\n")])
LOWER = "print('yes' if int(input()) % 2 == 0 else 'no')\n"
THIRD = Problem(id="toy/third", source="toy", split="test", kind="stdio", statement="1/n",
                stdio_tests=[StdioTest(input="3\n", output="0.333333333\n")])


@pytest.fixture(scope="module")
def judge():
    with Judge(JudgeConfig(timeout_s=2.0, cache=False, workers=2)) as j:
        yield j


def test_checker_hook_through_the_judge(judge):
    assert judge.judge(ANSWER, LOWER, code_is_program=True).verdict.value == "WRONG_ANSWER"
    checked = judge.judge(ANSWER.model_copy(update={"checker": "yes_no"}), LOWER, code_is_program=True)
    assert checked.accepted and checked.passed == 2


def test_float_tolerance_through_the_judge():
    program = "print(1 / int(input()))\n"  # 0.3333333333333333
    with Judge(JudgeConfig(timeout_s=2.0, cache=False, workers=1)) as exact:
        assert exact.judge(THIRD, program, code_is_program=True).verdict.value == "WRONG_ANSWER"
    with Judge(JudgeConfig(timeout_s=2.0, cache=False, workers=1, compare="float", float_tol=1e-6)) as tolerant:
        assert tolerant.judge(THIRD, program, code_is_program=True).accepted
