"""Code extraction from raw completions, and what the judge makes of it (real sandboxed runs)."""

from __future__ import annotations

import pytest

from engine.judge.api import Judge, JudgeConfig
from engine.problem import FunctionTests, Problem
from engine.prompts.extract import extract_code

PROMPT = 'def add(a, b):\n    """Return a + b."""\n'
ADD = Problem(id="toy/add", source="toy", split="test", kind="function", statement="add", prompt=PROMPT,
              entry_point="add", function_tests=FunctionTests(asserts=["assert add(1, 2) == 3",
                                                                       "assert add(5, 0) == 5"]))


@pytest.mark.parametrize("completion,code,format_ok,kind", [
    ("Draft:\n```python\nx = 1\n```\nBetter:\n```python\nx = 2\n```\n", "x = 2\n", False, "fenced"),
    ("```py\nx = 3\n```", "x = 3\n", True, "fenced"),
    ("```python3\nx = 4\n```", "x = 4\n", True, "fenced"),
    ("```\nx = 5\n```", "x = 5\n", True, "fenced"),
    ("Sure:\n```python\nx = 6\n", "x = 6\n", False, "unterminated_fence"),
    ("```python\nx = 7\n```\n```cpp\nint main() {}\n```", "x = 7\n", False, "fenced"),
    ("[BEGIN]\nx = 8\n[DONE]", "\nx = 8\n", True, "markers"),
    ("[BEGIN]\n```python\nx = 9\n```\n[DONE]", "x = 9\n", True, "markers"),
    ("<think>\n```python\nx = 'draft'\n```\n</think>\n```python\nx = 'final'\n```", "x = 'final'\n", True, "fenced"),
    ("the prompt opened the think tag ```python\nx = 0\n``` </think>\n```python\nx = 10\n```", "x = 10\n", True,
     "fenced"),
    ("def f(x):\n    return x\n", "def f(x):\n    return x\n", True, "plain"),
    ("Here is the code:\n```python\nx = 11\n```", "x = 11\n", False, "fenced"),
])
def test_extraction_rules(completion, code, format_ok, kind):
    found = extract_code(completion)
    assert (found.code, found.format_ok, found.kind) == (code, format_ok, kind)


@pytest.mark.parametrize("completion", ["I cannot solve this problem.", "", "   \n", "```cpp\nint main() {}\n```",
                                        "<think>only thinking, never answering</think>"])
def test_no_code_found(completion):
    found = extract_code(completion, prompt=PROMPT, entry_point="add")
    assert found.code == "" and not found.format_ok


def test_humaneval_continuation_is_glued_to_the_prompt():
    found = extract_code("    return a + b\n", prompt=PROMPT, entry_point="add")
    assert found.code == PROMPT + "    return a + b\n" and found.format_ok


def test_full_function_is_not_glued_to_the_prompt():
    found = extract_code("```python\ndef add(a, b):\n    return a + b\n```", prompt=PROMPT, entry_point="add")
    assert found.code == "def add(a, b):\n    return a + b\n"


@pytest.fixture(scope="module")
def judge():
    with Judge(JudgeConfig(timeout_s=2.0, cache=False, workers=2)) as j:
        yield j


def test_judge_no_code_verdict(judge):
    result = judge.judge(ADD, "I am not sure how to do this.")
    assert result.verdict.value == "NO_CODE" and not result.accepted and not result.format_ok
    assert (result.passed, result.total, result.pass_ratio) == (0, 2, 0.0)


@pytest.mark.parametrize("completion,format_ok", [
    ("    return a + b\n", True),  # HumanEval-style body
    ("```python\ndef add(a, b):\n    return a + b\n```", True),
    ("Easy.\n```python\ndef add(a, b):\n    return a + b\n```\nDone!", False),
    ("<think>add them</think>\n[BEGIN]\ndef add(a, b):\n    return a + b\n[DONE]", True),
    ("```python\ndef add(a, b):\n    return a + b\n", False),  # unterminated fence
])
def test_judge_runs_the_extracted_code(judge, completion, format_ok):
    result = judge.judge(ADD, completion)
    assert result.accepted and result.format_ok is format_ok, result


def test_judge_scores_the_last_block_only(judge):
    result = judge.judge(ADD, "```python\ndef add(a, b):\n    return a + b\n```\nOops, final:\n"
                              "```python\ndef add(a, b):\n    return a - b\n```")
    assert result.verdict.value == "WRONG_ANSWER" and result.passed == 1
