"""The best-of-n baseline: n samples per problem from the parent, one chosen by the PUBLIC tests.

The hidden tests that score the choice never take part in it (isolation holds here too): each
candidate is judged on the problem's public tests only; the highest public pass ratio wins, ties
go to the shorter answer, then the earlier sample. The chosen record keeps what choosing cost
(every candidate's tokens), so the report can set it against trained runs at matched cost.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

from engine.evaluate.records import GenerationRecord, Keys, append, read
from engine.judge.api import Judge
from engine.problem import Problem
from engine.repair.public import public_view


class ChosenRecord(GenerationRecord):
    candidates: int  # how many samples it was chosen from
    cost_tokens: int  # prompt + completion tokens of every candidate
    public_pass_ratio: Optional[float]  # the chosen sample's, on the public tests (None: there are none)


def choose(problems: Sequence[Problem], generations: Sequence[GenerationRecord], judge: Judge) -> list[ChosenRecord]:
    """One sample per problem; every candidate of every problem is judged in one stream, so the
    workers never wait at a problem's end for its slowest candidate."""
    by_problem: dict[str, list[GenerationRecord]] = {}
    for g in generations:
        by_problem.setdefault(g.problem_id, []).append(g)
    todo = [(problem, sorted(by_problem[problem.id], key=lambda g: g.sample), public_view(problem))
            for problem in problems if by_problem.get(problem.id)]
    items = [(view, g.completion) for _, candidates, view in todo if view is not None for g in candidates]
    ratios = iter(r.pass_ratio for r in judge.judge_many(items))
    chosen = []
    for problem, candidates, view in todo:
        scores = [next(ratios) for _ in candidates] if view is not None else [0.0] * len(candidates)
        best = max(range(len(candidates)), key=lambda i: (scores[i], -candidates[i].completion_tokens, -i))
        cost = sum(g.prompt_tokens + g.completion_tokens for g in candidates)
        chosen.append(ChosenRecord(**candidates[best].model_dump(), candidates=len(candidates), cost_tokens=cost,
                                   public_pass_ratio=scores[best] if view is not None else None))
    return chosen


def write_chosen(path: Path, records: Sequence[ChosenRecord]) -> None:
    if path.exists():
        path.unlink()
    append(path, records)


def import_chosen(source: Path, target: Path, keys: Keys) -> list[ChosenRecord]:
    """The chosen samples as this evaluation's generations (one per problem), stamped with its keys."""
    chosen = [c.model_copy(update={"keys": keys, "sample": 0}) for c in read(source, ChosenRecord)]  # type: ignore
    if not any(True for _ in read(target, GenerationRecord, keys)):
        append(target, chosen)
    return chosen  # type: ignore[return-value]
