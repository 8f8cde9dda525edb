"""The best-of-n baseline: n samples per problem from the parent, one chosen by the PUBLIC tests.

The hidden tests that score the choice never take part in it (isolation holds here too): each
candidate is judged on the problem's public tests only (`engine.isolation.public`: what its
prompt showed); the highest public pass ratio wins, ties go to the shorter answer, then the
earlier sample. A problem without public tests is never chosen for silently: validation refuses
the dataset unless the phase declares `without_public: first`, which takes its first sample (and
the pages count those problems). Nor is a candidate the judge faulted on: the choice is refused
until a re-run judges it. Nor is a sample the server failed to generate (GEN_ERROR): it is no
candidate at all (empty text, 0 tokens, it would win every tie); a problem whose every sample
failed keeps one GEN_ERROR record, a fault the completion check bounds, never a choice. The
chosen record keeps what choosing cost (every candidate's tokens), so the report can set it
against trained runs at matched cost.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Sequence

from engine.errors import UserError

from engine.evaluate.records import GenerationRecord, Keys, append, is_fault, read
from engine.judge.api import Judge
from engine.judge.verdict import Verdict
from engine.problem import Problem
from engine.isolation.public import Shown, public_view


class ChosenRecord(GenerationRecord):
    candidates: int  # how many samples it was chosen from
    cost_tokens: int  # prompt + completion tokens of every candidate
    public_pass_ratio: Optional[float]  # the chosen sample's, on the public tests (None: there are none)


def choose(problems: Sequence[Problem], prompts: Sequence[Shown], generations: Sequence[GenerationRecord],
           judge: Judge, *, without_public: Optional[str] = None, dataset: str = "") -> list[ChosenRecord]:
    """One record per problem with samples; `prompts[i]` is what problem i's samples were asked with.
    Every candidate of every problem is judged in one stream, so the workers never wait at a
    problem's end for its slowest candidate."""
    by_problem: dict[str, list[GenerationRecord]] = {}
    for g in generations:
        by_problem.setdefault(g.problem_id, []).append(g)
    views = [public_view(p, shown) for p, shown in zip(problems, prompts, strict=True)]
    missing = [p.id for p, v in zip(problems, views) if v is None]
    if missing and without_public != "first":
        raise UserError(f"best-of-n on {dataset or 'this dataset'}: {len(missing)} of {len(problems)} problems have no "
                        f"public test (e.g. {missing[0]}); choosing among their samples would be a blind pick\n"
                        f"  fix: declare `without_public: first` on the best_of_n phase, or drop the dataset")
    todo = [(problem, [g for g in sorted(by_problem[problem.id], key=lambda g: g.sample) if not is_fault(g)], view)
            for problem, view in zip(problems, views) if by_problem.get(problem.id)]
    items = [(view, g.completion) for _, candidates, view in todo if view is not None for g in candidates]
    results = judge.judge_many(items, shown=True)
    faults = sum(r.verdict is Verdict.INTERNAL_ERROR for r in results)
    if faults:  # a faulted candidate would rank as a 0: the choice would be the judge's, not the tests'
        raise UserError(f"best-of-n on {dataset or 'this dataset'}: the judge faulted (INTERNAL_ERROR) on the public "
                        f"tests of {faults} of {len(results)} candidates; no choice is made without their scores\n"
                        "  fix: check the judge (its backend, URL, memory and workers), then re-run: the samples "
                        "are kept, only the choice is made again")
    ratios = iter(r.pass_ratio for r in results)
    chosen = []
    for problem, candidates, view in todo:
        cost = sum(g.prompt_tokens + g.completion_tokens for g in by_problem[problem.id])
        if not candidates:  # every sample failed on the server: its fault stands, nothing is chosen
            fault = min(by_problem[problem.id], key=lambda g: g.sample)
            chosen.append(ChosenRecord(**fault.model_dump(), candidates=0, cost_tokens=cost, public_pass_ratio=None))
            continue
        scores: list[Any] = [next(ratios) for _ in candidates] if view is not None else [0.0] * len(candidates)
        best = (max(range(len(candidates)), key=lambda i: (scores[i], -candidates[i].completion_tokens, -i))
                if view is not None else 0)
        chosen.append(ChosenRecord(**candidates[best].model_dump(), candidates=len(candidates), cost_tokens=cost,
                                   public_pass_ratio=scores[best] if view is not None else None))
    return chosen


def write_chosen(path: Path, records: Sequence[ChosenRecord]) -> None:
    if path.exists():
        path.unlink()
    append(path, records)


def import_chosen(source: Path, target: Path, keys: Keys) -> list[ChosenRecord]:
    """The chosen samples as this evaluation's generations (one per problem), stamped with its keys.
    A choice that differs from the one imported before (the best_of_n run chose again) is imported
    again: the last record counts, and the judge judges an answer whose completion changed."""
    chosen = [c.model_copy(update={"keys": keys, "sample": 0}) for c in read(source, ChosenRecord)]  # type: ignore
    have = {g.uid: g for g in read(target, GenerationRecord, keys)}
    changed = [c for c in chosen if (g := have.get(c.uid)) is None
               or (g.completion, g.finish_reason) != (c.completion, c.finish_reason)]
    if changed:
        append(target, changed)
    return chosen  # type: ignore[return-value]
