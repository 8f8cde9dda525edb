"""Test-suite verification: run each problem's reference solutions through the judge and classify it.

A problem's tests score models only when a correct solution passes them. Classes:

- sound: a reference solution passes every test with the judge's own comparison;
- needs-checker: reference solutions pass only under a tolerant comparison (`checker`
  names the generic checker of `engine.judge.checkers` that accepts them), or they
  disagree on an output, or they fail with wrong answers on a statement that says
  any valid answer is accepted (no generic checker resolves it: `checker` is None);
- broken-tests: a test no reference solution passes for another reason (its input
  crashes the reference, its expected output belongs to another problem, or the
  reference is wrong);
- too-slow: a reference solution times out at the judge's limits;
- interactive: the statement says the problem is interactive (stdin/stdout tests cannot judge it);
- no-solution: the data ships no reference solution, so nothing can be verified.

Reports are cached by the dataset's content fingerprint and the judge version
(`$RLVR_RUN_CACHE_DIR/verify/`), so `rlvr-run validate` and the loaders only read them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections import Counter
from enum import Enum
from pathlib import Path
from typing import Callable, Optional, Sequence

from pydantic import BaseModel, Field

from engine.data.cache import cache_root
from engine.files import atomic_write
from engine.judge.api import Judge
from engine.judge.config import JudgeConfig, judged_unsandboxed
from engine.judge.verdict import SampleResult, Verdict
from engine.problem import Problem

VERIFY_VERSION = 1  # bump when the classification of the same judge results changes
GENERIC_CHECKERS = ("yes_no", "float_1e-6", "tokens_unordered", "lines_unordered")
MAX_SOLUTIONS = 3  # reference solutions run per problem: one that passes is enough
_INTERACTIVE = re.compile(r"\bthis is an interactive problem\b|\binteractive problem\b", re.I)
_ANY_ANSWER = re.compile(r"\b(?:print|output)\s+any\b|\bany of them\b|\bmultiple (?:possible )?(?:answers|solutions)\b"
                         r"|\bseveral (?:possible )?(?:answers|solutions)\b|\bany (?:valid|correct|possible) answer\b"
                         r"|\bin any order\b", re.I)


class Status(str, Enum):
    sound = "sound"
    needs_checker = "needs-checker"
    broken_tests = "broken-tests"
    too_slow = "too-slow"
    interactive = "interactive"
    no_solution = "no-solution"


class ProblemCheck(BaseModel):
    """The verification of one problem."""

    problem_id: str
    status: Status
    checker: Optional[str] = None  # the generic checker that accepts the references (needs-checker only)
    detail: str = ""  # why, in words: the first failing test and its verdict


class VerifyReport(BaseModel):
    dataset: str
    fingerprint: str  # content fingerprint of the problems verified
    judge_version: str  # the limits (`JudgeConfig.version`): the cache key
    judged_with: str = ""  # the judge's full version, the isolation level obtained included
    verify_version: int = VERIFY_VERSION
    problems: list[ProblemCheck] = Field(default_factory=list)

    def counts(self) -> dict[str, int]:
        found = Counter(p.status.value for p in self.problems)
        return {s.value: found.get(s.value, 0) for s in Status}

    def resolved_by_checker(self) -> dict[str, int]:
        """How many needs-checker problems each generic checker resolves."""
        return dict(Counter(p.checker for p in self.problems if p.status is Status.needs_checker and p.checker))

    def kept(self, checker: Optional[str] = None) -> list[str]:
        """Ids a `verified:` declaration keeps: sound, plus needs-checker ones `checker` resolves."""
        return [p.problem_id for p in self.problems
                if p.status is Status.sound or (checker and p.status is Status.needs_checker and p.checker == checker)]

    def dropped(self, checker: Optional[str] = None) -> dict[str, int]:
        """Problems a `verified:` declaration drops, by status."""
        kept = set(self.kept(checker))
        return dict(Counter(p.status.value for p in self.problems if p.problem_id not in kept))


def ids_sha256(ids: Sequence[str]) -> str:
    return hashlib.sha256("".join(f"{i}\n" for i in ids).encode()).hexdigest()


# ---------------------------------------------------------------- cache
def report_path(fingerprint: str, judge_version: str, root: Optional[Path] = None, *, unsandboxed: bool = False) -> Path:
    """Reports judged without network and filesystem isolation live apart: only a spec that allows
    unsandboxed judging reads them, so its id list never decides another spec's."""
    key = hashlib.sha256(f"{judge_version}/verify{VERIFY_VERSION}".encode()).hexdigest()[:12]
    return (root or cache_root()) / "verify" / f"{fingerprint[:40]}-{key}{'-unsandboxed' if unsandboxed else ''}.json"


def cached_report(fingerprint: str, judge_version: str, root: Optional[Path] = None, *,
                  allow_unsandboxed: bool = False) -> Optional[VerifyReport]:
    """The sandboxed report, else (where allowed) one judged unsandboxed."""
    for unsandboxed in (False, True) if allow_unsandboxed else (False,):
        path = report_path(fingerprint, judge_version, root, unsandboxed=unsandboxed)
        if not path.is_file():
            continue
        try:
            return VerifyReport.model_validate_json(path.read_text())
        except ValueError:
            continue  # a torn file is verified again, never trusted
    return None


def store_report(report: VerifyReport, root: Optional[Path] = None) -> Path:
    return atomic_write(report_path(report.fingerprint, report.judge_version, root,
                                    unsandboxed=judged_unsandboxed(report.judged_with)),
                        report.model_dump_json(indent=1))


# ---------------------------------------------------------------- verification
def verify_problems(problems: Sequence[Problem], judge: Judge, *,
                    progress: Optional[Callable[[int], None]] = None) -> list[ProblemCheck]:
    """Classify every problem (in input order); `progress(n)` hears n more problems done."""
    runnable = [p for p in problems if _status_without_running(p) is None]
    items = [(p, code) for p in runnable for code in p.solutions[:MAX_SOLUTIONS]]
    results = judge.judge_many(items, code_is_program=True, stop_on_first_failure=False)
    by_problem: dict[str, list[SampleResult]] = {}
    for (problem, _), result in zip(items, results):
        by_problem.setdefault(problem.id, []).append(result)
    checks = []
    for problem in problems:
        early = _status_without_running(problem)
        checks.append(early or _classify(problem, by_problem[problem.id], judge))
        if progress:
            progress(1)
    return checks


def _status_without_running(problem: Problem) -> Optional[ProblemCheck]:
    if problem.kind == "stdio" and _INTERACTIVE.search(problem.statement):
        return ProblemCheck(problem_id=problem.id, status=Status.interactive, detail="the statement says interactive")
    if not problem.solutions:
        return ProblemCheck(problem_id=problem.id, status=Status.no_solution, detail="no reference solution")
    return None


def _classify(problem: Problem, results: list[SampleResult], judge: Judge) -> ProblemCheck:
    if any(r.accepted for r in results):
        return ProblemCheck(problem_id=problem.id, status=Status.sound)
    verdicts = {f.verdict for r in results for f in r.failures} or {r.verdict for r in results}
    detail = _first_failure(results[0])
    if Verdict.TIMEOUT in verdicts:
        return ProblemCheck(problem_id=problem.id, status=Status.too_slow, detail=detail)
    if problem.kind == "stdio" and verdicts == {Verdict.WRONG_ANSWER}:
        checker = _resolving_checker(problem, judge)
        if checker or _ANY_ANSWER.search(problem.statement) or _disagree(results):
            return ProblemCheck(problem_id=problem.id, status=Status.needs_checker, checker=checker, detail=detail)
    return ProblemCheck(problem_id=problem.id, status=Status.broken_tests, detail=detail)



def _resolving_checker(problem: Problem, judge: Judge) -> Optional[str]:
    """The first generic checker under which a reference solution passes every test."""
    for name in GENERIC_CHECKERS:
        checked = problem.model_copy(update={"checker": name})
        results = judge.judge_many([(checked, code) for code in problem.solutions[:MAX_SOLUTIONS]],
                                   code_is_program=True, stop_on_first_failure=True)
        if any(r.accepted for r in results):
            return name
    return None


def _disagree(results: list[SampleResult]) -> bool:
    """Two references that fail different tests: each test is passed by one of them."""
    failing = [{f.index for f in r.failures} for r in results]
    return len(failing) > 1 and not set.intersection(*failing)


def _first_failure(result: SampleResult) -> str:
    if not result.failures:
        return f"{result.verdict.value}: {result.message or ''}".strip()
    first = result.failures[0]
    return f"test {first.index}: {first.verdict.value} {first.message or ''}".strip()[:200]


def verify_dataset(name: str, problems: Sequence[Problem], fingerprint: str, config: JudgeConfig, *,
                   root: Optional[Path] = None, progress: Optional[Callable[[int], None]] = None,
                   refresh: bool = False) -> tuple[VerifyReport, bool]:
    """The dataset's report (from the cache unless `refresh`) and whether it came from the cache."""
    if not refresh and (hit := cached_report(fingerprint, config.version, root,
                                             allow_unsandboxed=config.allow_unsandboxed)) is not None:
        return hit, True
    # every failing test is reported: two references that fail different tests disagree
    with Judge(dataclasses.replace(config, max_failures_reported=10_000)) as judge:
        checks = verify_problems(problems, judge, progress=progress)
        judged_with = judge.version
    report = VerifyReport(dataset=name, fingerprint=fingerprint, judge_version=config.version,
                          judged_with=judged_with, problems=checks)
    store_report(report, root)
    return report, False


def write_outputs(report: VerifyReport, out: Path, checker: Optional[str] = None) -> tuple[Path, Path, str]:
    """`out` (the report as JSON) and `out`'s `.ids.txt` sibling (the verified ids); returns both
    paths and the id list's sha256."""
    out.parent.mkdir(parents=True, exist_ok=True)
    ids = report.kept(checker)
    digest = ids_sha256(ids)
    payload = {**json.loads(report.model_dump_json()), "counts": report.counts(),
               "resolved_by_checker": report.resolved_by_checker(), "verified_ids_sha256": digest}
    out.write_text(json.dumps(payload, indent=1) + "\n")
    ids_path = out.with_suffix(".ids.txt")
    ids_path.write_text("".join(f"{i}\n" for i in ids))
    return out, ids_path, digest
