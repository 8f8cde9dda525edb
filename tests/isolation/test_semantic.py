"""Rule 3 by meaning: a reworded benchmark problem is proposed by the embedding model and
confirmed by running its solution; without the model, rule 3 says the stage did not run.

The fixtures (tests/isolation/paraphrase/) are five HumanEval problems and MBPP-format training
rows: a rewording of HumanEval/24 with a solution under another name, a rewording of
HumanEval/13 without a solution, HumanEval/24's sibling (smallest divisor), and eight unrelated
MBPP tasks. Tests that need the model skip when the `semantic` extra is not installed.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from engine.data.convert import problem_from_humaneval, problem_from_mbpp
from engine.isolation import semantic
from engine.isolation.content import check_leakage
from engine.isolation.neardup import SketchCache
from engine.isolation.semantic import (
    SemanticNotInstalled,
    SemanticUnavailable,
    VectorCache,
    candidates,
    problem_vectors,
    prose,
    verify_files,
)
from engine.isolation.validate import validate_spec
from engine.judge.config import JudgeConfig
from engine.problem import Problem, StdioTest
from engine.verify.leakage import BACKWARD, FORWARD, VerdictStore, adapted, confirm_by_execution, judge_confirmer

HERE = Path(__file__).parent / "paraphrase"


def _rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (HERE / name).read_text().splitlines()]


BENCHMARK = [problem_from_humaneval(r) for r in _rows("benchmark.jsonl")]
TRAINING = [problem_from_mbpp(r, sanitized=False) for r in _rows("training.jsonl")]
REWORDED, NO_SOLUTION, SIBLING = TRAINING[:3]  # mbpp/10001 ≈ HumanEval/24, 10002 ≈ /13, 10003 sibling of /24


def _model_or_skip() -> semantic.Encoder:
    """The model from its wheel (never from a model hub). Only a missing extra skips (`make
    install` installs it); an installed one that does not load or verify fails the test."""
    try:
        return semantic.load_encoder()
    except SemanticNotInstalled as exc:
        pytest.skip(f"the semantic extra is not installed here (`make install` installs it): {exc}")


SPEC = """\
name: paraphrase-check
base_model: qwen2.5-coder-0.5b-instruct
datasets:
  rows:  {{source: local_jsonl, path: {training}, fields: {{format: mbpp}}, role: train}}
  bench: {{source: local_jsonl, path: {benchmark}, fields: {{format: humaneval}}, ids: bench_ids.txt, role: test, test_only: true}}
protocols:
  greedy: {{preset: greedy}}
phases:
  base: {{kind: eval}}
  sft:  {{kind: sft, from: base, trainer: trl, train: rows}}
seeds: [1]
evaluate:
  final: {{datasets: [bench], protocol: greedy}}
{allow}"""


def _spec(tmp: Path, allow: str = "") -> Path:
    (tmp / "bench_ids.txt").write_text("".join(p.id + "\n" for p in BENCHMARK))
    path = tmp / "spec.yaml"
    path.write_text(SPEC.format(training=HERE / "training.jsonl", benchmark=HERE / "benchmark.jsonl", allow=allow))
    return path


# ---------------------------------------------------------------- without the model
def test_without_the_extra_validate_says_the_semantic_stage_did_not_run(tmp_path, monkeypatch):
    monkeypatch.setattr(semantic, "MODEL_PACKAGE", "no_such_model_package")  # what a machine without the extra sees
    semantic.load_encoder.cache_clear()
    try:
        report = check_leakage(validate_spec(_spec(tmp_path), content=False), cache=SketchCache(root=tmp_path / "c"))
    finally:
        semantic.load_encoder.cache_clear()
    assert report.errors == [] and report.checked  # lexical rule 3 ran; nothing lexical to find here
    assert report.semantic.startswith("did not run: the all-MiniLM-L6-v2 model is not installed")
    (warning,) = report.warnings
    assert warning.startswith("rule 3: the semantic stage did not run: ") and "pip install 'rlvr-run[semantic]'" in warning
    assert report.unverified == []  # an optional extra left out is said, not a failure that stops a run


class _FailingModel:
    """A fake standing in for a model whose install is broken: it loads, then fails to embed."""

    def get_embedding_dimension(self) -> int:
        return 384

    def encode(self, *args, **kwargs):
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied")


def test_a_model_that_fails_while_embedding_is_a_stage_that_did_not_run_not_a_traceback(tmp_path):
    broken = semantic.Encoder(model=_FailingModel(), weights_sha256="0" * 64)
    report = check_leakage(validate_spec(_spec(tmp_path), content=False), cache=SketchCache(root=tmp_path / "c"),
                           encoder=lambda: broken)
    assert report.semantic.startswith("did not run: the all-MiniLM-L6-v2 model failed while embedding (RuntimeError")
    assert report.vector_hits == {}
    (unverified,) = report.unverified  # installed but failed: like data that did not load, no real run
    assert unverified.startswith("rule 3 by meaning (the semantic stage failed") and "semantic: false" in unverified
    assert report.warnings[0].startswith("rule 3: the semantic stage did not run")


def test_semantic_false_turns_the_stage_off_without_a_warning(tmp_path):
    path = _spec(tmp_path)
    path.write_text(path.read_text() + "leakage: {semantic: false}\n")
    report = check_leakage(validate_spec(path, content=False), cache=SketchCache(root=tmp_path / "c"))
    assert report.warnings == [] and report.semantic == "off (leakage.semantic: false)"


def test_weights_other_than_the_pinned_ones_are_refused(tmp_path):
    for name in semantic.PINNED:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"not the model")
    with pytest.raises(SemanticUnavailable, match="not the pinned"):
        verify_files(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(SemanticUnavailable, match="is missing"):
        verify_files(tmp_path)


def test_prose_drops_worked_examples_on_both_sides():
    he24 = BENCHMARK[0]
    assert prose(he24) == "For a given number n, find the largest number that divides n evenly, smaller than n"
    contest = Problem(id="cc/1", source="codecontests", split="train", kind="stdio",
                      statement="Vasya has n apples. Print how many he eats.\n\nInput\n\nOne integer n.\n\n"
                                "Examples\n\nInput\n\n3\n\nOutput\n\n3\n\nNote\n\nHe eats them all.")
    assert prose(contest) == "Vasya has n apples. Print how many he eats. Input One integer n."


def test_candidates_are_the_top_k_of_each_evaluation_problem_and_every_pair_above_review():
    rng = np.random.default_rng(0)
    train = rng.normal(size=(50, 8)).astype(np.float32)
    train /= np.linalg.norm(train, axis=1, keepdims=True)
    evaluation = train[[3, 7]].copy()
    found = candidates(train, evaluation, top_k=2, review=0.999)
    per_eval = {j: [c.train for c in found if c.evaluation == j] for j in (0, 1)}
    assert len(per_eval[0]) == len(per_eval[1]) == 2 and 3 in per_eval[0] and 7 in per_eval[1]
    everything = candidates(train, evaluation, top_k=0, review=-1.0)
    assert len(everything) == 100 and candidates(train[:0], evaluation, top_k=5, review=0.5) == []


# ---------------------------------------------------------------- execution
def test_a_solution_is_adapted_to_the_entry_point_its_tests_call():
    program, why = adapted(REWORDED, BENCHMARK[0])
    assert why == "" and program.endswith("\n\nlargest_divisor = biggest_proper_divisor\n")
    assert adapted(NO_SOLUTION, BENCHMARK[1]) == (None, "mbpp/10002 has no solution")
    assert adapted(BENCHMARK[0], REWORDED) == (None, "mbpp/10001 has no tests")
    stdio = Problem(id="cc/2", source="codecontests", split="train", kind="stdio", statement="Add two numbers.",
                    stdio_tests=[StdioTest(input="1 2\n", output="3\n")], solutions=["print(sum(map(int, input().split())))"])
    assert adapted(REWORDED, stdio) == (None, "mbpp/10001 is a function problem, cc/2 reads stdin")
    assert adapted(stdio, stdio)[0] == stdio.solutions[0]


def test_the_judge_confirms_a_rewording_and_refutes_a_sibling_both_ways(tmp_path):
    store = VerdictStore(tmp_path)
    he24 = BENCHMARK[0]
    confirm = judge_confirmer(JudgeConfig(workers=2), store=store)
    reworded, sibling, unsolved = confirm([(REWORDED, he24), (SIBLING, he24), (NO_SOLUTION, BENCHMARK[1])])
    assert reworded.confirmed and [(r.solution, r.verdict) for r in reworded.runs] == [(FORWARD, "accepted")]
    assert reworded.runs[0].passed == reworded.runs[0].total > 0
    assert not sibling.confirmed and [r.solution for r in sibling.runs] == [FORWARD, BACKWARD]
    assert all(r.verdict == "wrong_answer" for r in sibling.runs)
    assert not unsolved.confirmed and unsolved.runs == () and unsolved.describe() == "not run: mbpp/10002 has no solution"
    with sqlite3.connect(store.path) as db:
        assert db.execute("SELECT count(*) FROM verdicts").fetchone() == (3,)  # two forward runs, one backward
    again = judge_confirmer(JudgeConfig(workers=2), store=store)([(REWORDED, he24)])  # from the store: same evidence
    assert again == [reworded]


# ---------------------------------------------------------------- the whole stage
def test_a_reworded_benchmark_problem_is_refused_with_its_evidence(tmp_path):
    _model_or_skip()
    path = _spec(tmp_path)
    report = check_leakage(validate_spec(path, content=False), cache=SketchCache(root=tmp_path / "c"),
                           confirm=confirm_by_execution)
    (pair,) = report.pairs
    by_ids = {(leak.train_id, leak.eval_id): leak for leak in pair.leaks}
    refused = by_ids[("mbpp/10001", "HumanEval/24")]
    assert (refused.kind, refused.level, refused.outcome) == ("confirmed", "error", "refused")
    assert refused.scores["semantic"] >= 0.9 and refused.confirmation.runs[0].verdict == "accepted"
    unsolved = by_ids[("mbpp/10002", "HumanEval/13")]  # no solution: the score alone, at the warning level
    assert (unsolved.kind, unsolved.level) == ("semantic", "warning")
    sibling = by_ids[("mbpp/10003", "HumanEval/24")]  # similar words, another task: execution says no
    assert (sibling.kind, sibling.level) == ("semantic", "warning") and not sibling.confirmation.confirmed
    assert set(by_ids) == {("mbpp/10001", "HumanEval/24"), ("mbpp/10002", "HumanEval/13"), ("mbpp/10003", "HumanEval/24")}
    (error,) = report.errors
    assert "mbpp/10001 ≈ HumanEval/24 (confirmed by execution, similar meaning 0.9" in error.message
    assert "training → evaluation: accepted" in error.message
    assert any("resemble training-side rows by meaning, not confirmed by execution" in w for w in report.warnings)
    second = check_leakage(validate_spec(path, content=False), cache=SketchCache(root=tmp_path / "c"),
                           confirm=confirm_by_execution)
    assert second.vector_hits == {"rows": True, "bench": True} and second.pairs[0].leaks == pair.leaks


def test_vectors_are_cached_by_text_and_a_damaged_cache_is_rebuilt(tmp_path):
    encoder = _model_or_skip()
    cache = VectorCache(root=tmp_path)
    first, hit = problem_vectors(TRAINING, encoder, cache)
    assert not hit and first.shape == (len(TRAINING), 384)
    subset, hit = problem_vectors(TRAINING[2:5], encoder, cache)  # another dataset made of texts seen before
    assert hit and np.array_equal(subset, first[2:5])
    cache.path(encoder.key()).write_bytes(b"torn")
    again, hit = problem_vectors(TRAINING[:2], encoder, cache)
    assert not hit and np.allclose(again, first[:2], atol=1e-5)
    assert problem_vectors(TRAINING[:2], encoder, cache)[1]  # the rebuilt file serves the next run


def test_a_second_validation_finds_the_same_without_loading_the_model(tmp_path):
    _model_or_skip()
    spec = validate_spec(_spec(tmp_path), content=False)
    semantic.load_encoder.cache_clear()
    try:
        first = check_leakage(spec, cache=SketchCache(root=tmp_path / "c"))
        semantic.load_encoder.cache_clear()  # what a new process sees
        second = check_leakage(spec, cache=SketchCache(root=tmp_path / "c"))
        encoder = semantic.load_encoder()
        assert encoder.model is None  # every vector came from the cache: the model never loaded
        assert encoder.width == encoder.loaded().get_embedding_dimension()  # the declared width is the model's
    finally:
        semantic.load_encoder.cache_clear()
    assert not any(first.vector_hits.values()) and all(second.vector_hits.values())
    assert [pair.leaks for pair in second.pairs] == [pair.leaks for pair in first.pairs]
    assert (second.semantic, second.warnings, second.errors) == (first.semantic, first.warnings, first.errors)


def test_without_a_judge_candidates_are_warnings_and_rule_3_says_so(tmp_path):
    _model_or_skip()
    report = check_leakage(validate_spec(_spec(tmp_path), content=False), cache=SketchCache(root=tmp_path / "c"))
    assert report.errors == [] and "confirmation by execution did not run" in report.semantic
    assert {leak.kind for leak in report.pairs[0].leaks} == {"semantic"}


def test_cli_lists_every_pair_with_kind_scores_and_test_run(tmp_path, capsys):
    from engine.cli import main

    code = main(["data", "leakage", str(_spec(tmp_path)), "--cache-dir", str(tmp_path / "c"), "--json"])
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    (pair,) = report["pairs"]
    if report["semantic"].startswith("did not run") and "is not installed" in report["semantic"]:  # no extra here
        assert code == 0 and pair["findings"] == [] and "semantic stage did not run" in captured.err
        return
    assert code == 1 and pair["outcome"] == "error"
    found = {(f["train_id"], f["eval_id"]): f for f in pair["findings"]}
    confirmed = found[("mbpp/10001", "HumanEval/24")]
    assert (confirmed["kind"], confirmed["level"], confirmed["outcome"]) == ("confirmed", "error", "refused")
    assert set(confirmed["scores"]) == {"semantic"}
    (run,) = confirmed["confirmation"]["runs"]
    assert run == {"solution": FORWARD, "verdict": "accepted", "passed": run["total"], "total": run["total"]}
    assert found[("mbpp/10003", "HumanEval/24")]["confirmation"]["runs"][1]["solution"] == BACKWARD
    assert "mbpp/10001 ≈ HumanEval/24" in captured.err and "kind confirmed" in captured.err


def test_a_waived_pair_is_not_searched_by_meaning(tmp_path):
    allow = 'allow:\n  - {rule: 3, datasets: [rows, bench], reason: "rewordings planted on purpose"}\n'
    report = check_leakage(validate_spec(_spec(tmp_path, allow), content=False), cache=SketchCache(root=tmp_path / "c"),
                           confirm=confirm_by_execution)
    assert report.pairs[0].leaks == [] and report.warnings == []
    assert report.semantic == "not needed: no pair of datasets to compare that is not waived"


# ---------------------------------------------------------------- runs that prove nothing
def test_a_timed_out_confirmation_is_not_checked_and_not_cached(tmp_path):
    looping = problem_from_mbpp({**_rows("training.jsonl")[0], "task_id": 10099,
                                 "code": "def biggest_proper_divisor(n):\n    while True:\n        pass\n"},
                                sanitized=False)
    store = VerdictStore(tmp_path)
    (result,) = judge_confirmer(JudgeConfig(workers=1, timeout_s=0.5), store=store)([(looping, BENCHMARK[0])])
    assert not result.confirmed and result.unchecked == f"{FORWARD}: timeout"
    assert "not checked" in result.describe()
    with sqlite3.connect(store.path) as db:  # a loaded machine may finish it next time
        assert db.execute("SELECT count(*) FROM verdicts").fetchone() == (0,)
    store.put({"k": {"verdict": "timeout", "passed": 0, "total": 1}})  # as a store written before could hold
    assert store.get(["k"]) == {}


def test_a_run_with_no_test_or_a_judge_fault_never_confirms_and_is_not_checked():
    from engine.spec.validated import Execution
    from engine.verify.leakage import concluded

    vacuous = concluded((Execution(solution=FORWARD, verdict="accepted", passed=0, total=0),), "")
    assert not vacuous.confirmed and "no test run" in vacuous.unchecked
    fault = concluded((Execution(solution=FORWARD, verdict="internal_error", passed=0, total=3),
                       Execution(solution=BACKWARD, verdict="accepted", passed=2, total=2)), "")
    assert not fault.confirmed and fault.unchecked == f"{FORWARD}: internal_error"
    refuted = concluded((Execution(solution=FORWARD, verdict="wrong_answer", passed=1, total=3),), "")
    assert not refuted.confirmed and refuted.unchecked == ""


def test_an_unsettled_candidate_below_the_warning_score_is_shown_not_dropped():
    from engine.isolation.semantic import semantic_leaks
    from engine.spec.model import LeakageSpec
    from engine.spec.validated import Confirmation, Execution

    settings = LeakageSpec(semantic_top_k=1, semantic_review=0.99, semantic_warn=0.9)
    unsettled = Confirmation(confirmed=False, runs=(Execution(solution=FORWARD, verdict="timeout", passed=0, total=1),),
                             unchecked=f"{FORWARD}: timeout")
    vectors = np.array([[1.0, 0.0]], dtype=np.float32)
    other = np.array([[0.6, 0.8]], dtype=np.float32)  # cosine 0.6: a top-1 candidate below `semantic_warn`
    (leak,) = semantic_leaks([REWORDED], [BENCHMARK[0]], vectors, other, settings, [], lambda pairs: [unsettled])
    assert (leak.kind, leak.level, leak.confirmation) == ("semantic", "warning", unsettled)


def test_loading_the_model_leaves_the_hub_as_it_was_for_the_runs_this_process_starts(monkeypatch):
    """The runs a runner starts inherit its environment: the hub is off while the model loads only."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    semantic.load_encoder.cache_clear()
    try:
        _model_or_skip()
        assert "HF_HUB_OFFLINE" not in os.environ
    finally:
        semantic.load_encoder.cache_clear()


def test_the_weights_are_hashed_again_whenever_a_file_changed(tmp_path, monkeypatch):
    """The pinned hashes are remembered per file state (size, inode, mtime, ctime): a rewritten
    file, whatever its times, is hashed again and refused."""
    import hashlib
    import time

    for name in semantic.PINNED:
        (tmp_path / "m" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "m" / name).write_bytes(name.encode())
    pinned = {name: hashlib.sha256(name.encode()).hexdigest() for name in semantic.PINNED}
    monkeypatch.setattr(semantic, "PINNED", pinned)
    monkeypatch.setenv("RLVR_RUN_CACHE_DIR", str(tmp_path / "cache"))
    assert semantic.RACY_S > 0  # files written this recently are not remembered...
    hashed_now = semantic.verified_files(tmp_path / "m")
    assert hashed_now == pinned["model.safetensors"] and not (tmp_path / "cache").exists()
    monkeypatch.setattr(semantic, "RACY_S", 0.0)  # ...which the rest of this test cannot wait for
    hashed = []
    monkeypatch.setattr(semantic, "verify_files", lambda folder, real=semantic.verify_files: hashed.append(1) or real(folder))
    assert semantic.verified_files(tmp_path / "m") == pinned["model.safetensors"]
    assert semantic.verified_files(tmp_path / "m") == pinned["model.safetensors"] and len(hashed) == 1
    weights = tmp_path / "m" / "model.safetensors"
    time.sleep(0.05)  # past the file system's clock tick
    before = weights.stat()
    weights.write_bytes(b"other weights, same size"[: before.st_size].ljust(before.st_size, b"!"))
    os.utime(weights, ns=(before.st_atime_ns, before.st_mtime_ns))  # even with its old times put back
    with pytest.raises(SemanticUnavailable, match="not the pinned"):
        semantic.verified_files(tmp_path / "m")
    assert len(hashed) == 2
