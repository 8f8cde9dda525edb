"""The judge on the real shared data sets: reference solutions pass, small mutations do not."""

from __future__ import annotations

import gzip
import json
import random

import pytest

from engine.data.convert import problem_from_codecontests_derived, problem_from_humaneval, problem_from_mbpp
from engine.judge.api import Judge, JudgeConfig


def _rows(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as fh:
        return [json.loads(line) for line in fh]


@pytest.fixture(scope="module")
def judge():
    with Judge(JudgeConfig(timeout_s=10.0, cache=False)) as j:
        yield j


def test_humaneval_canonical_all_accepted(judge, shared_datasets):
    problems = [problem_from_humaneval(r) for r in _rows(shared_datasets / "humaneval.jsonl")]
    results = judge.judge_many([(p, p.solutions[0]) for p in problems], code_is_program=True)
    bad = [(r.problem_id, r.verdict, r.message, r.failures[:1]) for r in results if not r.accepted]
    assert not bad and len(results) == 164


def test_mbpp_sanitized_reference_all_accepted(judge, shared_datasets):
    problems = [problem_from_mbpp(r, sanitized=True) for r in _rows(shared_datasets / "mbpp_sanitized.jsonl")]
    results = judge.judge_many([(p, p.solutions[0]) for p in problems], code_is_program=True)
    bad = [(r.problem_id, r.verdict, r.failures[:1]) for r in results if not r.accepted]
    # Known judge gap (not a data problem): task 88's expected side is evaluated before the
    # program and fails there; reported as INTERNAL_ERROR (a judge fault), to be fixed.
    assert [b[0] for b in bad] in ([], ["mbpp_sanitized/88"])


def test_mutations_not_accepted(judge, shared_datasets):
    problems = [problem_from_humaneval(r) for r in _rows(shared_datasets / "humaneval.jsonl")][:40]
    mutated = []
    for p in problems:
        body = p.solutions[0][len(p.prompt):]
        if "return " in body:
            mutated.append((p, p.prompt + body.replace("return ", "return None and ", 1)))
    results = judge.judge_many(mutated, code_is_program=True)
    # `return None and ...` returns None; a test suite that never looks at that value may still pass.
    assert sum(r.accepted for r in results) <= len(results) // 20


def test_codecontests_subset_agreement(judge, shared_datasets):
    rows = _rows(shared_datasets / "codecontests_train_sample_derived.jsonl.gz")
    random.Random(0).shuffle(rows)
    problems = [problem_from_codecontests_derived(r) for r in rows[:40]]
    problems = [p.model_copy(update={"stdio_tests": p.stdio_tests[:3]}) for p in problems]
    with Judge(JudgeConfig(timeout_s=6.0, compare="float", cache=False)) as j:
        results = j.judge_many([(p, p.solutions[0]) for p in problems], code_is_program=True)
    # Disagreements measured here are multi-answer problems (need a checker) — see the judge report.
    assert sum(r.accepted for r in results) >= 34
