"""Rule 3's statement fingerprint and asymmetric scores on real HumanEval / MBPP rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.data.sources.formats import FORMATS, ConvertContext
from engine.isolation.content import leaks_between, sketch_settings
from engine.isolation.neardup import sketch_problems
from engine.isolation.normalize import entry_statement, fingerprint_text
from engine.isolation.overlap import Overlap, example_containment
from engine.problem import Problem
from engine.spec.model import LeakageSpec

DEFAULT = LeakageSpec()


@pytest.fixture(scope="module")
def rows(datasets_dir: Path) -> dict[str, list[dict]]:
    def read(name: str) -> list[dict]:
        return [json.loads(line) for line in (datasets_dir / name).open(encoding="utf-8")]

    return {"humaneval": read("humaneval.jsonl"), "mbpp": read("mbpp_full.jsonl")}


def _problems(fmt: str, rows: list[dict]) -> list[Problem]:
    return [FORMATS[fmt].convert(row, ConvertContext(split="test")) for row in rows]


def _mbpp_row(number: int, text: str) -> dict:
    """A training row in MBPP's own form that carries `text` as its statement."""
    return {"task_id": 50_000 + number, "text": text, "code": "def f(x):\n    pass\n", "test_list": ["assert f(1) is None"]}


def _kinds(train: list[Problem], evaluation: list[Problem]) -> dict[tuple[str, str], str]:
    settings = sketch_settings(DEFAULT)
    found = leaks_between(sketch_problems(train, settings), sketch_problems(evaluation, settings), DEFAULT)
    return {(leak.train_id, leak.eval_id): leak.kind for leak in found}


def test_a_function_problem_is_fingerprinted_by_its_docstring_and_signature(rows):
    (palindrome,) = _problems("humaneval", [rows["humaneval"][10]])  # a helper function precedes the entry point
    text = fingerprint_text(palindrome)
    assert "Find the shortest palindrome" in text and "Test if given string is a palindrome" not in text
    assert "string[::-1]" not in text and text.rstrip().endswith("def ident(ident: str) -> str:")
    signature, docstring = entry_statement(palindrome)
    assert signature == "def make_palindrome(string: str) -> str:" and docstring.lstrip().startswith("Find")


def test_docstrings_copied_into_mbpp_rows_are_caught_however_they_are_cut(rows):
    evaluation = _problems("humaneval", rows["humaneval"][:40])
    copies, expected = [], {}
    for i, problem in enumerate(evaluation):
        _, docstring = entry_statement(problem)
        cut = {0: docstring, 1: docstring.split(">>>")[0], 2: problem.prompt}[i % 3]  # alone, no examples, helpers
        copies.append(_mbpp_row(i, cut))
        if len(cut.split()) >= 12:  # "Return sorted unique elements in a list" alone is left to the exact hash
            expected[(f"mbpp/{50_000 + i}", problem.id)] = i % 3
    kinds = _kinds(_problems("mbpp", copies), evaluation)
    assert set(expected) <= set(kinds)
    assert {kinds[pair] for pair, cut in expected.items() if cut != 1} == {"exact"}
    # a copy may also match HumanEval's own near-twins (33/37 sort_third / sort_even, 7/29 filter by
    # substring / by prefix): the leak is real, the second pair names a neighbour
    others = {(t, e) for t, e in kinds if int(t.split("/")[1]) - 50_000 != int(e.split("/")[1])}
    assert others <= {("mbpp/50037", "HumanEval/33"),
                                                             ("mbpp/50033", "HumanEval/37"),
                                                             ("mbpp/50029", "HumanEval/7")}


def test_a_reworded_docstring_is_caught_and_mbpp_template_neighbours_are_not(rows):
    he = _problems("humaneval", rows["humaneval"])
    problem = he[26]  # remove_duplicates
    _, docstring = entry_statement(problem)
    sentences = docstring.split(">>>")[0].replace("integers", "whole numbers").replace("Keep", "Retain").split(". ")
    reworded = ". ".join(reversed([s.strip() for s in sentences]))  # synonyms, reversed, no examples
    kinds = _kinds(_problems("mbpp", [_mbpp_row(0, reworded)]), he)  # idf needs a real dataset around
    assert kinds == {("mbpp/50000", problem.id): "reworded"}
    mbpp = {int(r["task_id"]): r for r in rows["mbpp"]}
    # "followed by three 'b'" vs "by two to three 'b'"; "rotate ... to the right" vs "to the left": other tasks
    train = _problems("mbpp", [mbpp[787], mbpp[743]])
    assert _kinds(train, _problems("mbpp", [mbpp[285], mbpp[328]])) == {}


def test_a_rewritten_prose_that_keeps_its_examples_is_caught_by_them(rows):
    he = _problems("humaneval", rows["humaneval"])
    problem = he[31]  # is_prime: one prose sentence, seven doctests
    _, docstring = entry_statement(problem)
    prose, examples = docstring.split(">>>", 1)
    copy = "Give back true when the provided value has no divisors but one and itself.\n>>>" + examples
    assert _kinds(_problems("mbpp", [_mbpp_row(0, copy)]), he) == {("mbpp/50000", problem.id): "examples"}
    # `f(x) == y` lines are examples too (HumanEval/90 writes its own that way)
    second = he[90]
    _, docstring = entry_statement(second)
    calls = docstring[docstring.index("next_smallest(["):]
    copy = "Give back the runner-up among the values, or None when there is none.\n" + calls
    assert _kinds(_problems("mbpp", [_mbpp_row(1, copy)]), he) == {("mbpp/50001", second.id): "examples"}


def test_a_few_shared_examples_are_not_a_leak(rows):
    he = _problems("humaneval", rows["humaneval"])
    # /56 and /61 read the same once brackets are dropped, with two short doctests each side
    # below MIN_EXAMPLE_SHINGLES; /23's two tiny examples (`strlen('')` → 0) match many problems
    small = [he[56], he[23]]
    assert not any(kind == "examples" for kind in _kinds(small, he).values())


def test_a_short_reworded_docstring_is_caught_by_the_examples_it_keeps(rows):
    he = _problems("humaneval", rows["humaneval"])
    fib = he[55]  # one short sentence and three doctests: too few words for a cosine
    _, docstring = entry_statement(fib)
    copy = docstring.replace("Return", "Give back").replace("number", "value")
    assert _kinds(_problems("mbpp", [_mbpp_row(0, copy)]), he) == {("mbpp/50000", fib.id): "reworded"}
    # /60 (sum_to_n) shares two of fib's three examples (`fib(10) 55`, `fib(1) 1`): not enough to
    # stand in for the words a short pair lacks
    settings = sketch_settings(DEFAULT)
    pair = sketch_problems([he[60], fib], settings)
    assert example_containment(pair, 0, pair, 1) == pytest.approx(2 / 3)
    assert Overlap(left=0, right=1, cosine=0.0, shingles=0.5, examples=2 / 3).reworded < DEFAULT.reworded
    assert Overlap(left=0, right=1, cosine=0.0, shingles=0.5, examples=1.0).reworded >= DEFAULT.reworded
