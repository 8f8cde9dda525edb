"""Failure cases: per phase, failed problems with the completion, the verdict and the failing
PUBLIC test (never a private test's content); and answers repaired from wrong to accepted."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

from engine.data.dataset import LoadedDataset
from engine.evaluate.records import SampleRecord
from engine.judge.api import Judge
from engine.judge.config import JudgeConfig
from engine.isolation.public import public_view
from engine.plan.frozen import CONTENT_FILE, load_frozen_dataset, read_frozen_run, run_registry
from engine.problem import Problem
from engine.prompts.templates import PromptChoice
from engine.report.main_table import Column
from engine.report.study import Study

PER_PHASE = 3
REPAIRED = 5
MAX_LINES = 30


@dataclass
class Case:
    unit: str
    problem_id: str
    verdict: str
    completion: str
    public: str  # the first failing public test, or why there is none to show
    repaired_from: Optional[str] = None  # the failing first answer, for a repaired case


def _clip(text: str) -> str:
    lines = text.strip().splitlines()
    return "\n".join(lines[:MAX_LINES] + ([f"… ({len(lines) - MAX_LINES} more lines)"] if len(lines) > MAX_LINES else []))


@dataclass(frozen=True)
class Shown:
    """A run's problems as it showed them (its evaluation prompt), and the judge it judged with:
    a failure case's public test is run exactly as the run would have run it."""

    problems: dict[str, Problem]
    choice: PromptChoice
    judge: JudgeConfig

    def view(self, problem_id: str) -> Optional[Problem]:
        problem = self.problems.get(problem_id)
        return public_view(problem, self.choice.prompt(problem)) if problem is not None else None


# A frozen dataset entry pins its content (fingerprint, id-list hash): runs sharing one share
# its problems, so a study's pages load each dataset (and parse the registry) once, not per run.
# The key holds the content the run pinned (`inputs.json`): the first run of a key is checked
# against what the source serves now, and a run that pinned other content is loaded (and refused)
# on its own.
_LOADED: dict[tuple[str, str, Optional[str]], dict[str, Problem]] = {}


@dataclass(frozen=True)
class Unreadable:
    """Why a run's problems could not be read back: its cases say so, never "no public test"."""

    reason: str


def shown(run_dir: Path, dataset: str) -> Union[Shown, Unreadable]:
    """What the run at `run_dir` showed of `dataset`, or why it cannot be read back."""
    try:
        frozen = read_frozen_run(run_dir)
        entry = frozen.datasets[dataset]
        registry = run_registry(run_dir)
        key = (dataset, entry.model_dump_json(), _pinned(run_dir, dataset))
        if key not in _LOADED:
            # the problems the run was judged on, not what the source serves today (a new Hub revision)
            loaded: LoadedDataset = load_frozen_dataset(dataset, entry, registry, frozen.judge, run_dir, record=False)
            _LOADED[key] = {p.id: p for p in loaded.problems}
        problems = _LOADED[key]
        choice = PromptChoice(registry=registry, template=frozen.protocols.get("evaluate", {}).get("prompt"),
                              model=frozen.base_model)
        config = frozen.judge_config()
    except Exception as exc:  # the data moved since the run: show the cases without their public tests
        return Unreadable(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".rstrip(": "))
    return Shown(problems=problems, choice=choice, judge=config)


def _pinned(run_dir: Path, dataset: str) -> Optional[str]:
    try:
        return json.loads((run_dir / CONTENT_FILE).read_text(encoding="utf-8")).get(dataset)
    except (OSError, ValueError, AttributeError):
        return None


class LazyJudge:
    """The judges' workers start only if a public test is actually run; one judge per run config."""

    def __init__(self) -> None:
        self.judges: dict[str, Judge] = {}  # by repr: a JudgeConfig is a mutable dataclass

    def __enter__(self) -> "LazyJudge":
        return self

    def __exit__(self, *exc: object) -> None:
        for judge in self.judges.values():
            judge.close()

    def run(self, config: JudgeConfig, problem: Problem, completion: str):  # type: ignore[no-untyped-def]
        key = repr(config)
        if key not in self.judges:
            self.judges[key] = Judge(config)
        return self.judges[key].judge(problem, completion)


def public_case(judge: LazyJudge, run: Union[Shown, Unreadable], problem_id: str, completion: str) -> str:
    """The first public test `completion` fails, as the run judges it, or why there is none."""
    if isinstance(run, Unreadable):
        return f"public tests unknown: the run's problems could not be read back ({run.reason})"
    view = run.view(problem_id)
    if view is None:
        return "no public test to show"
    result = judge.run(run.judge, view, completion)
    failing = next((t for t in result.failures), None)
    if failing is None:
        return f"passes the public tests ({result.passed}/{result.total}); fails hidden ones"
    parts = [f"public test {failing.index + 1}: {failing.verdict.value}"]
    if failing.input is not None:
        parts.append(f"input {failing.input.strip()[:200]!r}")
    if failing.expected is not None:
        parts.append(f"expected {failing.expected.strip()[:200]!r}")
    if failing.got is not None:
        parts.append(f"got {failing.got.strip()[:200]!r}")
    return "; ".join(parts)


def cases(study: Study, col: Column) -> tuple[list[Case], list[Case]]:
    """(failures per phase, repaired cases) on one dataset column."""
    failed: list[Case] = []
    repaired: list[Case] = []
    with LazyJudge() as judge:
        for unit in study.units():
            if unit not in col.cells:
                continue
            run = shown(Path(col.cells[unit][0].run.run_dir or "."), col.dataset)
            records = col.cells[unit][0].samples()
            firsts = [r for r in records if r.round == 1 and not r.accepted]
            for r in sorted(firsts, key=lambda r: r.problem_id)[:PER_PHASE]:
                failed.append(Case(unit, r.problem_id, r.verdict, _clip(r.completion),
                                   public_case(judge, run, r.problem_id, r.completion)))
            repaired += _repaired(unit, records)[: REPAIRED - len(repaired)]
    return failed, repaired


def _repaired(unit: str, records: list[SampleRecord]) -> list[Case]:
    by_uid = {r.uid: r for r in records}
    out = []
    for r in records:
        first = by_uid.get(r.parent or "")
        if r.round > 1 and r.accepted and first is not None:
            out.append(Case(unit, r.problem_id, f"{first.verdict} → ACCEPTED", _clip(r.completion), "",
                            repaired_from=_clip(first.completion)))
    return out
