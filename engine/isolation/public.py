"""A problem's public tests: exactly what the model was shown, run as real checks.

The public tests are the only tests a model may see (repair feedback, the failures page) or
be chosen by (best-of-n); every other test of a problem is hidden and scores it. They are
defined once, here, for every user, from the problem and the prompt the model was shown:

- stdio problems: the tests their source marks public (CodeContests' examples, the toy
  problems' first test); a source that marks none gives none.
- function problems: the worked examples the shown prompt holds — doctest blocks
  (`>>> f(x)` and the output below it) and `f(x) == y` lines (also `➞`, `=>`, `->`), parsed
  by rule 3's `normalize.example_texts` — each run as `assert f(x) == y` (an empty doctest
  output: `is None`); only examples that call the entry point and whose result is a Python
  expression count. Plus any of the problem's own assertions the prompt shows verbatim (an
  MBPP template's `first_test`).
- otherwise none: a problem whose prompt shows no example has no public test, and its
  scoring assertions are never used in its place (HumanEval's `check()` asserts are hidden).

`public_view(problem, shown)` is the problem with only those tests (None when it has none);
`shown` is the rendered prompt — the text of a completion prompt, or the chat messages
(only what precedes the first assistant turn counts: the model's own code is not a test).
"""

from __future__ import annotations

import ast
import builtins
import re
from typing import Any, Mapping, Optional, Sequence, Union

from engine.isolation.normalize import CALL_RESULT, example_texts
from engine.problem import FunctionTests, Problem

Shown = Union[str, Sequence[Union[Mapping[str, Any], Any]]]

_PROMPT_LINE = re.compile(r"^[ \t]*(?:>>>|\.\.\.)[ \t]?")
_DOCSTRING_END = re.compile(r"\s*(?:\"\"\"|''').*\Z", re.S)
_BUILTINS = frozenset(dir(builtins))


def shown_text(shown: Shown) -> str:
    """The text of a prompt as the model saw it: a completion text, or the messages before the
    first assistant turn (a chat prompt, or a repair conversation's opening)."""
    if isinstance(shown, str):
        return shown
    parts = []
    for message in shown:
        role, content = (message.get("role"), message.get("content")) if isinstance(message, Mapping) \
            else (getattr(message, "role", None), getattr(message, "content", None))
        if role == "assistant":
            break
        if isinstance(content, str):
            parts.append(content)
    return "\n\n".join(parts)


def worked_examples(text: str, entry_point: str) -> list[str]:
    """The worked examples of `text` that call `entry_point`, as assertions (in order, once each)."""
    found: list[str] = []
    for example in example_texts(text):
        check = _assertion(example, entry_point)
        if check is not None and check not in found:
            found.append(check)
    return found


def public_view(problem: Problem, shown: Shown) -> Optional[Problem]:
    """`problem` with only its public tests (see the module doc), or None when it has none."""
    if problem.kind == "stdio":
        public = [t for t in problem.stdio_tests if t.kind == "public"]
        return problem.model_copy(update={"stdio_tests": public}) if public else None
    text = shown_text(shown)
    tests = problem.function_tests or FunctionTests()
    examples = worked_examples(text, problem.entry_point) if problem.entry_point else []
    quoted = [a for a in tests.asserts if a.strip() and a.strip() in text and a.strip() not in examples]
    asserts = [*quoted, *examples]
    if not asserts:
        return None
    # The quoted assertions name the function as the problem's tests do (`candidate` stays
    # bound); the examples call the entry point by its own name, which the judge also defines.
    public = FunctionTests(setup=tests.setup, asserts=asserts, candidate=tests.candidate if quoted else None)
    return problem.model_copy(update={"function_tests": public})


def _assertion(example: str, entry_point: str) -> Optional[str]:
    """`assert <call> == <result>` for one worked example, or None when it is not one we can run."""
    if _PROMPT_LINE.match(example):
        source_lines, output_lines = [], []
        for line in example.splitlines():
            if not output_lines and _PROMPT_LINE.match(line):
                source_lines.append(_PROMPT_LINE.sub("", line, count=1))
            else:
                output_lines.append(line.strip())
        source = "\n".join(source_lines).strip()
        expected = _DOCSTRING_END.sub("", "\n".join(output_lines)).strip()
    else:
        line = example.strip()
        line = line[4:] if line.lower().startswith("for ") else line
        match = CALL_RESULT.search(line)
        if match is None:
            return None
        call = match.group(0)
        mark = next(m for m in ("==", "➞", "=>", "->") if call.rstrip().endswith(m))
        source, expected = call.rstrip()[: -len(mark)].strip(), line[match.end():].strip()
        expected = _DOCSTRING_END.sub("", expected).strip().rstrip(".,;").strip()
    call, result = _expression(source), _expression(expected)
    if call is None or not _calls(call, entry_point) or not _closed(call, entry_point):
        return None
    if not expected and _PROMPT_LINE.match(example):
        # doctest prints nothing for None; `>>> f(x) == y` with no output is the check itself
        return f"assert {ast.unparse(call)}" if isinstance(call, ast.Compare) else f"assert {ast.unparse(call)} is None"
    if result is None or not _closed(result, entry_point):
        return None
    return f"assert {ast.unparse(call)} == {ast.unparse(result)}"


def _expression(source: str) -> Optional[ast.expr]:
    """One Python expression (comments dropped), or None."""
    try:
        return ast.parse(source, mode="eval").body
    except (SyntaxError, ValueError):
        return None


def _closed(tree: ast.expr, entry_point: str) -> bool:
    """Every name it reads is the entry point or a builtin: `f(n) == f(n - 1) + ...` (a recurrence)
    or `is_happy(a)` (a string written without quotes) is prose, not a check."""
    return all(node.id == entry_point or node.id in _BUILTINS for node in ast.walk(tree) if isinstance(node, ast.Name))


def _calls(tree: ast.expr, entry_point: str) -> bool:
    return any(isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == entry_point
               for node in ast.walk(tree))
