"""Rule-3 leakage check at CodeContests-train scale: ~13k training problems against ~450 evaluation problems.

The 390 real CodeContests statements of the CodeContests sample ($RLVR_RUN_DATA_MIRROR) are scaled to 13,000 by
deterministic recombination (sentences shuffled, a few words swapped, a paragraph
borrowed from another statement); the evaluation side is the real HumanEval (164)
plus MBPP test tasks 11-296 (286). 150 reworded copies of evaluation problems are
planted in the training side, so the run also reports LSH recall on known leaks.

Prints: cold (no cache) and warm (cached sketches) wall times, the numpy MinHash
against datasketch's per-set `MinHash.update_batch` measured side by side, and recall.

    .venv/bin/python bench/leakage_bench.py [--train 13000] [--cache-dir DIR]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import re
import tempfile
import time
from pathlib import Path

from datasketch import MinHash

from engine.data.convert import (
    problem_from_codecontests_derived,
    problem_from_humaneval,
    problem_from_mbpp,
)
from engine.data.fingerprint import problems_fingerprint
from engine.isolation.content import leaks_between, sketch_settings
from engine.isolation.neardup import (
    SketchCache,
    SketchSettings,
    _shingle_hashes,
    _unique_per_doc,
    cached_sketch,
    minhash_signatures,
)
from engine.isolation.normalize import fingerprint_text, statement_chunks
from engine.problem import Problem
from engine.spec.model import LeakageSpec

# The raw dataset files (humaneval.jsonl, mbpp_full.jsonl, mbpp_sanitized.jsonl, the CodeContests
# sample): the folder RLVR_RUN_DATA_MIRROR names, as for the loaders.
DATA = Path(os.environ.get("RLVR_RUN_DATA_MIRROR") or "datasets")
SENTENCE = re.compile(r"(?<=[.!?])\s+")


def _rows(name: str) -> list[dict]:
    if not (DATA / name).is_file():
        raise SystemExit(f"{DATA / name} not found: set RLVR_RUN_DATA_MIRROR to the folder of the raw dataset files")
    opener = gzip.open if name.endswith(".gz") else open
    with opener(DATA / name, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def synthetic_train(base: list[Problem], size: int) -> list[Problem]:
    """`size` statements recombined deterministically from the real ones."""
    out = []
    for i in range(size):
        rng = random.Random(i)
        own, other = base[i % len(base)], base[(i * 7 + 3) % len(base)]
        sentences = SENTENCE.split(own.statement)
        rng.shuffle(sentences)
        words = other.statement.split()
        for _ in range(5):
            k = rng.randrange(len(sentences))
            sentences[k] = f"{sentences[k]} {rng.choice(words)}"
        borrowed = rng.choice(other.statement.split("\n\n"))
        text = " ".join(sentences) + "\n\n" + borrowed
        out.append(own.model_copy(update={"id": f"synthetic/{i}", "statement": text}))
    return out


def planted(evaluation: list[Problem], count: int) -> list[Problem]:
    out = []
    for i, problem in enumerate(evaluation[:: max(1, len(evaluation) // count)][:count]):
        text = problem.statement.replace(" the ", " the  ", 1).replace("Return", "Output", 1)
        out.append(problem.model_copy(update={"id": f"planted/{i}", "source": "local", "statement": text,
                                              "prompt": text if problem.prompt else ""}))
    return out


def minhash_side_by_side(problems: list[Problem], settings: SketchSettings) -> tuple[float, float]:
    """Seconds for the MinHash step alone over the same shingle sets: numpy (all sets at once)
    against datasketch's `MinHash.update_batch`, one set at a time."""
    chunks = [statement_chunks(fingerprint_text(p)) for p in problems]
    shingles, offsets = _unique_per_doc(*_shingle_hashes(chunks, settings.ngram), len(problems))
    start = time.perf_counter()
    minhash_signatures(shingles, offsets, settings)
    ours = time.perf_counter() - start
    start = time.perf_counter()
    for i in range(len(problems)):
        m = MinHash(num_perm=settings.num_perm)
        m.update_batch([h.tobytes() for h in shingles[offsets[i] : offsets[i + 1]]])
    return ours, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=int, default=13_000)
    parser.add_argument("--cache-dir", type=Path, default=None, help="default: a fresh temporary folder")
    args = parser.parse_args()
    leakage = LeakageSpec()
    codecontests = [problem_from_codecontests_derived(r) for r in _rows("codecontests_train_sample_derived.jsonl.gz")]
    evaluation = [problem_from_humaneval(r) for r in _rows("humaneval.jsonl")]
    evaluation += [p for p in (problem_from_mbpp(r, sanitized=False) for r in _rows("mbpp_full.jsonl"))
                   if 11 <= int(p.id.split("/")[1]) <= 296]
    plants = planted(evaluation, 150)
    train = synthetic_train(codecontests, args.train - len(plants)) + plants
    print(f"training side {len(train)} problems, evaluation side {len(evaluation)} problems, "
          f"leakage settings {leakage.model_dump()}")

    with tempfile.TemporaryDirectory() as tmp:
        cache = SketchCache(root=args.cache_dir or Path(tmp))
        fp_train, fp_eval = problems_fingerprint(train), problems_fingerprint(evaluation)
        for label in ("cold", "warm"):
            start = time.perf_counter()
            left, hit_l = cached_sketch(train, fp_train, sketch_settings(leakage), cache)
            right, hit_r = cached_sketch(evaluation, fp_eval, sketch_settings(leakage), cache)
            sketched = time.perf_counter()
            leaks = leaks_between(left, right, leakage)
            done = time.perf_counter()
            print(f"{label}: sketch {sketched - start:6.2f} s (cache hits {hit_l}/{hit_r}), "
                  f"search {done - sketched:5.2f} s, total {done - start:6.2f} s, {len(leaks)} leaks")
    found = {leak.train_id for leak in leaks if leak.train_id.startswith("planted/")}
    print(f"planted reworded copies found: {len(found)}/{len(plants)}; "
          f"other hits: {sorted({(l.train_id, l.eval_id) for l in leaks if not l.train_id.startswith('planted/')})[:5]}")

    ours, theirs = minhash_side_by_side(train[:3000], sketch_settings(leakage))
    print(f"MinHash step alone, 3000 problems: numpy {ours:.2f} s, datasketch update_batch per set {theirs:.2f} s "
          f"({theirs / ours:.0f}x)")

if __name__ == "__main__":
    main()
