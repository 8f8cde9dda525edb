"""Judge a samples file against a problems file: what `rlvr-run judge` runs.

Samples are JSONL rows with `problem_id` and `completion`; the output is one
`VerdictRecord` (the `SampleResult` plus the sample's index) per sample, in the
samples' order.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Literal, Optional

from engine.data.files import read_problems
from engine.data.fingerprint import file_sha256
from engine.data.sources.files import RowsError, numbered_jsonl
from engine.errors import UserError
from engine.files import atomic_write
from engine.judge.api import Judge, JudgeConfig
from engine.judge.report import JudgeSummary
from engine.judge.verdict import SampleResult
from engine.problem import Problem


class VerdictRecord(SampleResult):
    index: int  # 0-based position of the sample in the samples file
    judge_version: str = ""  # limits and isolation level (`Judge.version`)
    # dense: every test ran, so pass_ratio is the share passed; sparse: judging stopped at the first
    # failure, so passed/total undercounts (fine for a verdict, wrong for a dense reward or a pair's Δ)
    mode: Literal["dense", "sparse", ""] = ""
    # the judged completion's sha256: a reader matches records to a samples file by position, and
    # must know a record is this completion's, not a sample's that was once at that position
    completion_sha256: str = ""


def completion_digest(completion: str) -> str:
    return file_sha256(completion.encode())


@dataclass(kw_only=True, frozen=True)
class Sample:
    index: int
    problem_id: str
    completion: str


def read_samples(path: Path, problems: dict[str, Problem], *, limit: Optional[int] = None) -> list[Sample]:
    """Samples in file order; errors name the line and the fix."""
    if not path.is_file():
        raise UserError(f"samples file not found: {path}")
    samples: list[Sample] = []
    try:
        for number, row in numbered_jsonl(path):
            if limit is not None and len(samples) >= limit:
                break
            samples.append(_sample(path, number, row, len(samples), problems))
    except RowsError as exc:
        raise UserError(f"{exc}\n  fix: one JSON object per line, with problem_id and completion") from None
    if not samples:
        raise UserError(f"{path}: no samples (expected JSONL rows with problem_id and completion)")
    return samples


def _sample(path: Path, number: int, row: dict, index: int, problems: dict[str, Problem]) -> Sample:
    for key in ("problem_id", "completion"):
        if not isinstance(row.get(key), str):
            raise UserError(f"{path}:{number}: missing or non-string field {key!r} (need problem_id and completion)")
    if row["problem_id"] not in problems:
        known = ", ".join(list(problems)[:5])
        raise UserError(
            f"{path}:{number}: unknown problem_id {row['problem_id']!r}; "
            f"the problems file has {len(problems)} problems, e.g. {known}"
        )
    return Sample(index=index, problem_id=row["problem_id"], completion=row["completion"])


def judge_file(
    problems_path: Path,
    samples_path: Path,
    out_path: Path,
    config: JudgeConfig,
    *,
    limit: Optional[int] = None,
    progress: Optional[Callable[[int, int], None]] = None,
) -> JudgeSummary:
    """Judge every sample, write the records, return the summary. `progress(done, total)`."""
    start = time.monotonic()
    with Judge(config) as judge, ThreadPoolExecutor(1) as starter:
        # The workers start (interpreters, namespaces, warm-up) while the files are read; a file's
        # error still comes first, and leaving waits for the start, then closes the workers.
        started = starter.submit(lambda: judge.version)
        problems = read_problems(problems_path)
        samples = read_samples(samples_path, problems, limit=limit)
        started.result()
        items = [(problems[s.problem_id], s.completion) for s in samples]
        results: list[SampleResult] = [None] * len(items)  # type: ignore[list-item]
        for done, (i, result) in enumerate(judge.judge_stream(items), 1):  # one stream: every core busy
            results[i] = result
            if progress:
                progress(done, len(items))
        stats, version = judge.stats(), judge.version
    wall = time.monotonic() - start
    _write(out_path, samples, results, version, "sparse" if config.stop_on_first_failure else "dense")
    return JudgeSummary.of(results, wall_s=wall, stats=stats)


def _write(out_path: Path, samples: list[Sample], results: list[SampleResult], version: str, mode: str) -> None:
    atomic_write(out_path, "".join(
        VerdictRecord(index=sample.index, judge_version=version, mode=mode,
                      completion_sha256=completion_digest(sample.completion), **result.model_dump()).model_dump_json()
        + "\n" for sample, result in zip(samples, results, strict=True)))
