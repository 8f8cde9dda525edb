"""One normalized problem model shared by the judge, the evaluator and the exporters.

Loaders (`engine.data.loaders`) turn raw rows into `Problem`; nothing downstream
reads raw rows.
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FunctionTests(_Model):
    """Tests for a function problem: setup code, then one assertion per unit.

    `asserts` are independent statements (MBPP `test_list`, HumanEval's `check`
    split into its assertions). When HumanEval's `check` cannot be split, `check`
    holds its source and is run as one unit with `entry_point` as the candidate.
    """

    setup: str = ""
    asserts: list[str] = Field(default_factory=list)
    check: Optional[str] = None
    challenge: list[str] = Field(default_factory=list)
    # Name the asserts use for the function under test (HumanEval's `candidate`);
    # the judge binds it to `entry_point` before running them.
    candidate: Optional[str] = None


class StdioTest(_Model):
    input: str
    output: str
    kind: Literal["public", "private", "generated", "unknown"] = "unknown"


class Problem(_Model):
    id: str
    source: str  # humaneval | mbpp | mbpp_sanitized | codecontests | toy | local
    split: str
    kind: Literal["function", "stdio"]
    statement: str
    prompt: str = ""  # starter code / signature shown to the model
    entry_point: Optional[str] = None
    function_tests: Optional[FunctionTests] = None
    stdio_tests: list[StdioTest] = Field(default_factory=list)
    solutions: list[str] = Field(default_factory=list)
    incorrect_solutions: list[str] = Field(default_factory=list)
    time_limit_s: Optional[float] = None
    memory_limit_mb: Optional[int] = None
    difficulty: Optional[int] = None
    rating: Optional[int] = None
    tags: list[str] = Field(default_factory=list)
    license: Optional[str] = None
    checker: Optional[str] = None  # name of a per-problem output checker (judge hook)
    name: Optional[str] = None  # human title (CodeContests `name`), when the source has one
    origin: Optional[str] = None  # upstream platform (codeforces, codechef, ...) where known
