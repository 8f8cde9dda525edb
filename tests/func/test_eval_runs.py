"""Eval runs for real: the rendered launch.sh generates with the tiny model and judges, the runner
records the metrics in lineage, and a kill -9 mid-generation resumes without duplicates."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.cli import main
from engine.data.toy import toy_problems
from engine.evaluate.records import GenerationRecord, SampleRecord, read
from engine.runs.completion import check_completion
from engine.runs.lineage import LINEAGE_FILE, RunState, open_lineage
from engine.runs.materialize import materialize
from engine.runs.pipeline import run_spec
from engine.runs.preflight import preflight

SPEC = """\
name: tiny-eval
base_model: {{path: {model}}}
datasets:
  toy_train: {{source: toy, split: train, role: train}}
  toy_valid: {{source: toy, split: valid, role: valid}}
protocols:
  greedy: {{preset: greedy, max_tokens: {tokens}{extra}}}
phases:
  base: {{kind: eval}}
seeds: [1]
evaluate:
  every_phase: {{datasets: [toy_valid], protocol: greedy}}
"""


def write_spec(root: Path, model: Path, tokens: int = 24, extra: str = "") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    spec = root / "spec.yaml"
    spec.write_text(SPEC.format(model=model, tokens=tokens, extra=extra))
    return spec


@pytest.mark.slow  # tens of seconds (a real study, server or trainer): `make test-all` and CI run it
def test_an_eval_run_records_its_metrics_and_status_shows_them(tiny_model, tmp_path, capsys):
    spec = write_spec(tmp_path, tiny_model)
    outcome = run_spec(spec, runs_dir=tmp_path / "runs")
    [run] = outcome.plan.runs
    assert outcome.result.states[run.id] is RunState.succeeded
    run_dir = tmp_path / "runs" / "tiny-eval" / run.id
    samples = list(read(run_dir / "outputs" / "samples" / "toy_valid.jsonl", SampleRecord))
    assert len(samples) == 42 and len({s.problem_id for s in samples}) == 42
    assert all(s.judge_version.startswith("rlvr-judge-") and s.keys.protocol for s in samples)
    with open_lineage(tmp_path / "runs" / LINEAGE_FILE, readonly=True) as lineage:
        metrics = {m.name: m for m in lineage.metrics(run.id)}
    assert metrics["accepted@1"].dataset == "toy_valid" and metrics["accepted@1"].protocol == "greedy"
    assert metrics["accepted@1"].protocol_sha256 == samples[0].keys.protocol
    assert metrics["accepted@1"].judge_version == samples[0].judge_version and metrics["samples"].value == 42
    capsys.readouterr()
    assert main(["status", "--runs-dir", str(tmp_path / "runs"), "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)["runs"]
    assert row["headline"]["name"] == "accepted@1" and row["headline"]["dataset"] == "toy_valid"


@pytest.mark.slow  # tens of seconds (a real study, server or trainer): `make test-all` and CI run it
def test_a_run_missing_samples_fails_with_the_missing_count(tiny_model, tmp_path):
    spec = write_spec(tmp_path, tiny_model)
    outcome = run_spec(spec, runs_dir=tmp_path / "runs")
    [run] = outcome.plan.runs
    run_dir = tmp_path / "runs" / "tiny-eval" / run.id
    path = run_dir / "outputs" / "samples" / "toy_valid.jsonl"
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:40]))
    assert check_completion("eval", run_dir) == "toy_valid: 2 of 42 samples missing"


@pytest.mark.slow  # kills a real generation and resumes it: `make test-all` and CI run it
def test_kill_9_mid_generation_then_resume_without_duplicates(tiny_model, tmp_path):
    spec = write_spec(tmp_path, tiny_model, tokens=48)
    checked = preflight(spec)
    [run_dir] = [d.path for d in materialize(checked.plan, checked.validated, tmp_path / "runs")]
    generations = run_dir / "outputs" / "generations" / "toy_valid.jsonl"
    command = [sys.executable, "-m", "engine.cli", "evaluate", "--run-dir", str(run_dir), "--model", str(tiny_model),
               "--batch-size", "4"]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not generations.exists() or len(generations.read_text().splitlines()) < 8):
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = [json.loads(line)["problem_id"] for line in generations.read_text().splitlines() if line.endswith("}")]
    assert 8 <= len(before) < 42, "the kill came after generation finished: no resume was tested"
    assert main(["evaluate", "--run-dir", str(run_dir), "--model", str(tiny_model)]) == 0
    after = list(read(generations, GenerationRecord))
    lines = generations.read_text().splitlines()
    assert len(after) == 42 and len({g.uid for g in after}) == 42
    assert len(lines) - lines.count("") <= 42 + 1  # nothing regenerated (a torn last line at most)
    # the records written before the kill stay as they were, first in the file (`read` orders by problem)
    assert [json.loads(line)["problem_id"] for line in lines[: len(before)]] == before
    samples = list(read(run_dir / "outputs" / "samples" / "toy_valid.jsonl", SampleRecord))
    assert len(samples) == 42 and len({s.uid for s in samples}) == 42
    assert check_completion("eval", run_dir) is None


@pytest.mark.slow  # tens of seconds (a real study, server or trainer): `make test-all` and CI run it
def test_rejudging_never_regenerates(tiny_model, tmp_path):
    spec = write_spec(tmp_path, tiny_model)
    outcome = run_spec(spec, runs_dir=tmp_path / "runs")
    [run] = outcome.plan.runs
    run_dir = tmp_path / "runs" / "tiny-eval" / run.id
    generations = run_dir / "outputs" / "generations" / "toy_valid.jsonl"
    before = generations.read_bytes()
    assert main(["evaluate", "--run-dir", str(run_dir), "--model", str(tiny_model), "--rejudge"]) == 0
    assert generations.read_bytes() == before
    assert len(list(read(run_dir / "outputs" / "samples" / "toy_valid.jsonl", SampleRecord))) == 42


@pytest.mark.slow  # tens of seconds (a real study, server or trainer): `make test-all` and CI run it
def test_a_repair_evaluation_records_each_round_and_its_metrics(tiny_model, tmp_path):
    spec = write_spec(tmp_path, tiny_model, tokens=16, extra=", rounds: 2")
    outcome = run_spec(spec, runs_dir=tmp_path / "runs")
    [run] = outcome.plan.runs
    assert outcome.result.states[run.id] is RunState.succeeded
    run_dir = tmp_path / "runs" / "tiny-eval" / run.id
    records = list(read(run_dir / "outputs" / "samples" / "toy_valid.jsonl", SampleRecord))
    first = {r.uid: r for r in records if r.round == 1}
    second = [r for r in records if r.round == 2]
    assert len(first) == 42 and len(second) == sum(not r.accepted for r in first.values())
    assert all(r.parent in first and not first[r.parent].accepted for r in second)
    assert all(r.conversation[-1]["role"] == "user" and "public tests" in r.conversation[-1]["content"]
               for r in second)
    metrics = json.loads((run_dir / "outputs" / "metrics.json").read_text())["datasets"][0]["metrics"]
    assert metrics["repair/rounds_mean"] > 1 and "repair/round2/recovery" in metrics
    assert metrics["samples"] == 42  # single-shot metrics count the first answers only


BEST_OF_N = """\
name: tiny-bon
base_model: {{path: {model}}}
datasets:
  toy_train: {{source: toy, split: train, role: train}}
  toy_valid: {{source: toy, split: valid, role: valid}}
protocols:
  greedy: {{preset: greedy, max_tokens: 16}}
  sample3: {{temperature: 1.0, n: 3, max_tokens: 16, seed: 5}}
phases:
  bon: {{kind: best_of_n, from: base, protocol: sample3, n: 3, without_public: first}}
seeds: [1]
evaluate:
  every_phase: {{datasets: [toy_valid], protocol: greedy}}
"""


@pytest.mark.slow  # a best-of-n run and its evaluation: `make test-all` and CI run it
def test_best_of_n_chooses_by_public_tests_and_its_evaluation_scores_the_choice(tiny_model, tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(BEST_OF_N.format(model=tiny_model))
    outcome = run_spec(spec, runs_dir=tmp_path / "runs")
    assert set(outcome.result.states.values()) == {RunState.succeeded}
    bon = next(r for r in outcome.plan.runs if r.kind.value == "best_of_n")
    evaluation = next(r for r in outcome.plan.runs if r.kind.value == "eval")
    root = tmp_path / "runs" / "tiny-bon"
    chosen = [json.loads(line) for line in (root / bon.id / "outputs" / "samples" / "toy_valid.jsonl").open()]
    generated = list(read(root / bon.id / "outputs" / "generations" / "toy_valid.jsonl", GenerationRecord))
    assert len(chosen) == 42 and len(generated) == 42 * 3
    assert all(c["candidates"] == 3 for c in chosen)
    # toy stdio problems show their first test; toy function prompts show no example: first sample
    kinds = {p.id: p.kind for p in toy_problems("valid")}
    assert all((c["public_pass_ratio"] is None) == (kinds[c["problem_id"]] == "function") for c in chosen)
    assert all(c["sample"] == 0 for c in chosen if kinds[c["problem_id"]] == "function")
    cost = {c["problem_id"]: c["cost_tokens"] for c in chosen}
    for problem_id, tokens in cost.items():
        assert tokens == sum(g.prompt_tokens + g.completion_tokens for g in generated if g.problem_id == problem_id)
    scored = list(read(root / evaluation.id / "outputs" / "samples" / "toy_valid.jsonl", SampleRecord))
    assert len(scored) == 42 and {s.completion for s in scored} <= {g.completion for g in generated}
    metrics = json.loads((root / evaluation.id / "outputs" / "metrics.json").read_text())["datasets"][0]["metrics"]
    assert metrics["best_of_n/candidates"] == 3 and metrics["best_of_n/cost_tokens"] == sum(cost.values())
    assert metrics["best_of_n/without_public"] == sum(kind == "function" for kind in kinds.values())


@pytest.mark.slow  # tens of seconds (a real study, server or trainer): `make test-all` and CI run it
def test_an_outage_publishes_no_number_and_the_next_run_generates_the_failed_samples(tiny_model, tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "evaluate"))
    from openai_server import Server  # tests/evaluate/openai_server.py: the tiny model behind real HTTP

    spec = write_spec(tmp_path, tiny_model, tokens=8)
    checked = preflight(spec)
    [run_dir] = [d.path for d in materialize(checked.plan, checked.validated, tmp_path / "runs")]
    metrics = run_dir / "outputs" / "metrics.json"

    from engine.evaluate.backends.openai import PROBES

    def evaluate(server, code: int = 0) -> dict:
        args = ["evaluate", "--run-dir", str(run_dir), "--model", "tiny",
                "--base-url", server.base_url]
        assert main(args) == code
        return json.loads(metrics.read_text())["datasets"][0]["metrics"] if code == 0 else {}

    with Server(str(tiny_model), always_fail=True) as down:  # what it serves cannot be told: nothing is asked
        evaluate(down, code=2)
        # the first probe with its retries: a server that cannot answer one is asked nothing more
        assert down.requests == 5 and not metrics.exists()
    with Server(str(tiny_model), fail_after=len(PROBES)) as down:  # the outage begins after the probes
        first = evaluate(down)
    assert first["gen_error_rate"] == 1.0 and first["accepted@1"] == 0.0
    assert check_completion("eval", run_dir).startswith("toy_valid: 42 of 42 samples are faults (42 generations "
                                                        "failed on the server (GEN_ERROR))")
    with Server(str(tiny_model)) as up:
        second = evaluate(up)
        assert up.requests == len(PROBES) + 42  # the probes, and every failed sample once
    assert second["fault_rate"] == 0.0 and second["samples"] == 42
    assert check_completion("eval", run_dir) is None


def test_an_evaluation_that_dies_leaves_no_earlier_summary_for_its_completion_check(tiny_model, tmp_path,
                                                                                   monkeypatch):
    """In a group the completion check, not the exit code, decides: an earlier attempt's
    metrics.json over records this attempt mended would pass it with the old numbers."""
    import pytest

    from engine.evaluate import eval_run

    spec = write_spec(tmp_path, tiny_model)
    checked = preflight(spec)
    [run_dir] = [d.path for d in materialize(checked.plan, checked.validated, tmp_path / "runs")]
    stale = run_dir / "outputs" / "metrics.json"
    stale.parent.mkdir(parents=True, exist_ok=True)
    stale.write_text(eval_run.EvalOutput(run_id="x", datasets=[]).model_dump_json())

    def dies(*args, **kwargs):
        raise RuntimeError("the engine died mid-stream")

    monkeypatch.setattr(eval_run.stages, "generate_and_judge", dies)
    with pytest.raises(RuntimeError):
        eval_run.evaluate_runs([run_dir], str(tiny_model))
    assert not stale.exists()
    assert check_completion("eval", run_dir).startswith("exited 0 but wrote no")
