"""The judge's verdict model: what every backend returns, per test and per sample."""

from __future__ import annotations

from enum import Enum
from typing import Optional

from pydantic import BaseModel, Field


class Verdict(str, Enum):
    ACCEPTED = "ACCEPTED"
    WRONG_ANSWER = "WRONG_ANSWER"
    RUNTIME_ERROR = "RUNTIME_ERROR"
    SYNTAX_ERROR = "SYNTAX_ERROR"
    TIMEOUT = "TIMEOUT"
    MEMORY_LIMIT = "MEMORY_LIMIT"
    OUTPUT_LIMIT = "OUTPUT_LIMIT"
    NO_CODE = "NO_CODE"
    INTERNAL_ERROR = "INTERNAL_ERROR"  # a judge fault: never counted against the model


class TestResult(BaseModel):
    index: int
    verdict: Verdict
    cpu_s: float = 0.0
    wall_s: float = 0.0
    input: Optional[str] = None  # truncated, for repair feedback
    expected: Optional[str] = None
    got: Optional[str] = None
    message: Optional[str] = None


class SampleResult(BaseModel):
    problem_id: str
    verdict: Verdict  # ACCEPTED, or the first failing category
    accepted: bool
    passed: int
    total: int
    pass_ratio: float
    format_ok: bool = True  # output complied with the format (only code / one fenced block)
    wall_s: float = 0.0
    cpu_s: float = 0.0
    peak_mem_mb: float = 0.0
    stdout_tail: str = ""
    stderr_tail: str = ""
    failures: list[TestResult] = Field(default_factory=list)  # first K failing tests
    cached: bool = False
    isolation: str = ""  # which isolation was active (e.g. "netns+rlimits")
    message: Optional[str] = None
