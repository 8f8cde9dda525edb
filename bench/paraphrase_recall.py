"""Rule 3 by meaning: recall on reworded benchmark problems, false alarms on real pairs, and
MBPP's own train/test repeats confirmed by execution.

Needs the `semantic` extra and the raw dataset files in the folder $RLVR_RUN_DATA_MIRROR names.
Every figure is the whole of rule 3 (lexical matches, then the semantic stage with
confirmation by execution in the judge), at the default `leakage:` settings.

1. Recall. `paraphrase_rows.jsonl` (240 HumanEval problems reworded into MBPP rows: synonyms,
   examples dropped, sentences reordered, all three, and 21 hand-written) is split by source
   problem into a tuning half and a held-out half (sha256 of the HumanEval id, so every
   rewording of one problem lands in one half). Plantings of this script's own: MBPP test
   problems and CodeContests problems reworded (a synonym table of its own, sentences
   reordered, examples dropped, the function renamed) and written as MBPP rows and
   CodeContests rows with the original solution. A planting counts as flagged when its pair
   with its source is a refusal or a warning.
2. False alarms: every finding on the real cross-benchmark pairs (HumanEval × MBPP,
   HumanEval × CodeContests sample, MBPP × CodeContests sample), per 10,000 pairs, each listed.
3. MBPP train (601-974) × test (11-510): every pair confirmed by execution, with its runs.

    .venv/bin/python bench/paraphrase_recall.py [--cache-dir DIR] [--out report.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import hashlib
import json
import os
import random
import re
import time
from collections import Counter, defaultdict
from pathlib import Path

from engine.data.cache import cache_root
from engine.data.convert import problem_from_codecontests_derived, problem_from_humaneval, problem_from_mbpp
from engine.isolation.content import leaks_between, sketch_settings
from engine.isolation.neardup import sketch_problems
from engine.isolation.semantic import VectorCache, load_encoder, problem_vectors, semantic_leaks
from engine.judge.config import JudgeConfig
from engine.problem import Problem
from engine.spec.model import LeakageSpec
from engine.spec.validated import Leak
from engine.verify.leakage import VerdictStore, judge_confirmer

# The raw dataset files: the folder RLVR_RUN_DATA_MIRROR names, as for the loaders.
DATA = Path(os.environ.get("RLVR_RUN_DATA_MIRROR") or "datasets")
KINDS = ("synonyms", "drop_examples", "reorder", "all_three", "human")

# This script's own rewording table (not the one paraphrase_rows.jsonl was built with).
SYNONYMS = {
    "find": "determine", "write": "create", "function": "routine", "given": "supplied", "list": "sequence",
    "string": "text", "number": "value", "numbers": "values", "check": "test", "whether": "if",
    "count": "tally", "sum": "total", "largest": "biggest", "smallest": "least", "maximum": "greatest",
    "minimum": "least", "remove": "delete", "element": "item", "elements": "items", "array": "sequence",
    "integer": "whole number", "integers": "whole numbers", "first": "initial", "last": "final",
    "return": "give back", "returns": "gives back", "calculate": "compute", "get": "obtain",
    "print": "output", "each": "every", "contains": "holds", "characters": "symbols", "character": "symbol",
    "word": "term", "words": "terms", "two": "a pair of", "same": "identical", "distinct": "different",
    "occurrence": "appearance", "occurrences": "appearances", "convert": "transform", "sort": "order",
    "sorted": "ordered", "length": "size", "positive": "greater-than-zero", "determine": "figure out",
    "multiple": "several", "position": "index", "tuple": "pair collection", "tuples": "pair collections",
    "between": "among", "product": "multiplication result", "odd": "uneven", "even": "divisible by two",
    "next": "following", "previous": "preceding", "total": "sum", "has": "possesses", "have": "possess",
    "answer": "result", "friends": "companions", "friend": "companion", "game": "match", "city": "town",
    "cities": "towns", "array's": "sequence's", "query": "request", "queries": "requests", "cost": "price",
    "minimal": "least", "maximal": "greatest", "consists": "is made up", "operation": "move",
    "operations": "moves", "possible": "feasible", "exactly": "precisely", "means": "signifies",
}
SENTENCE = re.compile(r"(?<=[.!?])\s+")
WORD = re.compile(r"[A-Za-z']+")
CONTEST_TAIL = re.compile(r"\n\s*(?:Examples?|Note)\s*\n", re.I)


def _rows(name: str) -> list[dict]:
    if not (DATA / name).is_file():
        raise SystemExit(f"{DATA / name} not found: set RLVR_RUN_DATA_MIRROR to the folder of the raw dataset files")
    opener = gzip.open if name.endswith(".gz") else open
    with opener(DATA / name, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def reword(text: str, rng: random.Random) -> str:
    """Synonyms swapped, sentences reordered; names on code lines are left alone."""
    def swap(m: re.Match[str]) -> str:
        word = m.group(0)
        new = SYNONYMS.get(word.lower())
        if new is None:
            return word
        return new.capitalize() if word[0].isupper() else new

    sentences = SENTENCE.split(WORD.sub(swap, text).strip())
    if len(sentences) > 1:
        rng.shuffle(sentences)
    return " ".join(sentences)


def mbpp_plantings(test: list[Problem], count: int) -> list[tuple[Problem, str]]:
    """MBPP test problems reworded into MBPP training rows, the function renamed."""
    rng = random.Random(20250101)
    out = []
    for p in rng.sample(test, count):
        text = reword(p.statement.replace("Write a python function to", "Write a function to"), rng)
        name = p.entry_point or "f"
        code = re.sub(rf"\b{re.escape(name)}\b", f"{name}_v2", p.solutions[0])
        row = {"text": text, "code": code, "task_id": 20000 + len(out), "test_setup_code": "", "test_list": [],
               "challenge_test_list": []}
        out.append((problem_from_mbpp(row, sanitized=False), p.id))
    return out


def contest_plantings(contests: list[Problem], count: int) -> list[tuple[Problem, str]]:
    """CodeContests statements reworded (examples and notes dropped) into CodeContests rows."""
    rng = random.Random(20250102)
    out = []
    for p in rng.sample([c for c in contests if c.solutions], count):
        story = CONTEST_TAIL.split(p.statement)[0]
        row = {"id": f"planted_{len(out)}", "name": f"planted {len(out)}", "train_index": 0, "difficulty": 7,
               "cf_tags": [], "description": reword(story, rng),
               "solutions": {"language": [3], "solution": [p.solutions[0]]},
               "tests": {"input": [], "output": []}, "source_commit": ""}
        out.append((problem_from_codecontests_derived(row), p.id))
    return out


class Rule3:
    """Rule 3 between two problem sets, as validation runs it (vectors and verdicts cached)."""

    def __init__(self, cache: Path) -> None:
        self.leakage = LeakageSpec()
        self.encoder = load_encoder()
        self.vectors = VectorCache(root=cache)
        self.confirm = judge_confirmer(JudgeConfig(workers=2), store=VerdictStore(cache))

    def __call__(self, train: list[Problem], evaluation: list[Problem]) -> list[Leak]:
        settings = sketch_settings(self.leakage)
        lexical = leaks_between(sketch_problems(train, settings), sketch_problems(evaluation, settings), self.leakage)
        vt, _ = problem_vectors(train, self.encoder, self.vectors)
        ve, _ = problem_vectors(evaluation, self.encoder, self.vectors)
        return semantic_leaks(train, evaluation, vt, ve, self.leakage, lexical, self.confirm)


def flagged(leaks: list[Leak], planted: list[tuple[Problem, str]]) -> dict[str, Leak]:
    """Planted id → its finding against its own source (the strongest level), if any."""
    source = {p.id: s for p, s in planted}
    out: dict[str, Leak] = {}
    for leak in leaks:
        if source.get(leak.train_id) == leak.eval_id:
            best = out.get(leak.train_id)
            if best is None or (best.level == "warning" and leak.level == "error"):
                out[leak.train_id] = leak
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache-dir", type=Path, default=None, help="vectors and verdicts (default: the cache folder)")
    parser.add_argument("--out", type=Path, default=None, help="also write every finding here (JSON)")
    args = parser.parse_args()
    began = time.perf_counter()
    rule3 = Rule3(args.cache_dir or cache_root())
    humaneval = [problem_from_humaneval(r) for r in _rows("humaneval.jsonl")]
    mbpp = [problem_from_mbpp(r, sanitized=False) for r in _rows("mbpp_full.jsonl")]
    contests = [problem_from_codecontests_derived(r) for r in _rows("codecontests_train_sample_derived.jsonl.gz")]
    mbpp_test = [p for p in mbpp if 11 <= int(p.id.split("/")[1]) <= 510]
    mbpp_train = [p for p in mbpp if int(p.id.split("/")[1]) >= 601]
    dump: dict[str, object] = {}

    # 1. recall
    rows = _rows("paraphrase_rows.jsonl")
    halves: dict[str, list[tuple[Problem, str, str]]] = defaultdict(list)
    for r in rows:
        half = "held-out" if hashlib.sha256(r["source"].encode()).digest()[0] % 2 else "tuning"
        halves[half].append((problem_from_mbpp(r, sanitized=False), r["source"], r["kind"]))
    print("recall: a planting is flagged when its pair with its source is refused (error) or a warning")
    print("(without solutions: the same rows with their code removed, so only the lexical stages and the "
          "semantic score at the warning level can flag them)")
    print(f"{'set':<10} {'kind':<16} {'refused':>8} {'warned':>7} {'flagged':>8} {'of':>4} {'recall':>7} "
          f"{'without solutions':>18}")
    for half in ("held-out", "tuning"):
        planted = [(p, s) for p, s, _ in halves[half]]
        kind_of = {p.id: k for p, _, k in halves[half]}
        found = flagged(rule3([p for p, _ in planted], humaneval), planted)
        bare = [(p.model_copy(update={"solutions": []}), s) for p, s in planted]
        found_bare = flagged(rule3([p for p, _ in bare], humaneval), bare)
        for kind in KINDS:
            ids = [p.id for p, _ in planted if kind_of[p.id] == kind]
            refused = sum(1 for i in ids if i in found and found[i].level == "error")
            warned = sum(1 for i in ids if i in found and found[i].level == "warning")
            alone = sum(1 for i in ids if i in found_bare)
            print(f"{half:<10} {kind:<16} {refused:>8} {warned:>7} {refused + warned:>8} {len(ids):>4} "
                  f"{100 * (refused + warned) / max(len(ids), 1):>6.1f}% {100 * alone / max(len(ids), 1):>17.1f}%")
        missed = [(p.id, s, kind_of[p.id]) for p, s in planted if p.id not in found]
        print(f"{half:<10} missed: {missed}")
        dump[f"recall {half}"] = {k: dataclass_dict(v) for k, v in found.items()}
    for label, planted, evaluation in (
        ("MBPP rows", mbpp_plantings(mbpp_test, 100), mbpp_test),
        ("CodeContests rows", contest_plantings(contests, 60), contests),
    ):
        found = flagged(rule3([p for p, _ in planted] + mbpp_train, evaluation), planted)
        refused = sum(1 for leak in found.values() if leak.level == "error")
        print(f"own plantings, {label}: refused {refused}, warned {len(found) - refused}, of {len(planted)} "
              f"({100 * len(found) / len(planted):.1f}%); kinds {dict(Counter(l.kind for l in found.values()))}")
        print(f"  missed: {[s for p, s in planted if p.id not in found][:20]}")

    # 2. false alarms on real cross-benchmark pairs
    total_pairs, findings = 0, []
    for train_name, train, eval_name, evaluation in (("MBPP", mbpp, "HumanEval", humaneval),
                                                     ("CodeContests", contests, "HumanEval", humaneval),
                                                     ("CodeContests", contests, "MBPP", mbpp)):
        leaks = rule3(train, evaluation)
        total_pairs += len(train) * len(evaluation)
        findings += [(f"{train_name}×{eval_name}", leak) for leak in leaks]
        print(f"real pairs {train_name} × {eval_name}: {len(train) * len(evaluation):,} pairs, "
              f"{sum(l.level == 'error' for l in leaks)} refused, {sum(l.level == 'warning' for l in leaks)} warnings")
    refused = [f for f in findings if f[1].level == "error"]
    warned = [f for f in findings if f[1].level == "warning"]
    print(f"real cross-benchmark pairs: {total_pairs:,}; refused {len(refused)} "
          f"({1e4 * len(refused) / total_pairs:.2f} per 10,000), warnings {len(warned)} "
          f"({1e4 * len(warned) / total_pairs:.2f} per 10,000)")
    for label, leak in refused + warned:
        print(f"  {label} {leak.level:<7} {leak.kind:<9} {leak.train_id} ≈ {leak.eval_id} {_scores(leak)} "
              f"{leak.confirmation.describe() if leak.confirmation else ''}")
    dump["real pairs"] = [(label, dataclass_dict(leak)) for label, leak in findings]

    # 3. MBPP train × test
    leaks = rule3(mbpp_train, mbpp_test)
    lexical = [leak for leak in leaks if leak.kind not in ("semantic", "confirmed")]
    confirmed = [leak for leak in leaks if leak.kind == "confirmed"]
    print(f"MBPP train × test ({len(mbpp_train) * len(mbpp_test):,} pairs): {len(lexical)} lexical leaks, "
          f"{len(confirmed)} more confirmed by execution, "
          f"{sum(l.level == 'warning' for l in leaks)} warnings (siblings not confirmed)")
    for leak in lexical + confirmed:
        print(f"  {leak.kind:<9} {leak.train_id} ≈ {leak.eval_id} {_scores(leak)} "
              f"{leak.confirmation.describe() if leak.confirmation else ''}")
    dump["mbpp train x test"] = [dataclass_dict(leak) for leak in leaks]
    print(f"total {time.perf_counter() - began:.0f} s")
    if args.out:
        args.out.write_text(json.dumps(dump, indent=1, default=str))


def _scores(leak: Leak) -> str:
    return "(" + ", ".join(f"{k} {v:.2f}" for k, v in leak.scores.items()) + ")"


def dataclass_dict(leak: Leak) -> dict:
    return dataclasses.asdict(leak)


if __name__ == "__main__":
    main()
