"""An evaluation's completion check on its records: every sample judged, few faults, and only
records of the summary's full keys counted."""

from __future__ import annotations

import json
from pathlib import Path

from engine.evaluate.records import Keys, SampleRecord, append
from engine.evaluate.eval_run import DatasetMetrics, EvalOutput
from engine.runs.completion import check_completion

KEYS = Keys(model="m", protocol="p", idlist="i", decoding_seed=3)


def _sample(i: int, verdict: str = "ACCEPTED", keys: Keys = KEYS) -> SampleRecord:
    return SampleRecord(dataset="d", problem_id=f"p{i}", sample=0, keys=keys, prompt_tokens=1, completion_tokens=1,
                        finish_reason="error" if verdict == "GEN_ERROR" else "stop", latency_s=0.0, seed=3,
                        completion="", verdict=verdict, accepted=verdict == "ACCEPTED", pass_ratio=0.0, passed=0,
                        total=1, format_ok=True, judge_s=0.0, judge_version="j")


def _run(tmp_path: Path, samples: list[SampleRecord]) -> Path:
    append(tmp_path / "outputs" / "samples" / "d.jsonl", samples)
    summary = DatasetMetrics(dataset="d", protocol="greedy", protocol_sha256="p", idlist_sha256="i", judge_version="j",
                             seed=1, expected_samples=200, model="m", decoding_seed=3, metrics={})
    (tmp_path / "outputs" / "metrics.json").write_text(EvalOutput(run_id="r", datasets=[summary]).model_dump_json())
    return tmp_path


def test_faults_above_the_limit_fail_the_evaluation_with_their_count(tmp_path):
    samples = [_sample(i) for i in range(196)] + [_sample(196, "GEN_ERROR")] + [
        _sample(i, "INTERNAL_ERROR") for i in (197, 198, 199)]
    reason = check_completion("eval", _run(tmp_path, samples))
    assert reason is not None and reason.startswith("d: 4 of 200 samples are faults (")
    assert "1 generations failed on the server (GEN_ERROR), 3 judge faults (INTERNAL_ERROR)" in reason


def test_faults_within_the_limit_and_faults_judged_again_pass(tmp_path):
    samples = [_sample(i) for i in range(198)] + [_sample(198, "INTERNAL_ERROR"), _sample(199, "INTERNAL_ERROR")]
    run = _run(tmp_path, samples)
    assert check_completion("eval", run) is None  # 2 of 200 = 1 %
    append(run / "outputs" / "samples" / "d.jsonl", [_sample(0, "GEN_ERROR")])  # a third: over the limit
    assert "3 of 200 samples are faults" in check_completion("eval", run)
    append(run / "outputs" / "samples" / "d.jsonl", [_sample(0)])  # made again: the last record counts
    assert check_completion("eval", run) is None


def test_records_of_other_keys_do_not_count(tmp_path):
    other = Keys(model="m", protocol="p", idlist="i", decoding_seed=4)  # sampled with another seed
    samples = [_sample(i) for i in range(199)] + [_sample(199, keys=other)]
    assert check_completion("eval", _run(tmp_path, samples)) == "d: 1 of 200 samples missing"


def test_a_best_of_n_choice_among_failed_generations_is_refused(tmp_path):
    (tmp_path / "outputs" / "samples").mkdir(parents=True)
    (tmp_path / "outputs" / "samples" / "d.jsonl").write_text("{}\n" * 10)
    counts = {"d": {"problems": 10, "expected_samples": 100, "generated": 100, "failed": 7}}
    (tmp_path / "outputs" / "best_of_n.json").write_text(json.dumps(counts))
    reason = check_completion("best_of_n", tmp_path)
    assert reason.startswith("d: 7 of 100 samples are generations failed on the server (GEN_ERROR)")
    counts["d"]["failed"] = 1
    (tmp_path / "outputs" / "best_of_n.json").write_text(json.dumps(counts))
    assert check_completion("best_of_n", tmp_path) is None


def test_faults_in_repair_rounds_count(tmp_path):
    """A repair round that failed on the server ends its chain (a fault is not repaired further):
    accepted@multi would publish it as the model's failure unless the check counts it."""
    samples = [_sample(i, "WRONG_ANSWER") for i in range(200)]
    repaired = [s.model_copy(update={"round": 2, "parent": s.uid, "verdict": "GEN_ERROR", "finish_reason": "error"})
                for s in samples[:50]]
    reason = check_completion("eval", _run(tmp_path, samples + repaired))
    assert reason is not None and reason.startswith("d: 50 of 250 judged answers (first answers and repair rounds) are faults (50 generations")
