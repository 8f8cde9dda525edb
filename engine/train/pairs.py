"""Preference pairs for offline DPO from judged samples (K per problem) of a model on `pairs_from`.

Per problem: chosen = the highest pass_ratio (ties: the shorter completion, then
the earlier sample — never the faster run: a run time differs between two runs of one spec),
rejected = the lowest (ties: a SYNTAX_ERROR or TIMEOUT first, the
clearest failures to learn from, then the longer completion). The pair is kept
when chosen − rejected ≥ `min_delta` (a phase's `pairs: {min_delta}`, default 0.3).
Problems where no sample passes a single test are dropped: preferring one broken
program over another teaches nothing. INTERNAL_ERROR results are judge faults and
never stand for the model.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence, Union

from pydantic import BaseModel

from engine.data.files import read_problems
from engine.errors import UserError
from engine.files import atomic_write
from engine.judge.api import Judge, JudgeConfig
from engine.judge.batch import Sample, VerdictRecord, completion_digest, read_samples
from engine.judge.verdict import SampleResult, Verdict
from engine.problem import Problem
from engine.prompts.templates import Message, render_prompt, resolve_template
from engine.spec.registry import Registry

Prompt = Union[list[Message], str]
PromptFor = Callable[[Problem], Prompt]
Judged = Mapping[str, Sequence[tuple[str, SampleResult]]]

CLEAR_FAILURES = frozenset({Verdict.SYNTAX_ERROR, Verdict.TIMEOUT})
DROP_REASONS = ("no samples", "fewer than 2 judged samples", "all samples score zero", "delta below min_delta")


class PreferencePair(BaseModel):
    """One line of the pairs JSONL (what the trl DPO exporter reads)."""

    problem_id: str
    prompt: Prompt
    chosen: str
    rejected: str
    chosen_pass_ratio: float
    rejected_pass_ratio: float
    chosen_verdict: Verdict
    rejected_verdict: Verdict
    delta: float
    rejected_class: Optional[str] = None  # hard negatives (engine.train.flywheel_rows): the failure's class
    chosen_from: Optional[str] = None  # hard negatives: harvest | reference
    rejected_step: Optional[int] = None  # hard negatives from rollouts: the training step that drew the rejected answer


class PairsReport(BaseModel):
    """Pair quality: how many pairs, how far apart, from what, and at what judging cost."""

    problems: int
    pairs: int
    min_delta: float
    samples: int  # judged samples read
    judge_calls: int  # samples actually executed (not answered from the judge's cache)
    dropped: dict[str, int]  # reason → problems without a pair
    delta_histogram: dict[str, int]  # "0.3-0.4" → pairs
    chosen_verdicts: dict[str, int]
    rejected_verdicts: dict[str, int]
    judge: str = ""  # the judge version the samples were judged with (limits and isolation level)


@dataclass(kw_only=True)
class PairsResult:
    pairs: list[PreferencePair]
    report: PairsReport
    dropped: dict[str, str] = field(default_factory=dict)  # problem id → reason


def pick_chosen(samples: Sequence[tuple[str, SampleResult]]) -> tuple[str, SampleResult]:
    return min(samples, key=lambda s: (-s[1].pass_ratio, len(s[0])))  # min: the earlier of equals


def pick_rejected(samples: Sequence[tuple[str, SampleResult]]) -> tuple[str, SampleResult]:
    return min(samples, key=lambda s: (s[1].pass_ratio, s[1].verdict not in CLEAR_FAILURES, -len(s[0])))


def _pair_or_reason(
    problem: Problem, samples: Sequence[tuple[str, SampleResult]], min_delta: float, prompt_for: PromptFor
) -> Union[PreferencePair, str]:
    usable = [s for s in samples if s[1].verdict is not Verdict.INTERNAL_ERROR]
    if not samples:
        return DROP_REASONS[0]
    if len(usable) < 2:
        return DROP_REASONS[1]
    chosen, rejected = pick_chosen(usable), pick_rejected(usable)
    if chosen[1].pass_ratio == 0:
        return DROP_REASONS[2]
    delta = chosen[1].pass_ratio - rejected[1].pass_ratio
    if delta < min_delta - 1e-12:
        return DROP_REASONS[3]
    return PreferencePair(
        problem_id=problem.id, prompt=prompt_for(problem), chosen=chosen[0], rejected=rejected[0],
        chosen_pass_ratio=chosen[1].pass_ratio, rejected_pass_ratio=rejected[1].pass_ratio,
        chosen_verdict=chosen[1].verdict, rejected_verdict=rejected[1].verdict, delta=delta,
    )


def _bucket(delta: float) -> str:
    low = min(int(delta * 10 + 1e-9), 9) / 10
    return f"{low:.1f}-{low + 0.1:.1f}"


def build_pairs(
    problems: Sequence[Problem], judged: Judged, *, min_delta: float = 0.3, prompt_for: Optional[PromptFor] = None
) -> PairsResult:
    """One preference pair per problem where the judged samples allow it, and the quality report."""
    if not 0 < min_delta <= 1:
        raise UserError(f"min_delta must be in (0, 1], got {min_delta}")
    prompt_for = prompt_for or (lambda p: [Message(role="user", content=p.statement)])
    pairs: list[PreferencePair] = []
    dropped: dict[str, str] = {}
    for problem in problems:
        outcome = _pair_or_reason(problem, judged.get(problem.id, ()), min_delta, prompt_for)
        if isinstance(outcome, str):
            dropped[problem.id] = outcome
        else:
            pairs.append(outcome)
    results = [r for problem in problems for _, r in judged.get(problem.id, ())]
    report = PairsReport(
        problems=len(problems), pairs=len(pairs), min_delta=min_delta, samples=len(results),
        judge_calls=sum(not r.cached for r in results),
        dropped={reason: n for reason in DROP_REASONS if (n := Counter(dropped.values())[reason])},
        delta_histogram=dict(sorted(Counter(_bucket(p.delta) for p in pairs).items())),
        chosen_verdicts=dict(Counter(p.chosen_verdict.value for p in pairs).most_common()),
        rejected_verdicts=dict(Counter(p.rejected_verdict.value for p in pairs).most_common()),
    )
    return PairsResult(pairs=pairs, report=report, dropped=dropped)


def registry_prompt(registry: Registry, template: Optional[str] = None) -> PromptFor:
    """Prompts as the model saw them: the named template, else the registry default per kind."""

    def prompt_for(problem: Problem) -> Prompt:
        return render_prompt(problem, resolve_template(registry, template, problem), registry)

    return prompt_for


def report_path(out: Path) -> Path:
    return out.with_name(out.name.removesuffix(".jsonl") + ".report.json")


def write_pairs(result: PairsResult, out: Path) -> Path:
    """Write the pairs JSONL at `out` and the report beside it; returns the report's path."""
    atomic_write(out, "".join(pair.model_dump_json() + "\n" for pair in result.pairs))
    report = {**result.report.model_dump(), "dropped_problems": result.dropped}
    return atomic_write(report_path(out), json.dumps(report, indent=2) + "\n")


def judged_samples(
    problems_path: Path,
    samples_path: Path,
    *,
    verdicts_path: Optional[Path] = None,
    config: Optional[JudgeConfig] = None,
    progress: Optional[Callable[[int, int], None]] = None,
) -> tuple[list[Problem], dict[str, list[tuple[str, SampleResult]]], str]:
    """The sampled problems, their (completion, result) lists, and the judge version: judged now
    (every test, whatever `config` says: a pair's Δ is a difference of pass ratios), or read from
    the dense records `rlvr-run judge` wrote for the same samples file (`verdicts_path`)."""
    problems = read_problems(problems_path)
    samples = read_samples(samples_path, problems)
    if verdicts_path is not None:
        records = _read_verdicts(verdicts_path, samples)
        results: list[SampleResult] = list(records)
        version = records[0].judge_version if records else ""
    else:
        items = [(problems[s.problem_id], s.completion) for s in samples]
        results = []
        with Judge(dataclasses.replace(config or JudgeConfig(), stop_on_first_failure=False)) as judge:
            for lo in range(0, len(items), 32):
                results.extend(judge.judge_many(items[lo : lo + 32]))
                if progress:
                    progress(len(results), len(items))
            version = judge.version
    judged: dict[str, list[tuple[str, SampleResult]]] = {}
    for sample, result in zip(samples, results, strict=True):
        judged.setdefault(sample.problem_id, []).append((sample.completion, result))
    return [problems[pid] for pid in judged], judged, version


def _read_verdicts(path: Path, samples: list[Sample]) -> list[VerdictRecord]:
    count = len(samples)
    if not path.is_file():
        raise UserError(f"verdicts file not found: {path}\n  fix: write it with `rlvr-run judge ... --out {path}`")
    records = [VerdictRecord.model_validate_json(line) for line in path.read_text().splitlines() if line.strip()]
    if sorted(r.index for r in records) != list(range(count)):
        raise UserError(f"{path}: {len(records)} verdict records do not match the {count} samples\n"
                        "  fix: judge this samples file again (`rlvr-run judge`), or drop --verdicts")
    not_dense = sorted({r.mode or "unknown" for r in records} - {"dense"})
    if not_dense:
        raise UserError(f"{path}: verdicts judged in {'/'.join(not_dense)} mode; a pair's Δ needs every test's "
                        "result (sparse judging stops at the first failure and undercounts passed tests)\n"
                        "  fix: judge the samples again with `rlvr-run judge --mode dense`, or drop --verdicts")
    versions = sorted({r.judge_version for r in records})
    if len(versions) > 1:
        raise UserError(f"{path}: verdicts from {len(versions)} judge versions ({', '.join(versions)})\n"
                        "  fix: judge the whole samples file again with one `rlvr-run judge` command")
    records = sorted(records, key=lambda r: r.index)
    # Matched by position: a samples file drawn again (same count) must not take the old verdicts.
    stale = [s for s, r in zip(samples, records, strict=True)
             if r.problem_id != s.problem_id or r.completion_sha256 != completion_digest(s.completion)]
    if stale:
        raise UserError(f"{path}: not the verdicts of these samples: {len(stale)} of {count} records judged another "
                        f"completion or problem at that position (first: sample {stale[0].index}, "
                        f"{stale[0].problem_id}), or were written before records named their completion\n"
                        f"  fix: judge this samples file again (`rlvr-run judge --mode dense`), or drop --verdicts")
    return records
