"""Toy problems: deterministic, split-disjoint, and every reference solution passes the judge."""

from __future__ import annotations

import pytest

from engine.data.loaders import load_dataset_problems
from engine.data.toy import toy_problems
from engine.judge.api import Judge, JudgeConfig
from engine.spec.model import DatasetSpec

SPLITS = ("train", "valid", "test")


def test_generation_is_deterministic_per_seed():
    assert toy_problems("train") == toy_problems("train")
    assert [p.id for p in toy_problems("valid", seed=1)] != [p.id for p in toy_problems("valid", seed=0)]


@pytest.mark.parametrize("seed", [0, 1])
def test_splits_are_disjoint_and_cover_both_kinds(seed):
    ids = {split: {p.id for p in toy_problems(split, seed)} for split in SPLITS}
    assert not (ids["train"] & ids["valid"] or ids["train"] & ids["test"] or ids["valid"] & ids["test"])
    assert len(ids["train"]) > 4 * len(ids["valid"]) > 0
    for split in SPLITS:
        assert {p.kind for p in toy_problems(split, seed)} == {"function", "stdio"}


def test_toy_is_a_registry_source():
    loaded = load_dataset_problems(DatasetSpec(source="toy", split="valid", role="valid"), name="toy_valid")
    assert loaded.problems == toy_problems("valid") and loaded.split == "valid"
    again = load_dataset_problems(DatasetSpec(source="toy", split="valid", role="valid"), name="toy_valid")
    assert again.fingerprint == loaded.fingerprint


def test_every_reference_solution_passes_the_judge():
    problems = [p for split in SPLITS for p in toy_problems(split)]
    # The same family's solution for another k must fail: the tests pin k down.
    swapped = [(a, b.solutions[0]) for a, b in zip(problems, problems[1:]) if a.id.rsplit("_", 1)[0] == b.id.rsplit("_", 1)[0]]
    with Judge(JudgeConfig(timeout_s=5.0, workers=2)) as judge:
        results = judge.judge_many([(p, p.solutions[0]) for p in problems], code_is_program=True)
        wrong = judge.judge_many(swapped[:20], code_is_program=True)
    failed = [(r.problem_id, r.verdict, r.message) for r in results if not r.accepted]
    assert not failed
    assert len(results) == len(problems) > 250
    assert len(wrong) == 20 and not any(r.accepted for r in wrong)
