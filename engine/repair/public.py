"""A problem's public tests: what a model may be shown or chosen by; the rest score it.

- stdio problems: the tests the source marks public (CodeContests' examples, the toy problems'
  first test); a source that marks none has no public tests.
- function problems: the first assertion (the example a statement usually shows); a problem
  whose tests are one opaque `check` has none.
"""

from __future__ import annotations

from typing import Optional

from engine.problem import Problem


def public_view(problem: Problem) -> Optional[Problem]:
    """`problem` with only its public tests, or None when it has none."""
    if problem.kind == "stdio":
        public = [t for t in problem.stdio_tests if t.kind == "public"]
        return problem.model_copy(update={"stdio_tests": public}) if public else None
    tests = problem.function_tests
    if tests is None or not tests.asserts:
        return None
    return problem.model_copy(update={"function_tests": tests.model_copy(update={"asserts": tests.asserts[:1],
                                                                                  "challenge": []})})
