"""The bootstrap gathers its draws a block at a time; its means are those of the whole
REPS × seeds × problems array, to the bit, whatever the block size (the pages' intervals must
not move by a digit because a study grew)."""

from __future__ import annotations

import numpy as np
import pytest

from engine.report import stats


def _whole(matrix: np.ndarray, seed_draw: np.ndarray, problem_draw: np.ndarray) -> np.ndarray:
    picked = matrix[seed_draw]  # REPS × seeds × problems, all at once
    index = problem_draw[:, None, :].repeat(matrix.shape[0], axis=1)
    return np.take_along_axis(picked, index, axis=2).mean(axis=(1, 2))


@pytest.mark.parametrize("shape", [(1, 1), (1, 20), (3, 7), (8, 100), (30, 250)])
@pytest.mark.parametrize("cells", [1, 5_000, 1 << 20, 1 << 40])
def test_block_means_equal_the_whole_arrays_to_the_bit(shape, cells, monkeypatch):
    monkeypatch.setattr(stats, "BOOT_CELLS", cells)
    rng = np.random.default_rng(sum(shape))
    accepted = (rng.random(shape) < 0.4).astype(float)
    for matrix in (rng.random(shape), rng.integers(0, 5, shape) / 4.0, rng.random(shape) - rng.random(shape),
                   accepted, accepted - (rng.random(shape) < 0.5)):  # the last three: counted, not gathered
        seed_draw, problem_draw = stats._draws(*shape)
        assert np.array_equal(stats._boot(matrix, seed_draw, problem_draw), _whole(matrix, seed_draw, problem_draw))


@pytest.mark.parametrize("shape", [(2, 9), (82, 100)])
def test_counted_means_equal_the_gathered_ones_to_the_bit(shape):
    """A matrix of whole grains (accepted 0/1, a paired difference, quarters) is counted; the
    gather of the same matrix gives the same bits, and a matrix of any other floats is gathered."""
    rng = np.random.default_rng(7)
    seed_draw, problem_draw = stats._draws(*shape)
    for matrix in ((rng.random(shape) < 0.3).astype(float), rng.integers(-4, 5, shape) / 8.0):
        assert stats._exact_sums(matrix)
        gathered = stats._boot(matrix + 0.0, seed_draw.copy(), problem_draw.copy())  # copies: never counted from kept
        assert np.array_equal(stats._counted(matrix, seed_draw, problem_draw), _whole(matrix, seed_draw, problem_draw))
        assert np.array_equal(gathered, _whole(matrix, seed_draw, problem_draw))
    assert not stats._exact_sums(rng.random(shape)) and not stats._exact_sums(np.full(shape, np.nan))
