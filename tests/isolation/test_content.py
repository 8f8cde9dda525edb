"""Isolation rule 3 on real data: planted duplicates are all caught, the real sets raise no false alarm."""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from pathlib import Path

import pytest

from engine.data.convert import (
    problem_from_codecontests_derived,
    problem_from_humaneval,
    problem_from_mbpp,
)
from engine.errors import SpecError
from engine.isolation.content import check_leakage, dataset_sides, leaks_between
from engine.isolation.neardup import SketchCache, SketchSettings, sketch_problems
from engine.isolation.normalize import normalized_statement
from engine.isolation.validate import validate_spec
from engine.problem import Problem
from engine.spec.model import LeakageSpec

DEFAULT = LeakageSpec()


# ---------------------------------------------------------------- real problems
@pytest.fixture(scope="module")
def real(datasets_dir: Path) -> dict[str, list[Problem]]:
    def rows(name: str) -> list[dict]:
        opener = gzip.open if name.endswith(".gz") else open
        with opener(datasets_dir / name, "rt", encoding="utf-8") as fh:
            return [json.loads(line) for line in fh]

    return {
        "humaneval": [problem_from_humaneval(r) for r in rows("humaneval.jsonl")],
        "mbpp": [problem_from_mbpp(r, sanitized=False) for r in rows("mbpp_full.jsonl")],
        "mbpp_sanitized": [problem_from_mbpp(r, sanitized=True) for r in rows("mbpp_sanitized.jsonl")],
        "codecontests": [
            problem_from_codecontests_derived(r) for r in rows("codecontests_train_sample_derived.jsonl.gz")
        ],
    }


def _pairs(train: list[Problem], evaluation: list[Problem], leakage: LeakageSpec = DEFAULT) -> set[tuple[str, str, str]]:
    settings = SketchSettings(ngram=leakage.ngram, num_perm=leakage.num_perm)
    left, right = sketch_problems(train, settings), sketch_problems(evaluation, settings)
    return {(leak.train_id, leak.eval_id, leak.kind) for leak in leaks_between(left, right, leakage)}


# ---------------------------------------------------------------- perturbations
_SYNONYMS = {"find": "compute", "given": "provided", "return": "output", "list": "sequence", "string": "text",
             "print": "output", "each": "every", "minimum": "smallest", "maximum": "largest", "number": "value",
             "contains": "holds", "first": "initial", "integer": "whole number", "determine": "work out"}
_CODE = re.compile(r"^\s*(def |>>>)")


def _reword(text: str, count: int) -> str:
    """Replace the first `count` words that have a synonym (prose lines only)."""
    done = 0
    out = []
    for line in text.split("\n"):
        if not _CODE.match(line):
            def swap(m: re.Match[str]) -> str:
                nonlocal done
                if done < count and m.group(0).lower() in _SYNONYMS:
                    done += 1
                    return _SYNONYMS[m.group(0).lower()]
                return m.group(0)

            line = re.sub(r"\b[A-Za-z]+\b", swap, line)
        out.append(line)
    assert done == count, f"only {done} of {count} words could be reworded"
    return "\n".join(out)


def _reorder(text: str) -> str:
    """Reverse the sentences of every prose paragraph and the order of the first two paragraphs."""
    paragraphs = text.split("\n\n")
    for i, para in enumerate(paragraphs):
        if not any(_CODE.match(line) for line in para.split("\n")):
            sentences = re.split(r"(?<=[.!?])\s+", para.strip())
            paragraphs[i] = " ".join(reversed(sentences))
    if len(paragraphs) > 3 and not any(_CODE.match(line) for p in paragraphs[:2] for line in p.split("\n")):
        paragraphs[0], paragraphs[1] = paragraphs[1], paragraphs[0]
    return "\n\n".join(paragraphs)


def _restyle(text: str) -> str:
    """Whitespace and case: double spaces, re-wrapped prose, prose lines upper-cased."""
    out = []
    for line in text.split("\n"):
        if _CODE.match(line):
            out.append(line)
        else:
            out.append(line.replace(" ", "  ").replace(". ", ".\n   ").upper())
    return "\n".join(out) + "\n\n"


def _rename(problem: Problem) -> str:
    """Rename the function and its parameters on code lines; rename $$$n$$$-style variables."""
    text = problem.statement
    if problem.kind == "stdio":
        return re.sub(r"\$\$\$(\w)\$\$\$", lambda m: f"$$${'q' if m.group(1) != 'q' else 'w'}$$$", text)
    sig = next(line for line in text.split("\n") if line.lstrip().startswith("def "))
    names = [problem.entry_point, *re.findall(r"[(,]\s*(\w+)\s*:", sig)]
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b")
    return "\n".join(pattern.sub(r"renamed_\1", line) if _CODE.match(line) else line for line in text.split("\n"))


def _plant(problem: Problem, how: str, text: str) -> Problem:
    return problem.model_copy(update={"id": f"planted/{how}/{problem.id}", "source": "local", "split": "train",
                                      "statement": text, "prompt": text if problem.prompt else ""})


PERTURBATIONS = {
    "copy": lambda p: p.statement,
    "restyle": lambda p: _restyle(p.statement),
    "reorder": lambda p: _reorder(p.statement),
    "rename": _rename,
    "reword": lambda p: _reword(p.statement, 1 if p.kind == "function" else 3),
    "all": lambda p: _restyle(_reword(_reorder(_rename(p)), 1 if p.kind == "function" else 3)),
}


def _planted(real: dict[str, list[Problem]]) -> tuple[list[Problem], list[Problem], set[tuple[str, str]]]:
    """A training set of real CodeContests problems with planted copies of evaluation problems."""
    humaneval = [p for p in real["humaneval"] if len(p.statement.split()) >= 40][::9]
    # the sample holds Div. 1 / Div. 2 twins (one statement, two contest ids): keep them out of the
    # evaluation side so that each planted copy has exactly one original
    codecontests = real["codecontests"]  # the test sample (114) or the whole file (390)
    statements = Counter(normalized_statement(p) for p in codecontests)
    later = codecontests[len(codecontests) * 3 // 4:]
    codecontests_eval = [p for p in later if statements[normalized_statement(p)] == 1][:12]
    mbpp_eval = [p for p in real["mbpp"] if 11 <= int(p.id.split("/")[1]) <= 40]
    evaluation = humaneval + codecontests_eval + mbpp_eval
    train = list(codecontests[:len(codecontests) // 2])
    expected = set()
    for i, problem in enumerate(humaneval + codecontests_eval):
        how = list(PERTURBATIONS)[i % len(PERTURBATIONS)]
        train.append(_plant(problem, how, PERTURBATIONS[how](problem)))
        expected.add((train[-1].id, problem.id))
    for problem in mbpp_eval[:6]:  # one-line statements: case, spacing and the boilerplate opening
        text = problem.statement.upper().replace(" ", "  ").replace("WRITE A FUNCTION", "Write a python function")
        train.append(_plant(problem, "restyle", text))
        expected.add((train[-1].id, problem.id))
    sanitized = next(p for p in real["mbpp_sanitized"] if p.id == "mbpp_sanitized/12")
    train.append(sanitized)  # the same MBPP task under the sanitized source: an id match
    expected.add((sanitized.id, "mbpp/12"))
    return train, evaluation, expected


def test_every_planted_duplicate_is_caught_with_its_ids(real):
    train, evaluation, expected = _planted(real)
    assert len(expected) >= 30
    found = _pairs(train, evaluation)
    assert {(t, e) for t, e, _ in found} == expected
    kinds = {t: k for t, _, k in found}
    assert kinds["mbpp_sanitized/12"] == "id"
    # upper-casing HumanEval/10's helper body leaves a text that no longer parses: the helper
    # stays in the copy's fingerprint and the copy is found as near, not exact
    assert kinds.pop("planted/restyle/HumanEval/10") == "near"
    # upper-casing a CodeContests statement also upper-cases its examples when they are words
    # (633_C's are): the examples are data, so that copy is near, never missed
    examples_in_words = {"planted/restyle/codecontests/633_c_spy_syndrome_2_3594"}
    same = {t: k for t, k in kinds.items()
            if t.split("/")[1:2] in (["copy"], ["rename"], ["restyle"]) and t not in examples_in_words}
    assert len(same) >= 15 and set(same.values()) == {"exact"}
    assert {kinds[t] for t in examples_in_words if t in kinds} <= {"near"}


def test_normalization_reads_latex_unicode_and_boilerplate_alike():
    def stdio(text: str) -> Problem:
        return Problem(id="x", source="t", split="t", kind="stdio", statement=text)

    assert normalized_statement(stdio("Given $$$n$$$ ($$$1 \\le n \\leq 10^5$$$).")) == normalized_statement(
        stdio("given  M (1 ≤ M ≤ 10^5)")
    )
    assert normalized_statement(stdio("Write a python function to find the volume of a cone.")) == "find the volume of ident cone"


def test_declared_names_are_masked_on_code_lines_only():
    def function(name: str) -> Problem:
        prompt = f"def {name}(arr):\n    \"\"\"Find the {name} of arr.\n    >>> {name}([1])\n    1\n    \"\"\"\n"
        return Problem(id=name, source="t", split="t", kind="function", statement=prompt, prompt=prompt,
                       entry_point=name)

    # an entry point named `maximum` vs `minimum`: the code lines agree, the prose still tells them apart
    assert normalized_statement(function("maximum")) != normalized_statement(function("minimum"))
    assert normalized_statement(function("maximum")).count("ident") == normalized_statement(function("minimum")).count("ident")


# ---------------------------------------------------------------- the real datasets against each other
# Every hit among the real dataset files at the default settings, inspected:
# MBPP repeats some of its own tasks between its google-research train (601-974) and
# test (11-510) ranges, word for word or with a technique suffix ("by using regex",
# "using collections module") or "python function" for "function": all true leaks of
# the same task. (Across the other ranges MBPP holds more such repeats, and one false
# alarm: mbpp/551 vs mbpp/353, "extract" vs "remove a specified column from a given
# nested list", one verb apart at 0.75, both outside these two ranges.)
MBPP_TRAIN_VS_TEST = {
    ("mbpp/602", "mbpp/217", "exact"),  # first repeated character in a given string
    ("mbpp/704", "mbpp/248", "exact"),  # harmonic sum of n-1
    ("mbpp/872", "mbpp/216", "exact"),  # nested list is a subset of another nested list
    ("mbpp/658", "mbpp/362", "exact"),  # item with maximum occurrences ("python function" vs "function")
    ("mbpp/673", "mbpp/439", "exact"),  # list of multiple integers into a single integer
    ("mbpp/928", "mbpp/427", "near"),  # date yyyy-mm-dd to dd-mm-yyyy (+ "by using regex")
    ("mbpp/653", "mbpp/174", "near"),  # group key-value pairs into a dictionary of lists (+ "using collections module")
    ("mbpp/649", "mbpp/170", "near"),  # sum of the numbers in a list between the indices of a range
    ("mbpp/632", "mbpp/505", "near"),  # move all zeroes to the end (array vs list)
}


def test_real_benchmarks_do_not_collide_across_sources(real):
    """HumanEval, MBPP (both forms) and the CodeContests sample share no problem at all."""
    for train, evaluation in [("codecontests", "humaneval"), ("codecontests", "mbpp"), ("mbpp", "humaneval"),
                              ("mbpp_sanitized", "humaneval"), ("codecontests", "mbpp_sanitized")]:
        assert _pairs(real[train], real[evaluation]) == set(), (train, evaluation)


def test_mbpp_train_range_against_its_test_range_finds_the_inspected_repeats(real):
    def in_range(low: int, high: int) -> list[Problem]:
        return [p for p in real["mbpp"] if low <= int(p.id.split("/")[1]) <= high]

    assert _pairs(in_range(601, 974), in_range(11, 510)) == MBPP_TRAIN_VS_TEST


# ---------------------------------------------------------------- through a spec
SPEC = """\
name: leak-check
base_model: qwen2.5-coder-0.5b-instruct
datasets:
  mix_train: {{source: local_jsonl, path: train.jsonl, fields: {{format: problem}}, role: train}}
  he_test:   {{source: local_jsonl, path: {humaneval}, fields: {{format: humaneval}}, ids: he_ids.txt, role: test, test_only: true}}
  mbpp_reg:  {{source: local_jsonl, path: mbpp.jsonl, fields: {{format: problem}}, ids: mbpp_ids.txt, role: regression}}
protocols:
  greedy: {{preset: greedy}}
phases:
  base: {{kind: eval}}
  sft:  {{kind: sft, from: base, trainer: trl, train: mix_train}}
seeds: [1]
evaluate:
  every_phase: {{datasets: [mbpp_reg], protocol: greedy}}
  final: {{datasets: [he_test], protocol: greedy}}
{allow}leakage: {{semantic: false}}  # the lexical stages alone; tests/isolation/test_semantic.py has the other
"""


def _write_spec(tmp: Path, real: dict[str, list[Problem]], shared: Path, *, allow: str = "",
                train_extra: list[Problem] = ()) -> Path:
    mbpp = [p for p in real["mbpp"] if 11 <= int(p.id.split("/")[1]) <= 60]
    train = real["codecontests"][:40] + list(train_extra)
    (tmp / "train.jsonl").write_text("".join(p.model_dump_json() + "\n" for p in train))
    (tmp / "mbpp.jsonl").write_text("".join(p.model_dump_json() + "\n" for p in mbpp))
    (tmp / "mbpp_ids.txt").write_text("".join(p.id + "\n" for p in mbpp))
    (tmp / "he_ids.txt").write_text("".join(p.id + "\n" for p in real["humaneval"]))
    path = tmp / "spec.yaml"
    path.write_text(SPEC.format(humaneval=shared / "humaneval.jsonl", allow=allow))
    return path


def _leaky(real: dict[str, list[Problem]]) -> list[Problem]:
    he = real["humaneval"][0]
    return [_plant(he, "reorder", _reorder(he.statement))]


def test_validate_reports_the_leak_at_the_evaluation_dataset_line(tmp_path, real, datasets_dir):
    path = _write_spec(tmp_path, real, datasets_dir, train_extra=_leaky(real))
    cache = SketchCache(root=tmp_path / "cache")
    with pytest.raises(SpecError) as info:
        validate_spec(path, content_check=lambda v: check_leakage(v, cache=cache))
    (diag,) = info.value.diagnostics
    assert diag.rule.startswith("3:") and diag.path == "datasets.he_test"
    assert diag.line == 5  # he_test's line in the spec
    assert "planted/reorder/HumanEval/0 ≈ HumanEval/0" in diag.message
    assert "spec.yaml:4:" in diag.message  # the training-side dataset's line
    assert diag.message.startswith("1 problem of evaluation-side `he_test`")


def test_a_problem_copied_twice_counts_once_with_its_pairs(tmp_path, real, datasets_dir):
    he = real["humaneval"][0]
    twice = [*_leaky(real), _plant(he, "copy", he.statement)]
    allow = 'allow:\n  - {rule: 3, datasets: [mix_train, he_test], reason: "planted on purpose"}\n'
    path = _write_spec(tmp_path, real, datasets_dir, allow=allow, train_extra=twice)
    report = check_leakage(validate_spec(path, content=False), cache=SketchCache(root=tmp_path / "cache"))
    (waiver,) = report.waivers
    assert waiver.what == "1 problem (2 pairs) of he_test duplicated in training-side mix_train"


def test_waiver_turns_the_error_into_a_recorded_waiver(tmp_path, real, datasets_dir):
    allow = 'allow:\n  - {rule: 3, datasets: [mix_train, he_test], reason: "planted on purpose"}\n'
    path = _write_spec(tmp_path, real, datasets_dir, allow=allow, train_extra=_leaky(real))
    validated = validate_spec(path, content=False)
    report = check_leakage(validated, cache=SketchCache(root=tmp_path / "cache"))
    assert report.errors == [] and report.checked
    (waiver,) = report.waivers
    assert waiver.rule == 3 and waiver.reason == "planted on purpose" and waiver.index == 0
    assert waiver.where.endswith("spec.yaml:5:3") and waiver.waiver_at.endswith("spec.yaml:17:5")
    pair = next(p for p in report.pairs if p.evaluation == "he_test")
    assert pair.waiver == waiver and [leak.eval_id for leak in pair.leaks] == ["HumanEval/0"]


def test_second_run_reads_every_sketch_from_the_cache(tmp_path, real, datasets_dir):
    path = _write_spec(tmp_path, real, datasets_dir)
    validated = validate_spec(path, content=False)
    assert dataset_sides(validated.spec) == (["mix_train"], ["he_test", "mbpp_reg"])
    cache = SketchCache(root=tmp_path / "cache")
    first = check_leakage(validated, cache=cache)
    second = check_leakage(validated, cache=cache)
    assert first.cache_hits == {"mix_train": False, "he_test": False, "mbpp_reg": False}
    assert second.cache_hits == {"mix_train": True, "he_test": True, "mbpp_reg": True}
    assert first.errors == second.errors == [] and second.sizes == {"mix_train": 40, "he_test": 164, "mbpp_reg": 50}
    for sketch_file in (tmp_path / "cache" / "leakage").iterdir():
        sketch_file.write_bytes(b"torn")  # a damaged cache entry is rebuilt, never trusted
    assert not any(check_leakage(validated, cache=cache).cache_hits.values())


def test_a_dataset_that_cannot_load_leaves_its_pairs_unchecked_and_loud(tmp_path, real, datasets_dir):
    path = _write_spec(tmp_path, real, datasets_dir)
    validated = validate_spec(path, content=False)
    (tmp_path / "train.jsonl").unlink()
    report = check_leakage(validated, cache=SketchCache(root=tmp_path / "cache"))
    # the user's own file: an error at its line (no Hub would help), and its pairs stay unchecked
    [error] = report.errors
    assert error.path == "datasets.mix_train.path" and "file not found" in error.message and not report.checked
    assert report.unchecked_pairs == [("mix_train", "he_test"), ("mix_train", "mbpp_reg")]
    assert report.warnings[0].startswith("rule 3: mix_train did not load: ") and "train.jsonl" in report.warnings[0]
    assert report.warnings[-1] == "rule 3 not checked for 2 pair(s): mix_train×he_test, mix_train×mbpp_reg"


def test_cli_lists_every_leak_with_both_ids(tmp_path, real, datasets_dir, capsys):
    from engine.cli import main

    path = _write_spec(tmp_path, real, datasets_dir, train_extra=_leaky(real))
    out_json = tmp_path / "report.json"
    code = main(["data", "leakage", str(path), "--cache-dir", str(tmp_path / "cache"), "--json", str(out_json)])
    captured = capsys.readouterr()
    assert code == 1
    assert "mix_train × he_test: planted/reorder/HumanEval/0 ≈ HumanEval/0" in captured.out
    assert "rule: 3:" in captured.err
    saved = json.loads(out_json.read_text())
    assert saved["unchecked_pairs"] == [] and len(saved["errors"]) == 1


def test_a_second_run_reuses_a_comparison_only_while_nothing_it_depends_on_changed(tmp_path, real, datasets_dir,
                                                                                      monkeypatch):
    """Comparisons are cached by both datasets' content, the settings and the matchers' code: a
    training set edited after a clean validation is compared afresh and its leak refused."""
    from engine.isolation import content

    path = _write_spec(tmp_path, real, datasets_dir)
    cache = SketchCache(root=tmp_path / "cache")
    clean = check_leakage(validate_spec(path, content=False), cache=cache)
    assert clean.errors == [] and len(list((tmp_path / "cache" / "leakage-pairs").glob("*.json"))) == 2
    compared = []
    monkeypatch.setattr(content, "leaks_between", lambda *a: compared.append(a) or leaks_between(*a))
    again = check_leakage(validate_spec(path, content=False), cache=cache)
    assert compared == [] and [p.leaks for p in again.pairs] == [p.leaks for p in clean.pairs]
    _write_spec(tmp_path, real, datasets_dir, train_extra=_leaky(real))  # train.jsonl gains a copy
    leaky = check_leakage(validate_spec(path, content=False), cache=cache)
    assert len(compared) == 2  # both pairs with mix_train compared afresh
    (diag,) = leaky.errors
    assert diag.path == "datasets.he_test" and "planted/reorder/HumanEval/0 ≈ HumanEval/0" in diag.message


def test_a_cached_comparison_is_keyed_by_every_setting_and_a_torn_entry_is_recompared(tmp_path):
    from engine.isolation.pair_cache import PairCache, pair_key
    from engine.spec.validated import Leak

    leak = Leak(train_id="a/1", eval_id="b/2", kind="near", similarity=0.8, scores={"jaccard": 0.8})
    cache = PairCache(tmp_path)
    assert cache.leaks("t" * 64, "e" * 64, DEFAULT, lambda: [leak]) == [leak]
    assert cache.leaks("t" * 64, "e" * 64, DEFAULT, lambda: pytest.fail("compared again")) == [leak]
    keys = {pair_key("t" * 64, "e" * 64, DEFAULT), pair_key("u" * 64, "e" * 64, DEFAULT),
            pair_key("t" * 64, "f" * 64, DEFAULT), pair_key("e" * 64, "t" * 64, DEFAULT),
            pair_key("t" * 64, "e" * 64, LeakageSpec(threshold=0.7)), pair_key("t" * 64, "e" * 64, LeakageSpec(ngram=4))}
    assert len(keys) == 6
    (entry,) = (tmp_path / "leakage-pairs").glob("*.json")
    entry.write_text('{"key": "')
    assert cache.leaks("t" * 64, "e" * 64, DEFAULT, lambda: []) == []  # torn: compared again, never trusted
