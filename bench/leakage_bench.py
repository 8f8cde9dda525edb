"""Rule-3 leakage check at CodeContests-train scale: ~13k training problems against ~450 evaluation problems.

The 390 real CodeContests statements of the CodeContests sample ($RLVR_RUN_DATA_MIRROR) are scaled to 13,000 by
deterministic recombination (sentences shuffled, a few words swapped, a paragraph
borrowed from another statement); the evaluation side is the real HumanEval (164)
plus MBPP test tasks 11-296 (286). 150 reworded copies of evaluation problems are
planted in the training side, so the run also reports LSH recall on known leaks.

Prints: cold (no cache) and warm (cached sketches) wall times, the numpy MinHash
against datasketch's per-set `MinHash.update_batch` measured side by side, and recall.
With the `semantic` extra installed, the same run then times rule 3 with its semantic stage
(model load, embedding both sides, candidates, confirmation by execution) cold and warm
(vectors and verdicts cached), side by side with the lexical-only figures, and the machine's
load average before and after (the cores may be shared).

    .venv/bin/python bench/leakage_bench.py [--train 13000] [--cache-dir DIR] [--no-semantic]
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
from engine.isolation.semantic import (
    SemanticUnavailable,
    VectorCache,
    load_encoder,
    problem_vectors,
    semantic_leaks,
)
from engine.judge.config import JudgeConfig
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
    parser.add_argument("--no-semantic", action="store_true", help="lexical stages only")
    args = parser.parse_args()
    print(f"load average at start: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
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
            start, cpu = time.perf_counter(), time.process_time()
            left, hit_l = cached_sketch(train, fp_train, sketch_settings(leakage), cache)
            right, hit_r = cached_sketch(evaluation, fp_eval, sketch_settings(leakage), cache)
            sketched = time.perf_counter()
            leaks = leaks_between(left, right, leakage)
            done = time.perf_counter()
            print(f"{label}: sketch {sketched - start:6.2f} s (cache hits {hit_l}/{hit_r}), "
                  f"search {done - sketched:5.2f} s, total {done - start:6.2f} s wall, "
                  f"{time.process_time() - cpu:6.2f} s CPU, {len(leaks)} leaks")
            lexical_s = done - start
            if not args.no_semantic:
                _semantic(label, train, evaluation, leakage, leaks, cache.root, lexical_s)
    found = {leak.train_id for leak in leaks if leak.train_id.startswith("planted/")}
    print(f"planted reworded copies found: {len(found)}/{len(plants)}; "
          f"other hits: {sorted({(l.train_id, l.eval_id) for l in leaks if not l.train_id.startswith('planted/')})[:5]}")

    ours, theirs = minhash_side_by_side(train[:3000], sketch_settings(leakage))
    print(f"MinHash step alone, 3000 problems: numpy {ours:.2f} s, datasketch update_batch per set {theirs:.2f} s "
          f"({theirs / ours:.0f}x)")

def _semantic(label: str, train: list[Problem], evaluation: list[Problem], leakage: LeakageSpec, lexical: list,
              root: Path, lexical_s: float) -> None:
    """Rule 3's semantic stage after the lexical one, timed per step; vectors and verdicts are
    cached under `root`, so the warm pass reads them back."""
    from engine.verify.leakage import VerdictStore, judge_confirmer  # the judge's layer: only for this stage

    start, cpu = time.perf_counter(), time.process_time()
    try:
        encoder = load_encoder()
    except SemanticUnavailable as exc:
        print(f"{label}: semantic stage not measured: {exc}")
        return
    loaded = time.perf_counter()
    cache, done = VectorCache(root=root), [0]

    def progress(n: int) -> None:
        done[0] += n
        if done[0] % 2048 < n:
            rate = done[0] / (time.perf_counter() - loaded)
            print(f"  embedded {done[0]:,} texts, {rate:.1f}/s, load {os.getloadavg()[0]:.1f}", flush=True)

    vt, hit_t = problem_vectors(train, encoder, cache, progress)
    ve, hit_e = problem_vectors(evaluation, encoder, cache, progress)
    embedded = time.perf_counter()
    confirm = judge_confirmer(JudgeConfig(workers=2), store=VerdictStore(root))
    leaks = semantic_leaks(train, evaluation, vt, ve, leakage, lexical, confirm)
    finished, cpu = time.perf_counter(), time.process_time() - cpu
    planted = {leak.train_id for leak in leaks if leak.train_id.startswith("planted/")}
    print(f"{label} with the semantic stage: model load {loaded - start:6.1f} s, embed {embedded - loaded:7.1f} s "
          f"(cache hits {hit_t}/{hit_e}), candidates + confirmation {finished - embedded:6.1f} s; "
          f"semantic total {finished - start:7.1f} s wall, {cpu:7.1f} s CPU in this process (the judge's "
          f"workers not counted), rule 3 total {lexical_s + finished - start:7.1f} s "
          f"against {lexical_s:.1f} s lexical only ({(lexical_s + finished - start) / lexical_s:.1f}x); "
          f"{sum(l.level == 'error' for l in leaks)} leaks, {sum(l.level == 'warning' for l in leaks)} warnings, "
          f"planted found {len(planted)}; load average now {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
