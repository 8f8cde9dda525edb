"""Failure cases: per phase and failure class (verdict), a few failed problems with the
completion, the verdict and the failing PUBLIC test (never a private test's content), and how
many more failed that way; and answers repaired from wrong to accepted.

The page stays a page at a seed study's size (tens of runs, thousands of judged samples): each
phase shows at most PER_CLASS examples of each class, counted over all its seeds, and at most
REPAIRED repaired answers per dataset; the rest are counted, never listed."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Union

from engine.data.dataset import LoadedDataset
from engine.evaluate.records import SampleRecord
from engine.judge.api import Judge
from engine.judge.config import JudgeConfig
from engine.isolation.public import public_view
from engine.plan.frozen import CONTENT_FILE, load_frozen_dataset, read_frozen_run, run_registry
from engine.problem import Problem
from engine.prompts.templates import PromptChoice
from engine.report.main_table import Column
from engine.report.study import Cell, Study

PER_CLASS = 2
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
    seed: Optional[int] = None


def _clip(text: str) -> str:
    lines = text.strip().splitlines()
    return "\n".join(lines[:MAX_LINES] + ([f"… ({len(lines) - MAX_LINES} more lines)"] if len(lines) > MAX_LINES else []))


@dataclass
class Failed:
    """One phase's failures of one class on one dataset: a few examples and a count of the rest."""

    unit: str
    verdict: str
    examples: list[Case]
    samples: int  # first-round failed samples of this class, over every seed
    problems: int  # distinct problems among them
    seeds: int

    @property
    def more(self) -> int:
        return self.samples - len(self.examples)


@dataclass
class Cases:
    """A dataset's failure cases: per phase and class, then repaired answers (with a count of the rest)."""

    failed: list[Failed]
    repaired: list[Case]
    repaired_total: int

    @property
    def repaired_more(self) -> int:
        return self.repaired_total - len(self.repaired)


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


# Said of a case whose run's problems could not be read (data not yet cached, a mirror away): pages
# that say it are made again next time, never kept (`generate.write_report`).
UNREAD = "the run's problems could not be read back"


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
        config = frozen.judge_config("evaluate")
    except Exception as exc:  # the data moved since the run: show the cases without their public tests
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "no reason given"
        # in words: a page names what is missing, never an exception's class
        return Unreadable(f"its config names no {first}" if isinstance(exc, KeyError) else first)
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
        return self.judges[key].judge(problem, completion, shown=True)


NO_CODE = "NO_CODE"
NOTHING_RAN = "no code could be read from the answer: nothing was run, no test passed"


def public_case(judge: LazyJudge, run: Union[Shown, Unreadable], problem_id: str, completion: str,
                verdict: str = "") -> str:
    """The first public test `completion` fails, as the run judges it, or why there is none. An
    answer without code (NO_CODE) ran no test: it passes none, public or hidden."""
    if verdict == NO_CODE:
        return NOTHING_RAN
    if isinstance(run, Unreadable):
        return f"public tests unknown: {UNREAD} ({run.reason})"
    view = run.view(problem_id)
    if view is None:
        return "no public test to show"
    result = judge.run(run.judge, view, completion)
    failing = next((t for t in result.failures), None)
    if failing is None and result.total and result.passed == result.total:
        return f"passes the public tests ({result.passed}/{result.total}); fails hidden ones"
    if failing is None:  # not a test's failure: nothing ran (no code) or the program as a whole failed
        return f"fails the public tests ({result.passed}/{result.total}): {result.verdict.value}"
    parts = [f"public test {failing.index + 1}: {failing.verdict.value}"]
    if failing.input is not None:
        parts.append(f"input {failing.input.strip()[:200]!r}")
    if failing.expected is not None:
        parts.append(f"expected {failing.expected.strip()[:200]!r}")
    if failing.got is not None:
        parts.append(f"got {failing.got.strip()[:200]!r}")
    return "; ".join(parts)


def cases(study: Study, col: Column, portable: Callable[[str], str] = str) -> Cases:
    """Per phase (in plan order) and failure class, up to PER_CLASS examples from the phase's
    first-round failures over all its seeds (distinct problems, by problem id, then seed), with
    the count of the rest; and up to REPAIRED repaired answers with the count of the rest.
    `portable` rewrites the folders named in why a run's problems could not be read back; answers
    and tests are shown as they were."""
    failed: list[Failed] = []
    repaired: list[Case] = []
    repaired_total = 0
    with LazyJudge() as judge:
        for unit in study.units():
            if unit not in col.cells:
                continue
            cells = sorted(col.cells[unit], key=lambda c: (c.run.seed is None, c.run.seed or 0))
            by_class: dict[str, list[tuple[Cell, SampleRecord]]] = {}
            for cell in cells:
                for r in cell.samples():
                    if r.round == 1 and not r.accepted:
                        by_class.setdefault(r.verdict, []).append((cell, r))
            runs: dict[str, Union[Shown, Unreadable]] = {}  # read back once per run, only when shown
            for verdict in sorted(by_class, key=lambda v: (-len(by_class[v]), v)):  # the commonest first
                found = by_class[verdict]
                examples: list[Case] = []
                seen: set[str] = set()
                for cell, r in sorted(found, key=lambda f: (_natural(f[1].problem_id), f[0].run.seed or 0)):
                    if len(examples) == PER_CLASS:
                        break
                    if r.problem_id in seen:
                        continue
                    seen.add(r.problem_id)
                    if cell.run.id not in runs:
                        found_run = shown(Path(cell.run.run_dir or "."), col.dataset)
                        runs[cell.run.id] = (Unreadable(portable(found_run.reason)) if isinstance(found_run, Unreadable)
                                             else found_run)
                    examples.append(Case(unit, r.problem_id, r.verdict, _clip(r.completion),
                                         public_case(judge, runs[cell.run.id], r.problem_id, r.completion, r.verdict),
                                         seed=cell.run.seed))
                failed.append(Failed(unit, verdict, examples, len(found), len({r.problem_id for _, r in found}),
                                     len({c.run.id for c, _ in found})))
            for cell in cells:
                found = _repaired(unit, cell.samples(), cell.run.seed)
                repaired_total += len(found)
                repaired += found[: REPAIRED - len(repaired)]
    return Cases(failed, repaired, repaired_total)


def _natural(problem_id: str) -> list:
    """p2 before p10: digits compare as numbers (split() alternates text and digits, so the
    lists compare position by position, text with text and number with number)."""
    return [int(part) if i % 2 else part for i, part in enumerate(re.split(r"(\d+)", problem_id))]


def _repaired(unit: str, records: list[SampleRecord], seed: Optional[int]) -> list[Case]:
    by_uid = {r.uid: r for r in records}
    out = []
    for r in records:
        first = by_uid.get(r.parent or "")
        if r.round > 1 and r.accepted and first is not None:
            out.append(Case(unit, r.problem_id, f"{first.verdict} → ACCEPTED", _clip(r.completion), "",
                            repaired_from=_clip(first.completion), seed=seed))
    return out
