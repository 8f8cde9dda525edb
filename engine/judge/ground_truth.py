"""What a verl parquet row carries for the reward: `reward_model.ground_truth`.

The exporter writes `ground_truth_from_problem(problem)` (a JSON string, so the
parquet schema stays uniform across rows); `engine.reward.compute_score` reads
it back with `RewardTests.parse`. It holds exactly what judging needs: the tests,
the entry point, the starter prompt (HumanEval-style continuations are judged as
prompt + completion), the limits and the checker hook. No statement, no
solutions: they are not needed to judge and would bloat every row.
"""

from __future__ import annotations

from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

from engine.problem import FunctionTests, Problem, StdioTest

SCHEMA_VERSION = 1

# Which of verl's data files holds a row, in its extra_info (`engine.train.export` writes it; the
# reward reads it to tell a validation call from a training one): data.train_files,
# data.val_files, or a train file verl validates on as well.
DATA_FILES = "verl_files"
TRAIN_FILE, VAL_FILE, TRAIN_AND_VAL_FILE = "train", "val", "train+val"


class RewardTests(BaseModel):
    model_config = ConfigDict(extra="forbid")

    v: Literal[1] = SCHEMA_VERSION  # bumped on any incompatible change
    problem_id: str
    source: str = "local"
    kind: Literal["function", "stdio"]
    prompt: str = ""
    entry_point: Optional[str] = None
    function_tests: Optional[FunctionTests] = None
    stdio_tests: list[StdioTest] = Field(default_factory=list)
    time_limit_s: Optional[float] = None
    memory_limit_mb: Optional[int] = None
    checker: Optional[str] = None

    @classmethod
    def parse(cls, ground_truth: Union[str, bytes, dict[str, Any]]) -> "RewardTests":
        """From the parquet's JSON string (or the dict some loaders hand back)."""
        if isinstance(ground_truth, (str, bytes)):
            return cls.model_validate_json(ground_truth)
        return cls.model_validate(ground_truth)

    def to_problem(self) -> Problem:
        return Problem(id=self.problem_id, split="reward", statement="",
                       **self.model_dump(include=_SHARED_FIELDS))


# What a reward row carries of a Problem: the tests and what running them needs.
_SHARED_FIELDS = {"source", "kind", "prompt", "entry_point", "function_tests", "stdio_tests",
                  "time_limit_s", "memory_limit_mb", "checker"}


def reward_tests_from_problem(problem: Problem) -> RewardTests:
    return RewardTests(problem_id=problem.id, **problem.model_dump(include=_SHARED_FIELDS))


def ground_truth_from_problem(problem: Problem) -> str:
    """The JSON string to store in `reward_model.ground_truth`."""
    return reward_tests_from_problem(problem).model_dump_json(exclude_none=True)
