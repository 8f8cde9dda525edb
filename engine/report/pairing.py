"""Two sides of a comparison, paired by seed id and problem id: the one way every Δ, its
interval and its detectable difference on the pages are set up (ablations, each phase against
the phase it starts from, the flywheel's class shift).

A seed is paired with the same seed; a seed without a counterpart on the other side is
dropped, and the pair says so. An unseeded side (the base model evaluated greedily: one run,
seed None) is the same model for every seed, so it stands beside each seed of the other side.
Problems are aligned by id; a problem without a value on both sides of every paired seed is
left out, and the pair counts it. A side never holds one seed twice (`seed_rows`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence, Union

import numpy as np

from engine.report.study import Cell

Row = Callable[[Cell], Optional[dict[str, float]]]  # a cell's value per problem id; None: unreadable


def seed_rows(cells: Sequence[Cell]) -> list[Cell]:
    """`cells` in seed order; a seed (or a run) met twice is refused: it would count one run's
    numbers twice and shrink every spread computed from them."""
    seen: dict[object, str] = {}
    for cell in cells:
        for key in (("run", cell.run.id, cell.dataset), ("seed", cell.run.seed)):
            if key in seen:
                raise ValueError(f"{cell.dataset}: {key[0]} {key[1]} of {cell.run.phase} appears twice "
                                 f"(runs {seen[key]} and {cell.run.id}); each is counted once")
            seen[key] = cell.run.id
    return sorted(cells, key=lambda c: (c.run.seed is None, c.run.seed or 0))


def _seeds(seeds: Sequence[Optional[int]]) -> str:
    listed = ", ".join(str(s) for s in seeds)
    return f"seed {listed}" if len(seeds) == 1 else f"seeds {listed}"


@dataclass(frozen=True)
class Pair:
    seeds: tuple[Optional[int], ...]  # the paired seeds (None: both sides unseeded)
    problems: tuple[str, ...]
    ours: np.ndarray  # seeds × problems
    theirs: np.ndarray  # seeds × problems (an unseeded side repeated for every seed)
    theirs_seeded: bool  # False: one unseeded run stands for every seed (its rows are not independent)
    dropped_ours: tuple[int, ...] = ()  # seeds of ours without a counterpart
    dropped_theirs: tuple[int, ...] = ()
    dropped_problems: int = 0

    def note(self, ours: str, theirs: str) -> str:
        """What was left out, in words ("" when nothing was)."""
        parts = []
        if self.dropped_ours or self.dropped_theirs:
            parts.append(f"paired on {_seeds(self.seeds)}")
            if self.dropped_ours:
                parts.append(f"{_seeds(self.dropped_ours)} of {ours} {'has' if len(self.dropped_ours) == 1 else 'have'} "
                             f"no counterpart in {theirs}")
            if self.dropped_theirs:
                parts.append(f"{_seeds(self.dropped_theirs)} of {theirs} "
                             f"{'has' if len(self.dropped_theirs) == 1 else 'have'} no counterpart in {ours}")
        if self.dropped_problems:
            parts.append(f"{self.dropped_problems} problem(s) without a value on both sides left out")
        return "; ".join(parts)


def pair(ours: Sequence[Cell], theirs: Sequence[Cell], row: Row) -> Union[Pair, str]:
    """`ours` and `theirs` paired by seed and problem, or why they cannot be (a sentence)."""
    ours, theirs = seed_rows(ours), seed_rows(theirs)
    if not ours or not theirs:
        return "nothing to pair"
    unseeded_theirs = theirs[0].run.seed is None
    unseeded_ours = ours[0].run.seed is None
    dropped_ours: tuple[int, ...] = ()
    dropped_theirs: tuple[int, ...] = ()
    if unseeded_theirs or unseeded_ours:
        # An unseeded run is one model for every seed: it pairs with each seed of the other side.
        if unseeded_theirs and unseeded_ours:
            a, b = ours[:1], theirs[:1]
        elif unseeded_theirs:
            a, b = ours, [theirs[0]] * len(ours)
        else:
            a, b = [ours[0]] * len(theirs), theirs
    else:
        mine = {c.run.seed: c for c in ours}
        other = {c.run.seed: c for c in theirs}
        common = sorted(set(mine) & set(other))
        dropped_ours = tuple(sorted(s for s in mine if s not in other))  # type: ignore[misc]
        dropped_theirs = tuple(sorted(s for s in other if s not in mine))  # type: ignore[misc]
        if not common:
            return f"no seed on both sides ({_seeds(sorted(mine))} against {_seeds(sorted(other))})"  # type: ignore[arg-type]
        a, b = [mine[s] for s in common], [other[s] for s in common]
    rows_a, rows_b = [row(c) for c in a], [row(c) for c in b]
    if any(r is None for r in rows_a + rows_b):
        return "per-problem records unreadable"
    everywhere = set.intersection(*(set(r) for r in rows_a + rows_b))  # type: ignore[arg-type]
    if not everywhere:
        return "no problem with records on both sides"
    problems = tuple(sorted(everywhere))
    every = set().union(*(set(r) for r in rows_a + rows_b))  # type: ignore[arg-type]
    matrix = lambda rows: np.array([[r[p] for p in problems] for r in rows], dtype=float)  # noqa: E731
    seeds = tuple(c.run.seed for c in (a if not unseeded_ours or unseeded_theirs else b))
    return Pair(seeds=seeds, problems=problems, ours=matrix(rows_a), theirs=matrix(rows_b),
                theirs_seeded=not unseeded_theirs or unseeded_ours or len(a) == 1, dropped_ours=dropped_ours,
                dropped_theirs=dropped_theirs, dropped_problems=len(every) - len(problems))
