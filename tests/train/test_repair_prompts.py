"""trl's repair chains find their problem by the prompt they were handed: two training problems
shown one prompt with different tests are refused, never judged one as the other."""

from __future__ import annotations

import pytest

from engine.errors import UserError
from engine.problem import FunctionTests, Problem
from engine.prompts.templates import PromptChoice
from engine.spec.registry import load_registry
from engine.train.repair import by_prompt

STATEMENT = "Write a python function to count the number of squares in a rectangle."  # twice in MBPP


def _problem(pid: str, entry: str, test: str) -> Problem:
    return Problem(id=pid, source="mbpp", split="train", kind="function", statement=STATEMENT, entry_point=entry,
                   function_tests=FunctionTests(asserts=[test]))


def test_problems_shown_one_prompt_with_different_tests_are_refused():
    a = _problem("mbpp/77", "count_Squares", "assert count_Squares(4, 3) == 20")
    b = _problem("mbpp/88", "count_Squares", "assert count_Squares(2, 2) == 5")
    registry = load_registry()
    with pytest.raises(UserError, match="mbpp/77 and mbpp/88 are shown the same prompt"):
        by_prompt(PromptChoice(registry=registry, template="short_chat"), [a, b])
    # a template that shows a test tells them apart
    shown = by_prompt(PromptChoice(registry=registry, template="function_chat"), [a, b])
    assert sorted(p.id for p in shown.values()) == ["mbpp/77", "mbpp/88"]
