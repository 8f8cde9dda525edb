"""One record per (problem, sample), appended as soon as it is judged; resumable by key.

A record holds the generation facts (tokens, finish_reason, latency, seed) and the judge
facts (verdict, per-test results, judge time and version), and the content keys of what
produced it: the model's checkpoint hash, the protocol hash and the id-list hash. A file
is read back only for records whose keys match the current run, so a changed model or
protocol never resumes into stale samples.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable, Iterator, Optional

from pydantic import BaseModel, Field, ValidationError

from engine.judge.verdict import TestResult

GEN_ERROR = "GEN_ERROR"  # the backend gave no text after every retry: not the model's fault, not a pass


class Keys(BaseModel):
    """What a sample's content depends on: records with other keys are not this run's."""

    model: str  # checkpoint hash (or hub id)
    protocol: str  # sha256 of the resolved decoding protocol
    idlist: str  # sha256 of the frozen id list, or the dataset's fingerprint


class GenerationRecord(BaseModel):
    dataset: str
    problem_id: str
    sample: int  # 0..n-1 within its problem
    round: int = 1  # repair round (1 = the first answer)
    parent: Optional[str] = None  # the sample this one repairs (its `uid`)
    keys: Keys
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str  # stop | length | error
    latency_s: float
    seed: int
    completion: str
    error: Optional[str] = None
    conversation: Optional[list[dict[str, str]]] = None  # repair rounds: the messages this answer followed

    @property
    def uid(self) -> str:
        return f"{self.dataset}/{self.problem_id}/{self.sample}/r{self.round}"


class SampleRecord(GenerationRecord):
    code: str = ""  # what the judge ran (extracted from the completion)
    verdict: str  # a judge Verdict name, or GEN_ERROR
    accepted: bool
    pass_ratio: float
    passed: int
    total: int
    format_ok: bool
    tests: list[TestResult] = Field(default_factory=list)  # the first failing tests (public and private)
    judge_s: float  # wall seconds the judge spent on this sample
    judge_cpu_s: float = 0.0
    cached: bool = False
    judge_version: str
    stderr_tail: str = ""


def append(path: Path, records: Iterable[BaseModel]) -> None:
    """Append and flush: a kill loses at most the line being written (skipped when read)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        for record in records:
            handle.write(record.model_dump_json() + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def read(path: Path, model: type[GenerationRecord], keys: Optional[Keys] = None) -> Iterator[GenerationRecord]:
    """The file's records of `keys` (all when None); a torn last line is skipped, once per uid."""
    if not path.exists():
        return
    seen: set[str] = set()
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            try:
                record = model.model_validate(json.loads(line))
            except (json.JSONDecodeError, ValidationError):
                continue
            if (keys is None or record.keys == keys) and record.uid not in seen:
                seen.add(record.uid)
                yield record
