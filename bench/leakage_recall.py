"""Rule 3 recall on planted copies, and false positives on the real benchmark pairs.

Planted training problems are built from the raw HumanEval, MBPP and CodeContests
files ($RLVR_RUN_DATA_MIRROR), one planting kind at a time, each written as a raw row of a loader format
(taken in turn: humaneval, mbpp, mbpp_sanitized, codecontests_derived, codecontests,
problem, function, stdio) and read back through that format's converter:

- verbatim: a HumanEval docstring alone; an MBPP test-range statement; a CodeContests statement
- helpers: the whole HumanEval prompt (imports, helper functions and bodies, signature, docstring)
- synonyms / no_examples / reordered / reworded: a HumanEval docstring with common words
  swapped for synonyms / its examples dropped / its sentences reversed / all three
- renamed: a CodeContests statement with its characters renamed and every number changed

The training side is the plantings plus MBPP's train range (601-974) as background; the
evaluation sides are HumanEval, MBPP's test range (11-510) and the CodeContests sample.
A planting counts as found when a leak pairs it with its original.

False positives: every leak between the real files across sources (HumanEval, MBPP,
MBPP sanitized, CodeContests) and, inside MBPP, train range × test range beyond the
repeats inspected in tests/isolation/test_content.py (same tasks, true positives).

    .venv/bin/python bench/leakage_recall.py [--show-missed]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Callable

from engine.data.convert import (
    problem_from_codecontests_derived,
    problem_from_humaneval,
    problem_from_mbpp,
)
from engine.data.sources.formats import FORMATS, ConvertContext
from engine.isolation.content import Leak, leaks_between, sketch_settings
from engine.isolation.neardup import sketch_problems
from engine.isolation.normalize import entry_statement
from engine.problem import Problem
from engine.spec.model import LeakageSpec

# The raw dataset files (humaneval.jsonl, mbpp_full.jsonl, mbpp_sanitized.jsonl, the CodeContests
# sample): the folder RLVR_RUN_DATA_MIRROR names, as for the loaders.
DATA = Path(os.environ.get("RLVR_RUN_DATA_MIRROR") or "datasets")
KNOWN_MBPP_REPEATS = {("mbpp/602", "mbpp/217"), ("mbpp/704", "mbpp/248"), ("mbpp/872", "mbpp/216"),
                      ("mbpp/658", "mbpp/362"), ("mbpp/673", "mbpp/439"), ("mbpp/928", "mbpp/427"),
                      ("mbpp/653", "mbpp/174"), ("mbpp/649", "mbpp/170"), ("mbpp/632", "mbpp/505")}

SYNONYMS = {
    "return": "give back", "returns": "gives back", "given": "provided", "list": "sequence", "lists": "sequences",
    "string": "text", "strings": "texts", "number": "value", "numbers": "values", "find": "determine",
    "check": "verify", "whether": "if", "each": "every", "contains": "includes", "first": "initial",
    "largest": "biggest", "smallest": "tiniest", "maximum": "highest", "minimum": "lowest", "write": "implement",
    "function": "routine", "integer": "whole number", "integers": "whole numbers", "element": "item",
    "elements": "items", "count": "tally", "create": "build", "sum": "total", "input": "argument",
    "array": "vector", "you": "one", "print": "output", "output": "print", "task": "job", "word": "token",
    "words": "tokens", "character": "symbol", "characters": "symbols", "positive": "non-negative",
    "sorted": "ordered", "order": "sequence", "length": "size", "empty": "blank", "value": "quantity",
}
NAMES = {"Vasya": "Kolya", "Petya": "Misha", "Alice": "Carol", "Bob": "Dave", "Monocarp": "Bercarp",
         "Polycarp": "Tanyacarp", "Masha": "Olya", "Sasha": "Zhenya", "Vova": "Gleb", "Anton": "Boris",
         "Alex": "Sam", "Limak": "Rex", "Dima": "Yura", "Nastya": "Lena", "Ivan": "Oleg", "Igor": "Artem"}
EXAMPLES = re.compile(r"^\s*(>>>|for example|example|examples|e\.g\.|input:|note:)", re.I | re.M)
FORMAT_ORDER = ["humaneval", "mbpp", "mbpp_sanitized", "codecontests_derived", "codecontests", "problem",
                "function", "stdio"]


def _rows(name: str) -> list[dict]:
    if not (DATA / name).is_file():
        raise SystemExit(f"{DATA / name} not found: set RLVR_RUN_DATA_MIRROR to the folder of the raw dataset files")
    opener = gzip.open if name.endswith(".gz") else open
    with opener(DATA / name, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


# ---------------------------------------------------------------- rewording
def synonyms(text: str) -> str:
    def swap(match: re.Match[str]) -> str:
        word = match.group(0)
        new = SYNONYMS.get(word.lower())
        return word if new is None else (new.capitalize() if word[0].isupper() else new)

    return "\n".join(line if ">>>" in line else re.sub(r"[A-Za-z]+", swap, line) for line in text.split("\n"))


def no_examples(text: str) -> str:
    cut = EXAMPLES.search(text)
    return text[: cut.start()].rstrip() if cut and cut.start() > 0 else text


def reordered(text: str) -> str:
    paragraphs = [p for p in text.split("\n\n") if p.strip()]
    out = []
    for para in paragraphs:
        if ">>>" in para:
            out.append(para)
            continue
        sentences = re.split(r"(?<=[.!?])\s+", " ".join(para.split()))
        out.append(" ".join(reversed(sentences)))
    if len(out) > 2:
        out[0], out[1] = out[1], out[0]
    return "\n\n".join(out)


def renamed(text: str) -> str:
    for old, new in NAMES.items():
        text = re.sub(rf"\b{old}\b", new, text)
    return re.sub(r"\d+", lambda m: str(int(m.group(0)) * 3 + 1), text)


def docstring(problem: Problem) -> str:
    entry = entry_statement(problem)
    assert entry is not None, problem.id
    return entry[1]


KINDS: dict[str, tuple[str, Callable[[Problem], str]]] = {  # kind → (evaluation set, training text)
    "verbatim docstring": ("humaneval", docstring),
    "verbatim statement": ("mbpp_test", lambda p: p.statement),
    "verbatim contest": ("codecontests", lambda p: p.statement),
    "helpers": ("humaneval", lambda p: p.prompt),
    "synonyms": ("humaneval", lambda p: synonyms(docstring(p))),
    "no_examples": ("humaneval", lambda p: no_examples(docstring(p))),
    "reordered": ("humaneval", lambda p: reordered(docstring(p))),
    "reworded": ("humaneval", lambda p: reordered(synonyms(no_examples(docstring(p))))),
    "renamed": ("codecontests", lambda p: renamed(p.statement)),
}


# ---------------------------------------------------------------- rows of every format
def as_row(fmt: str, key: str, number: int, text: str, kind: str) -> dict:
    """A raw row of `fmt` whose statement is `text` (its own ids: no id match with an original)."""
    body = "    pass\n"
    code = text if "def " in text else f'def solve(x):\n    """{text}"""\n'
    if fmt == "humaneval":
        return {"task_id": key, "prompt": code, "entry_point": "solve", "canonical_solution": body,
                "test": "def check(candidate):\n    assert candidate(1) is None\n"}
    if fmt in ("mbpp", "mbpp_sanitized"):
        return {"task_id": 100_000 + number, ("text" if fmt == "mbpp" else "prompt"): text,
                "code": "def solve(x):\n" + body, "test_list": ["assert solve(1) is None"]}
    if fmt == "codecontests_derived":
        return {"id": key, "name": key, "description": text, "tests": {"input": ["1\n"], "output": ["1\n"]},
                "solutions": {"language": [3], "solution": ["print(1)"]}}
    if fmt == "codecontests":
        return {"name": key, "description": text}
    if fmt == "problem":
        return {"id": key, "kind": kind, "statement": text, "entry_point": "solve" if kind == "function" else None}
    if fmt == "function":
        return {"id": key, "statement": text, "entry_point": "solve", "asserts": "assert solve(1) is None"}
    return {"id": key, "statement": text, "tests": [{"input": "1", "output": "1"}]}


def plantings(evaluation: dict[str, list[Problem]]) -> tuple[list[Problem], dict[str, tuple[str, str, str]]]:
    """Planted training problems and, by planted id, (kind, evaluation set, original id)."""
    planted, truth = [], {}
    for kind, (target, make) in KINDS.items():
        for problem in evaluation[target]:
            fmt = FORMAT_ORDER[len(planted) % len(FORMAT_ORDER)]
            key = f"planted-{len(planted)}"
            row = as_row(fmt, key, len(planted), make(problem), "stdio" if problem.kind == "stdio" else "function")
            converted = FORMATS[fmt].convert(row, ConvertContext(split="train"))
            planted.append(converted)
            truth[converted.id] = (kind, target, problem.id)
    return planted, truth


# ---------------------------------------------------------------- measures
def real_sets() -> dict[str, list[Problem]]:
    mbpp = [problem_from_mbpp(r, sanitized=False) for r in _rows("mbpp_full.jsonl")]
    return {
        "humaneval": [problem_from_humaneval(r) for r in _rows("humaneval.jsonl")],
        "mbpp": mbpp,
        "mbpp_test": [p for p in mbpp if 11 <= int(p.id.split("/")[1]) <= 510],
        "mbpp_train": [p for p in mbpp if int(p.id.split("/")[1]) >= 601],
        "mbpp_sanitized": [problem_from_mbpp(r, sanitized=True) for r in _rows("mbpp_sanitized.jsonl")],
        "codecontests": [problem_from_codecontests_derived(r) for r in _rows("codecontests_train_sample_derived.jsonl.gz")],
    }


def leaks(train: list[Problem], evaluation: list[Problem], leakage: LeakageSpec) -> list[Leak]:
    settings = sketch_settings(leakage)
    return leaks_between(sketch_problems(train, settings), sketch_problems(evaluation, settings), leakage)


def recall(real: dict[str, list[Problem]], leakage: LeakageSpec, show_missed: bool) -> None:
    planted, truth = plantings(real)
    train = planted + real["mbpp_train"]
    found: set[str] = set()
    wrong: list[Leak] = []
    for target in ("humaneval", "mbpp_test", "codecontests"):
        for leak in leaks(train, real[target], leakage):
            expected = truth.get(leak.train_id)
            if expected is not None and expected[1:] == (target, leak.eval_id):
                found.add(leak.train_id)
            elif expected is not None and expected[1] == target:
                wrong.append(leak)
    per_kind: dict[str, list[str]] = defaultdict(list)
    for pid, (kind, _, _) in truth.items():
        per_kind[kind].append(pid)
    print(f"{'planting kind':22} {'found':>7} {'of':>5} {'recall':>7}")
    for kind, ids in per_kind.items():
        hits = sum(pid in found for pid in ids)
        print(f"{kind:22} {hits:7} {len(ids):5} {hits / len(ids):7.1%}")
        if show_missed:
            print("   missed:", ", ".join(truth[pid][2] for pid in ids if pid not in found)[:600])
    formats = Counter(p.source for p in planted)
    print(f"planted rows by converter source: {dict(formats)}; leaks to another problem of the same set: "
          f"{len(wrong)}")


def false_positives(real: dict[str, list[Problem]], leakage: LeakageSpec) -> int:
    pairs = [("codecontests", "humaneval"), ("codecontests", "mbpp"), ("mbpp", "humaneval"),
             ("mbpp_sanitized", "humaneval"), ("codecontests", "mbpp_sanitized"), ("humaneval", "mbpp")]
    total = 0
    for train, evaluation in pairs:
        found = leaks(real[train], real[evaluation], leakage)
        total += len(found)
        print(f"{train} × {evaluation}: {len(found)} leaks " + "; ".join(
            f"{x.train_id}≈{x.eval_id} ({x.kind} {x.similarity:.2f})" for x in found[:8]))
    inside = leaks(real["mbpp_train"], real["mbpp_test"], leakage)
    new = [x for x in inside if (x.train_id, x.eval_id) not in KNOWN_MBPP_REPEATS]
    known = len(inside) - len(new)
    print(f"mbpp train × mbpp test: {known} of {len(KNOWN_MBPP_REPEATS)} known repeats found, {len(new)} others: "
          + "; ".join(f"{x.train_id}≈{x.eval_id} ({x.kind} {x.similarity:.2f})" for x in new))
    return total + len(new)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--show-missed", action="store_true", help="list the originals of missed plantings")
    args = parser.parse_args()
    leakage = LeakageSpec()
    start = time.perf_counter()
    real = real_sets()
    recall(real, leakage, args.show_missed)
    print(f"false positives on the real pairs: {false_positives(real, leakage)} "
          f"(settings {leakage.model_dump()}; {time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
