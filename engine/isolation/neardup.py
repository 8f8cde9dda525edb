"""Near-duplicate search between two problem sets: normalized statements, shingles, MinHash, LSH.

What is compared, and how it is normalized, is `engine.isolation.normalize`'s.

Shingles are word n-grams inside a sentence (a sentence shorter than n is one
shingle). MinHash signatures are computed with numpy over all shingle hashes of
a problem set at once (universal multiply-add hashing, 32-bit values), the
candidate search uses datasketch's `MinHashLSH`, and every candidate is verified
with the exact Jaccard similarity of the two shingle sets: the reported
similarity is exact, LSH only decides which pairs are looked at.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Literal, Optional, Sequence

import numpy as np

from engine.data.cache import cache_root
from engine.isolation.normalize import (
    NORMALIZATION_VERSION,
    content_words,
    example_chunks,
    fingerprint_parts,
    statement_chunks,
)
from engine.problem import Problem

if TYPE_CHECKING:
    from datasketch import LeanMinHash

_P = np.uint64(0x100000001B3)  # odd multiplier of the rolling shingle hash
_MASK32 = np.uint64(0xFFFFFFFF)


def _chunks_hash(chunks: list[list[str]]) -> str:
    """`statement_hash` from already normalized chunks."""
    return hashlib.sha256("\n".join(" ".join(chunk) for chunk in chunks).encode("utf-8")).hexdigest()


# ---------------------------------------------------------------- sketches
@dataclass(frozen=True, kw_only=True)
class SketchSettings:
    """What a sketch depends on (besides the problems): part of its cache key."""

    ngram: int = 3
    num_perm: int = 128
    seed: int = 1

    def key(self) -> str:
        return f"norm{NORMALIZATION_VERSION}-n{self.ngram}-p{self.num_perm}-s{self.seed}"


@dataclass(frozen=True, kw_only=True)
class Sketch:
    """Fingerprints of one problem set: ids, exact hashes, shingle sets, MinHash signatures."""

    ids: list[str]
    sources: list[str]
    exact: list[str]  # sha256 of the normalized statement
    shingles: np.ndarray  # uint64, each problem's sorted unique shingle hashes, concatenated
    offsets: np.ndarray  # int64, len(ids) + 1: problem i owns shingles[offsets[i]:offsets[i + 1]]
    signatures: np.ndarray  # uint64 (len(ids), num_perm); an empty problem holds 2**32
    words: np.ndarray  # uint64, each problem's sorted unique content-word hashes (`content_words`), concatenated
    word_offsets: np.ndarray  # int64, len(ids) + 1, like `offsets`
    examples: np.ndarray  # uint64, each problem's sorted unique shingle hashes of its worked examples, concatenated
    example_offsets: np.ndarray  # int64, len(ids) + 1, like `offsets`

    def __len__(self) -> int:
        return len(self.ids)

    def shingle_set(self, index: int) -> np.ndarray:
        return self.shingles[self.offsets[index] : self.offsets[index + 1]]

    def example_set(self, index: int) -> np.ndarray:
        return self.examples[self.example_offsets[index] : self.example_offsets[index + 1]]

    def shingle_counts(self) -> np.ndarray:
        return np.diff(self.offsets)


_MASK64 = (1 << 64) - 1


def _token_hash(token: str) -> int:
    return int.from_bytes(hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest(), "little")


def _python_rolling(hashes: list[int]) -> int:
    """`_rolling` of one short chunk as a whole, in plain ints (no numpy call per chunk)."""
    out = hashes[0]
    for h in hashes[1:]:
        out = (out * int(_P) + h) & _MASK64
    return out


def _rolling(tokens: np.ndarray, width: int) -> np.ndarray:
    """Polynomial hash of every window of `width` tokens (uint64 arithmetic wraps on purpose)."""
    count = len(tokens) - width + 1
    out = tokens[:count].copy()
    with np.errstate(over="ignore"):
        for j in range(1, width):
            out = out * _P + tokens[j : j + count]
    return out


def _shingle_hashes(chunks_per_doc: list[list[list[str]]], ngram: int) -> tuple[np.ndarray, np.ndarray]:
    """(doc index, shingle hash) of every shingle of every document, not deduplicated."""
    kept = [(doc, chunk) for doc, chunks in enumerate(chunks_per_doc) for chunk in chunks
            if not all(t.isdigit() for t in chunk)]
    vocab = {t: _token_hash(t) for t in {t for _, chunk in kept for t in chunk}}
    short = [(doc, chunk) for doc, chunk in kept if len(chunk) < ngram]
    long = [(doc, chunk) for doc, chunk in kept if len(chunk) >= ngram]
    docs = [np.array([doc for doc, _ in short], dtype=np.int64)]
    hashes = [np.array([_python_rolling([vocab[t] for t in chunk]) for _, chunk in short], dtype=np.uint64)]
    if long:
        lengths = np.array([len(chunk) for _, chunk in long], dtype=np.int64)
        tokens = np.array([vocab[t] for _, chunk in long for t in chunk], dtype=np.uint64)
        chunk_ids = np.repeat(np.arange(len(long)), lengths)
        windows = _rolling(tokens, ngram)
        inside = chunk_ids[: len(windows)] == chunk_ids[ngram - 1 :]
        docs.append(np.repeat(np.array([doc for doc, _ in long], dtype=np.int64), lengths)[: len(windows)][inside])
        hashes.append(windows[inside])
    return np.concatenate(docs), np.concatenate(hashes)


def _unique_per_doc(doc: np.ndarray, hashes: np.ndarray, n_docs: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.lexsort((hashes, doc))
    doc, hashes = doc[order], hashes[order]
    keep = np.ones(len(doc), dtype=bool)
    keep[1:] = (doc[1:] != doc[:-1]) | (hashes[1:] != hashes[:-1])
    doc, hashes = doc[keep], hashes[keep]
    offsets = np.searchsorted(doc, np.arange(n_docs + 1)).astype(np.int64)
    return hashes, offsets


def _permutations(settings: SketchSettings) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(settings.seed)
    a = rng.integers(1, 2**63, size=settings.num_perm, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    b = rng.integers(0, 2**63, size=settings.num_perm, dtype=np.uint64)
    return a, b


def minhash_signatures(shingles: np.ndarray, offsets: np.ndarray, settings: SketchSettings) -> np.ndarray:
    """MinHash of every document at once: per permutation one vectorized pass + `minimum.reduceat`."""
    n_docs = len(offsets) - 1
    signatures = np.full((n_docs, settings.num_perm), 2**32, dtype=np.uint64)
    nonempty = np.flatnonzero(offsets[1:] > offsets[:-1])
    if len(nonempty) == 0:
        return signatures
    starts = offsets[nonempty]
    a, b = _permutations(settings)
    with np.errstate(over="ignore"):
        for k in range(settings.num_perm):
            values = (shingles * a[k] + b[k]) >> np.uint64(32)
            signatures[nonempty, k] = np.minimum.reduceat(values, starts)
    return signatures


def sketch_problems(problems: Sequence[Problem], settings: SketchSettings) -> Sketch:
    parts = [fingerprint_parts(p) for p in problems]
    statements = [statement_chunks(statement) for statement, _ in parts]
    chunks_per_doc = [chunks + statement_chunks(signatures) for chunks, (_, signatures) in zip(statements, parts)]
    exact = [_chunks_hash(chunks) for chunks in statements]
    doc, hashes = _shingle_hashes(chunks_per_doc, settings.ngram)
    shingles, offsets = _unique_per_doc(doc, hashes, len(problems))
    words, word_offsets = _word_sets(chunks_per_doc)
    examples, example_offsets = _unique_per_doc(
        *_shingle_hashes([example_chunks(statement) for statement, _ in parts], settings.ngram), len(problems))
    return Sketch(
        ids=[p.id for p in problems],
        sources=[p.source for p in problems],
        exact=exact,
        shingles=shingles,
        offsets=offsets,
        signatures=minhash_signatures(shingles, offsets, settings),
        words=words,
        word_offsets=word_offsets,
        examples=examples,
        example_offsets=example_offsets,
    )


def _word_sets(chunks_per_doc: list[list[list[str]]]) -> tuple[np.ndarray, np.ndarray]:
    per_doc = [content_words(chain.from_iterable(chunks)) for chunks in chunks_per_doc]
    vocab = {w: _token_hash(w) for w in {w for words in per_doc for w in words}}
    doc = np.repeat(np.arange(len(per_doc), dtype=np.int64), [len(words) for words in per_doc])
    hashes = np.fromiter((vocab[w] for words in per_doc for w in words), dtype=np.uint64, count=len(doc))
    return _unique_per_doc(doc, hashes, len(per_doc))


# ---------------------------------------------------------------- cache
@dataclass(frozen=True, kw_only=True)
class SketchCache:
    """Sketches on disk, keyed by a dataset's content fingerprint and the sketch settings.

    The default root is the dataset cache's (`$RLVR_RUN_CACHE_DIR`, else ~/.cache/rlvr-run).
    """

    root: Path = field(default_factory=cache_root)

    def path(self, fingerprint: str, settings: SketchSettings) -> Path:
        return self.root / "leakage" / f"{fingerprint[:40]}-{settings.key()}.npz"

    def load(self, fingerprint: str, settings: SketchSettings) -> Optional[Sketch]:
        path = self.path(fingerprint, settings)
        if not path.is_file():
            return None
        try:
            with np.load(path, allow_pickle=False) as data:
                return Sketch(
                    ids=data["ids"].tolist(),
                    sources=data["sources"].tolist(),
                    exact=data["exact"].tolist(),
                    shingles=data["shingles"],
                    offsets=data["offsets"],
                    signatures=data["signatures"],
                    words=data["words"],
                    word_offsets=data["word_offsets"],
                    examples=data["examples"],
                    example_offsets=data["example_offsets"],
                )
        except (OSError, ValueError, KeyError):
            return None  # a torn or foreign file is rebuilt, never trusted

    def store(self, fingerprint: str, settings: SketchSettings, sketch: Sketch) -> None:
        path = self.path(fingerprint, settings)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as fh:
            np.savez(
                fh,
                ids=np.array(sketch.ids, dtype=str),
                sources=np.array(sketch.sources, dtype=str),
                exact=np.array(sketch.exact, dtype=str),
                shingles=sketch.shingles,
                offsets=sketch.offsets,
                signatures=sketch.signatures,
                words=sketch.words,
                word_offsets=sketch.word_offsets,
                examples=sketch.examples,
                example_offsets=sketch.example_offsets,
            )
        os.replace(tmp, path)


def cached_sketch(
    problems: Sequence[Problem], fingerprint: str, settings: SketchSettings, cache: Optional[SketchCache]
) -> tuple[Sketch, bool]:
    """The sketch of `problems` (content fingerprint `fingerprint`) and whether it came from the cache."""
    if cache is not None and (hit := cache.load(fingerprint, settings)) is not None:
        return hit, True
    sketch = sketch_problems(problems, settings)
    if cache is not None:
        cache.store(fingerprint, settings, sketch)
    return sketch, False


# ---------------------------------------------------------------- search
@dataclass(frozen=True, kw_only=True)
class Match:
    """One problem on the left side that duplicates one on the right side."""

    left: int  # index into the left sketch
    right: int  # index into the right sketch
    kind: Literal["id", "exact", "near", "contained", "examples", "reworded"]
    similarity: float  # exact Jaccard (near), shingle containment (contained, examples), `Overlap.reworded`, else 1.0
    scores: dict[str, float] = field(default_factory=dict)  # every score measured on the pair, by name


def jaccard(left: Sketch, i: int, right: Sketch, j: int) -> float:
    a, b = left.shingle_set(i), right.shingle_set(j)
    if len(a) == 0 or len(b) == 0:
        return 0.0
    common = np.intersect1d(a, b, assume_unique=True).size
    return common / (len(a) + len(b) - common)


def candidate_threshold(threshold: float) -> float:
    """LSH runs below the reporting threshold so that borderline pairs still reach exact verification."""
    return max(0.1, threshold - 0.2)


def _lean(signature: np.ndarray, seed: int) -> LeanMinHash:
    from datasketch import LeanMinHash

    # LSH only bands the values and checks that both sides declare the same scheme;
    # ours are 32-bit affine hashes like datasketch's own "affine32".
    return LeanMinHash(seed=seed, hashvalues=signature, scheme="affine32")


def _lsh_candidates(left: Sketch, right: Sketch, threshold: float, seed: int) -> Iterable[tuple[int, int]]:
    # datasketch (through scipy, most of a second to import) only when two sets are compared:
    # a validation whose comparisons are all cached (`engine.isolation.pair_cache`) never loads it
    from datasketch import MinHashLSH

    num_perm = left.signatures.shape[1]
    lsh = MinHashLSH(threshold=candidate_threshold(threshold), num_perm=num_perm, weights=(0.3, 0.7))
    for j in range(len(right)):
        if right.offsets[j + 1] > right.offsets[j]:
            lsh.insert(j, _lean(right.signatures[j], seed), check_duplication=False)
    for i in range(len(left)):
        if left.offsets[i + 1] > left.offsets[i]:
            for j in lsh.query(_lean(left.signatures[i], seed)):
                yield i, j


# Sources that number the same problems: MBPP sanitized and MBPP+ keep MBPP's task ids.
_ID_FAMILIES = {"mbpp_sanitized": "mbpp", "mbppplus": "mbpp", "humanevalplus": "humaneval"}


def id_key(source: str, problem_id: str) -> tuple[str, str]:
    """(source family, source-local id): equal keys name the same upstream problem."""
    return _ID_FAMILIES.get(source, source), problem_id.rsplit("/", 1)[-1]


def find_matches(left: Sketch, right: Sketch, *, threshold: float, seed: int = 1) -> list[Match]:
    """Every (left, right) problem pair that is the same id of one source, the same
    normalized statement, or a near-duplicate with exact Jaccard >= `threshold`.
    One match per pair, the strongest kind first (id, then exact, then near)."""
    found: dict[tuple[int, int], Match] = {}
    by_key = {id_key(s, pid): j for j, (s, pid) in enumerate(zip(right.sources, right.ids))}
    for i, (source, pid) in enumerate(zip(left.sources, left.ids)):
        if (j := by_key.get(id_key(source, pid))) is not None:
            found[(i, j)] = Match(left=i, right=j, kind="id", similarity=1.0)
    by_hash: dict[str, list[int]] = {}
    for j, digest in enumerate(right.exact):
        by_hash.setdefault(digest, []).append(j)
    for i, digest in enumerate(left.exact):
        for j in by_hash.get(digest, ()):
            found.setdefault((i, j), Match(left=i, right=j, kind="exact", similarity=1.0))
    for i, j in _lsh_candidates(left, right, threshold, seed):
        if (i, j) not in found and (sim := jaccard(left, i, right, j)) >= threshold:
            found[(i, j)] = Match(left=i, right=j, kind="near", similarity=sim, scores={"jaccard": sim})
    return sorted(found.values(), key=lambda m: (m.left, m.right))
