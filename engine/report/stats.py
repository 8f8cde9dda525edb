"""Seed-honest statistics: mean ± std over seeds, and stratified bootstrap intervals.

A cell's data is a seeds × problems matrix (each entry: the problem's first-round accepted
rate in that seed's evaluation). The bootstrap resamples seeds, and problems within them,
with one fixed RNG; compared runs share the problem draw (paired), so a Δ interval reflects
seed and problem variation, not the luck of a split.
"""

from __future__ import annotations

import functools
import statistics
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

REPS = 2000
RNG_SEED = 0


@dataclass(frozen=True)
class Estimate:
    mean: float
    std: Optional[float]  # over seeds (None with one seed)
    low: Optional[float]  # 95 % bootstrap interval
    high: Optional[float]
    seeds: int


def mean_std(values: Sequence[float]) -> tuple[float, Optional[float]]:
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None)


KEPT_SHAPES = 16  # shapes (seeds × problems) whose draws and counts are kept: a study has a few


@functools.lru_cache(maxsize=KEPT_SHAPES)
def _draws(seeds: int, problems: int) -> tuple[np.ndarray, np.ndarray]:
    """The fixed draws for a seeds × problems matrix (the same every call: one RNG seed), made once
    per shape; read-only, since every caller shares them."""
    rng = np.random.default_rng(RNG_SEED)
    out = rng.integers(0, seeds, size=(REPS, seeds)), rng.integers(0, problems, size=(REPS, problems))
    for draw in out:
        draw.setflags(write=False)
    return out


BOOT_CELLS = 1 << 20  # resampled entries held at once: a few MB, whatever the study's size


def _boot(matrix: np.ndarray, seed_draw: np.ndarray, problem_draw: np.ndarray) -> np.ndarray:
    """REPS bootstrap means of a seeds × problems matrix: draw r's mean over
    matrix[seed_draw[r, i], problem_draw[r, j]] for every (i, j). Gathered a block of draws at
    a time, so a big study's matrix never becomes one REPS × seeds × problems array in memory;
    each draw's mean is the same reduction either way, so the numbers are the same to the bit.
    A matrix whose sums are exact (accepted 0/1, the pages' commonest) is counted instead
    (`_counted`): the same bits, without the gather that was most of a page set's statistics."""
    if _exact_sums(matrix):
        return _counted(matrix, seed_draw, problem_draw)
    seeds, problems = matrix.shape
    block = max(1, BOOT_CELLS // max(1, seeds * problems))
    means = np.empty(seed_draw.shape[0])
    for start in range(0, seed_draw.shape[0], block):
        rows, cols = seed_draw[start:start + block], problem_draw[start:start + block]
        means[start:start + block] = matrix[rows[:, :, None], cols[:, None, :]].mean(axis=(1, 2))
    return means


# A matrix of multiples of 2**-GRAIN (accepted 0/1, their paired differences, quarters) whose every
# partial sum stays below 2**53 grains is summed exactly, in any order: its bootstrap means can be
# counted instead of gathered, to the same bits.
GRAIN = 30


def _exact_sums(matrix: np.ndarray) -> bool:
    if matrix.size == 0 or not np.isfinite(matrix).all():
        return False
    grains = matrix * float(2 ** GRAIN)
    return bool((grains == np.rint(grains)).all()) and float(np.abs(grains).max()) * matrix.size < 2.0 ** 53


def _counted(matrix: np.ndarray, seed_draw: np.ndarray, problem_draw: np.ndarray) -> np.ndarray:
    """`_boot` of an exactly summed matrix: draw r's sum is Σ_s (times seed s was drawn) ×
    Σ_p (times problem p was drawn) × matrix[s, p], each term and partial sum exact, so the sum
    (and the mean, the one rounding of sum / cells) is the gathered one's to the bit, without the
    REPS × seeds × problems gather. The counts are made a block of draws at a time, as the gather."""
    seeds, problems = matrix.shape
    block = max(1, BOOT_CELLS // max(1, seeds + problems))
    means = np.empty(seed_draw.shape[0])
    for start in range(0, seed_draw.shape[0], block):
        seed_counts, problem_counts = _counts(seed_draw, problem_draw, start, block, seeds, problems)
        # draws × seeds: each seed's sum over the drawn problems (einsum's own loop: a BLAS product
        # would wake a thread pool that spins on every core for a few milliseconds after each call)
        per_seed = np.einsum("rp,sp->rs", problem_counts, matrix)
        means[start:start + block] = (seed_counts * per_seed).sum(axis=1) / (seeds * problems)
    return means


_COUNTED: dict[tuple, tuple] = {}  # the counts of the shared draws (`_draws`), which never change


def _counts(seed_draw: np.ndarray, problem_draw: np.ndarray, start: int, block: int, seeds: int,
            problems: int) -> tuple[np.ndarray, np.ndarray]:
    """How many times each seed and each problem was drawn, per draw of the block; kept for the
    read-only draws `_draws` shares when one block holds them all (held here with them, so a
    kept entry is of the very arrays it counted)."""
    key = (id(seed_draw), id(problem_draw), start, block, seeds, problems)
    kept = _COUNTED.get(key)
    if kept is not None and kept[0] is seed_draw and kept[1] is problem_draw:
        return kept[2], kept[3]
    rows, cols = seed_draw[start:start + block], problem_draw[start:start + block]
    n = rows.shape[0]
    offsets = np.arange(n)[:, None]
    seed_counts = np.bincount((offsets * seeds + rows).ravel(), minlength=n * seeds).reshape(n, seeds).astype(float)
    problem_counts = np.bincount((offsets * problems + cols).ravel(),
                                 minlength=n * problems).reshape(n, problems).astype(float)
    if n == seed_draw.shape[0] and not seed_draw.flags.writeable and not problem_draw.flags.writeable:
        if len(_COUNTED) >= KEPT_SHAPES:
            _COUNTED.clear()
        _COUNTED[key] = (seed_draw, problem_draw, seed_counts, problem_counts)
    return seed_counts, problem_counts


def estimate(per_seed: Sequence[float], matrix: Optional[np.ndarray]) -> Estimate:
    """The cell: seed mean ± std; the interval when per-problem data exists."""
    mean, std = mean_std(per_seed)
    if matrix is None or matrix.size == 0:
        return Estimate(mean, std, None, None, len(per_seed))
    means = _boot(matrix, *_draws(*matrix.shape))
    return Estimate(mean, std, float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975)), len(per_seed))


@dataclass(frozen=True)
class Delta:
    delta: float
    low: float
    high: float
    p_improve: float  # share of bootstrap draws where the variant is ahead
    seeds: int


def paired_delta(variant: np.ndarray, control: np.ndarray) -> Delta:
    """variant − control over seeds × problems matrices paired by seed and problem."""
    seed_draw, problem_draw = _draws(*variant.shape)
    diff = _boot(variant - control, seed_draw, problem_draw)
    return Delta(float((variant - control).mean()), float(np.quantile(diff, 0.025)), float(np.quantile(diff, 0.975)),
                 float((diff > 0).mean()), variant.shape[0])


def delta_note(value: str, *, p_improve: bool = True, detectable: bool = True) -> str:
    """What each number of a paired comparison table is (ablations, each phase against its parent,
    the flywheel's class shift): the statistic, the interval's kind, what P(improvement) counts."""
    return (f"_The two sides: {value}, each the mean over the paired seeds and problems. Δ: their difference; in "
            f"brackets its 95 % paired percentile-bootstrap interval ({REPS} draws resampling seeds and, within "
            "them, problems, the same draw for both sides)."
            + (" P(improvement): the share of those draws in which Δ is above 0; seeds: how many were paired."
               if p_improve else "")
            + (" Detectable Δ: the smallest difference this pairing detects with 80 % power at 5 % two-sided."
               if detectable else "") + "_")
