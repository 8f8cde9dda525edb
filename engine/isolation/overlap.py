"""Rule 3's asymmetric scores: one statement copied inside another, shared worked examples,
and reworded statements.

Jaccard (`engine.isolation.neardup`) divides by the union, so a training statement
that copies a benchmark's docstring without its examples, or a benchmark statement
pasted into a longer training text, scores low for its size difference alone. The
contamination checks of the literature (GPT-3's and lm-eval's 13-gram overlap) ask
instead how much of one text occurs in the other. Three scores do that here:

- shingle containment: |A ∩ B| / min(|A|, |B|) over the word-trigram shingles.
  A verbatim copy inside a longer text scores 1.0.
- example containment: the same over the shingles of the worked examples alone
  (`normalize.example_chunks`). A copy whose prose was reworded keeps a problem's
  doctests; the prose's shingles then outnumber them in the score above.
- word containment: the same over the statements' content words
  (`normalize.content_words`), each word weighted by its inverse document frequency
  over both datasets. Synonyms, dropped examples, reordered sentences and renamed
  or renumbered variables leave most distinctive words in place while they break
  shingles; the weighting keeps words every statement of a dataset uses ("array",
  "integer", "test") from making unrelated problems look alike.

Every pair of problems is scored at once by one sparse product of the two
word-incidence matrices (scipy), so no pair is left to a sampling step; shingle
containment is then computed exactly on the pairs the word score keeps. Short
statements are left to the other checks: a five-word MBPP sentence is "contained"
in half the benchmark.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from engine.isolation.neardup import Match, Sketch

if TYPE_CHECKING:
    from scipy import sparse

MIN_SHINGLES = 8  # a shorter statement is left to the exact hash: a five-word sentence is "contained" anywhere
MIN_EXAMPLE_SHINGLES = 4  # at 2, HumanEval/56 and /61 (the same examples once brackets are dropped) match
MIN_PAIR_EXAMPLES = 2  # example shingles each side needs to stand in for the cosine of a short pair
SHARED_EXAMPLES = 0.8  # HumanEval/55 and /60 share two of fib's three examples (`fib(10) 55`, `fib(1) 1`)
MIN_WORDS = 10  # content words both statements need for a reworded score: MBPP's one-line templates
# ("matches a string that has an a followed by three 'b'" / "by two to three 'b'") differ in one word
CANDIDATE_WORDS = 0.6  # word containment from which a pair's shingles are compared
CANDIDATE_COSINE = 0.3
ROWS_PER_BLOCK = 4096  # left-side problems per sparse product (bounds the product's memory)


@dataclass(frozen=True, kw_only=True)
class Overlap:
    """Scores of one (left, right) problem pair."""

    left: int
    right: int
    cosine: float  # cosine of the idf-weighted content-word sets (0.0 when a side has fewer than MIN_WORDS)
    shingles: float  # shingle containment (0.0 when a side has fewer than MIN_SHINGLES)
    examples: float  # example-shingle containment (0.0 when a side has fewer than MIN_PAIR_EXAMPLES)

    @property
    def reworded(self) -> float:
        """Mean of the word cosine and the shingle containment: a reworded copy keeps most of its
        distinctive words and some of its phrases; an unrelated problem on the same topic keeps
        words at best (measured in docs/data-trust.md). A short docstring has too few words for a
        cosine; the worked examples it shares stand in for them."""
        stand_in = self.examples if self.examples >= SHARED_EXAMPLES else 0.0
        return (max(self.cosine, stand_in) + self.shingles) / 2

    def scores(self) -> dict[str, float]:
        return {"word_cosine": self.cosine, "shingle_containment": self.shingles,
                "example_containment": self.examples, "reworded": self.reworded}


def _incidence(offsets: np.ndarray, columns: np.ndarray, width: int) -> sparse.csr_matrix:
    # scipy (most of a second to import) only when two sets are compared: a validation whose
    # comparisons are all cached (`engine.isolation.pair_cache`) never loads it
    from scipy import sparse

    ones = np.ones(len(columns), dtype=np.float64)
    return sparse.csr_matrix((ones, columns, offsets), shape=(len(offsets) - 1, width))


def overlaps(left: Sketch, right: Sketch) -> list[Overlap]:
    """Every pair that shares enough weighted content words to be compared, with its scores."""
    vocab, inverse = np.unique(np.concatenate([left.words, right.words]), return_inverse=True)
    split = len(left.words)
    lmat = _incidence(left.word_offsets, inverse[:split], len(vocab))
    rmat = _incidence(right.word_offsets, inverse[split:], len(vocab))
    docs = lmat.shape[0] + rmat.shape[0]
    df = np.asarray(lmat.sum(axis=0)).ravel() + np.asarray(rmat.sum(axis=0)).ravel()
    idf = np.log((docs + 1) / (df + 1))
    lsize, rsize = lmat @ idf, rmat @ idf
    lnorm, rnorm = np.sqrt(lmat @ idf**2), np.sqrt(rmat @ idf**2)
    lcount, rcount = np.diff(left.word_offsets), np.diff(right.word_offsets)
    by_idf, by_square = rmat.multiply(idf).T.tocsc(), rmat.multiply(idf**2).T.tocsc()
    found = []
    for start in range(0, lmat.shape[0], ROWS_PER_BLOCK):
        block = lmat[start : start + ROWS_PER_BLOCK]
        shared = (block @ by_idf).tocoo()
        dot = (block @ by_square).tocsr()
        rows, cols = shared.row + start, shared.col
        containment = shared.data / np.maximum(np.minimum(lsize[rows], rsize[cols]), 1e-12)
        cosine = np.asarray(dot[shared.row, cols]).ravel() / np.maximum(lnorm[rows] * rnorm[cols], 1e-12)
        cosine[np.minimum(lcount[rows], rcount[cols]) < MIN_WORDS] = 0.0
        keep = (containment >= CANDIDATE_WORDS) | (cosine >= CANDIDATE_COSINE)
        found += [Overlap(left=int(i), right=int(j), cosine=float(c), shingles=shingle_containment(left, i, right, j),
                          examples=example_containment(left, i, right, j))
                  for i, j, c in zip(rows[keep], cols[keep], cosine[keep])]
    return found


def example_overlaps(left: Sketch, right: Sketch, threshold: float) -> list[tuple[int, int, float]]:
    """(left, right, containment) of every pair whose worked examples, each side at least
    MIN_EXAMPLE_SHINGLES shingles, share `threshold` of the smaller side's."""
    vocab, inverse = np.unique(np.concatenate([left.examples, right.examples]), return_inverse=True)
    split = len(left.examples)
    lmat = _incidence(left.example_offsets, inverse[:split], len(vocab))
    rmat = _incidence(right.example_offsets, inverse[split:], len(vocab))
    shared = (lmat @ rmat.T).tocoo()
    smaller = np.minimum(np.diff(left.example_offsets)[shared.row], np.diff(right.example_offsets)[shared.col])
    containment = shared.data / np.maximum(smaller, 1)
    keep = (smaller >= MIN_EXAMPLE_SHINGLES) & (containment >= threshold)
    return [(int(i), int(j), float(c)) for i, j, c in zip(shared.row[keep], shared.col[keep], containment[keep])]


def shingle_containment(left: Sketch, i: int, right: Sketch, j: int) -> float:
    return _containment(left.shingle_set(i), right.shingle_set(j), MIN_SHINGLES)


def example_containment(left: Sketch, i: int, right: Sketch, j: int) -> float:
    return _containment(left.example_set(i), right.example_set(j), MIN_PAIR_EXAMPLES)


def _containment(a: np.ndarray, b: np.ndarray, minimum: int) -> float:
    """|a ∩ b| / min(|a|, |b|) over sorted unique hashes; 0.0 when a side has fewer than `minimum`."""
    if min(len(a), len(b)) < minimum:
        return 0.0
    return np.intersect1d(a, b, assume_unique=True).size / min(len(a), len(b))


def overlap_matches(left: Sketch, right: Sketch, *, contained: float, reworded: float) -> list[Match]:
    """Pairs where one statement holds most of the other's shingles (`contained`), failing that
    most of its worked examples (`contained` again), failing that whose `Overlap.reworded` score
    reaches `reworded`."""
    found: dict[tuple[int, int], Match] = {}
    scored = overlaps(left, right)
    for o in scored:
        if o.shingles >= contained:
            found[(o.left, o.right)] = Match(left=o.left, right=o.right, kind="contained", similarity=o.shingles,
                                             scores=o.scores())
    by_pair = {(o.left, o.right): o for o in scored}
    for i, j, share in example_overlaps(left, right, contained):
        scores = by_pair[(i, j)].scores() if (i, j) in by_pair else {"example_containment": share}
        found.setdefault((i, j), Match(left=i, right=j, kind="examples", similarity=share, scores=scores))
    for o in scored:
        if o.reworded >= reworded:
            found.setdefault((o.left, o.right), Match(left=o.left, right=o.right, kind="reworded",
                                                      similarity=o.reworded, scores=o.scores()))
    return [found[key] for key in sorted(found)]
