"""The failure flywheel for real: SFT memorizes four toy problems, GRPO's rollouts on them are
judged and traced, then a DPO phase trains on hard negatives harvested from GRPO's failures and
an SFT phase mixes in format-repair rows built from them. Pairs, rows, lineage and the pages are
checked on what the runs left."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.runs.lineage import LINEAGE_FILE, RunState, open_lineage
from engine.runs.pipeline import run_spec
from engine.train.flywheel import sha256_file

# SFT, GRPO, two flywheel phases and four evaluations on a CPU: `make test-all` and CI run it
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

TRAIN = "toy/plus_k_12\ntoy/times_k_10\ntoy/mod_k_10\ntoy/sum_plus_k_10\n"
VALID = "toy/plus_k_10\ntoy/times_k_5\ntoy/mod_k_4\ntoy/sum_plus_k_2\n"
CLASSES = "[WRONG_ANSWER, RUNTIME_ERROR, SYNTAX_ERROR, TIMEOUT, NO_CODE, truncated]"
SPEC = """\
name: tiny-flywheel
base_model: {path: MODEL}
datasets:
  toy_train: {source: toy, split: train, role: train, ids: train4.txt}
  toy_valid: {source: toy, split: valid, role: valid, ids: valid4.txt}
protocols:
  greedy: {preset: greedy, max_tokens: 40}
  rollout: {temperature: 1.0, top_p: 1.0, max_tokens: 40, n: 4}
phases:
  sft:
    kind: sft
    trainer: trl
    train: toy_train
    hparams: {learning_rate: 5.0e-3, max_steps: 120, per_device_train_batch_size: 4, save_steps: 120,
              lr_scheduler_type: constant}
  grpo:
    kind: grpo
    from: sft
    trainer: trl
    train: toy_train
    reward: dense
    rollout: rollout
    traces: all
    hparams: {max_steps: 2, per_device_train_batch_size: 8}
  dpo:
    kind: dpo
    from: grpo
    trainer: trl
    pairs_from: {failures: CLASSES, of: grpo, chosen: [harvest, reference]}
    hparams: {max_steps: 2, per_device_train_batch_size: 2}
  sft_repair:
    kind: sft
    from: grpo
    trainer: trl
    train: toy_train
    mix: {repair_of: grpo, classes: CLASSES, share: 0.5, corrected: [repair, reference]}
    hparams: {learning_rate: 1.0e-3, max_steps: 2, per_device_train_batch_size: 4}
seeds: [1]
evaluate:
  every_phase: {datasets: [toy_valid], protocol: greedy}
allow:
  - {rule: 3, datasets: [toy_train, toy_valid], reason: "toy families share one statement template"}
"""


@pytest.fixture(scope="module")
def small_model(tmp_path_factory) -> Path:
    from engine.tinymodel import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("small-model"), hidden=64, layers=2, heads=4, kv_heads=2,
                            vocab_size=512)


def write_spec(root: Path, model: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "train4.txt").write_text(TRAIN)
    (root / "valid4.txt").write_text(VALID)
    spec = root / "spec.yaml"
    spec.write_text(SPEC.replace("MODEL", str(model)).replace("CLASSES", CLASSES))
    return spec


@pytest.fixture(scope="module")
def study(small_model, tmp_path_factory):
    root = tmp_path_factory.mktemp("flywheel")
    outcome = run_spec(write_spec(root, small_model), runs_dir=root / "runs")
    runs = {r.label: r for r in outcome.plan.runs}
    return root / "runs", runs, outcome.result.states


def _dir(runs_dir: Path, run) -> Path:
    return runs_dir / "tiny-flywheel" / run.id


def test_every_run_succeeds(study):
    _, runs, states = study
    assert {label: states[r.id] for label, r in runs.items()} == {label: RunState.succeeded for label in runs}


def test_hard_negatives_come_from_grpo_failures_on_training_problems(study):
    runs_dir, runs, _ = study
    run_dir = _dir(runs_dir, runs["dpo@1"])
    traces = [json.loads(x) for x in (_dir(runs_dir, runs["grpo@1"]) / "traces" / "rollouts.jsonl").read_text().splitlines()]
    failing = {(t["problem_id"], t["completion"]) for t in traces if t["verdict"] != "ACCEPTED"}
    pairs = [json.loads(x) for x in (run_dir / "data" / "pairs.jsonl").read_text().splitlines()]
    report = json.loads((run_dir / "data" / "pairs.report.json").read_text())
    assert pairs and report["pairs"] == len(pairs) == sum(report["pairs_by_class"].values())
    for pair in pairs:  # rejected: a failing GRPO rollout of the class it is counted under
        assert (pair["problem_id"], pair["rejected"]) in failing
        assert pair["rejected_class"] in report["pairs_by_class"]
        assert pair["chosen_verdict"] == "ACCEPTED" and pair["chosen_from"] in ("harvest", "reference")
    harvest = report["harvest"]
    assert harvest["samples"] == len(traces) and harvest["outside_training"] == 0
    assert harvest["of_run"] == runs["grpo@1"].id
    assert set(report["no_chosen"]) <= set(TRAIN.split())


def test_repair_rows_are_failing_answer_feedback_and_a_corrected_answer(study):
    runs_dir, runs, _ = study
    run_dir = _dir(runs_dir, runs["sft_repair@1"])
    rows = [json.loads(x) for x in (run_dir / "data" / "repair_rows.jsonl").read_text().splitlines()]
    report = json.loads((run_dir / "data" / "repair_rows.report.json").read_text())
    assert rows and report["repaired"] == len(rows) == sum(report["corrected_from"].values())
    assert report["tried"] == report["failures"] - report["no_public_tests"] > 0  # the repair loop ran on each
    traces = [json.loads(x) for x in (_dir(runs_dir, runs["grpo@1"]) / "traces" / "rollouts.jsonl").read_text().splitlines()]
    failing = {(t["problem_id"], t["completion"]) for t in traces if t["verdict"] != "ACCEPTED"}
    for row in rows:  # [prompt, the failing rollout, its public-test feedback] -> the corrected answer
        roles = [m["role"] for m in row["prompt"]]
        assert roles[-2:] == ["assistant", "user"] and "public tests" in row["prompt"][-1]["content"]
        assert (row["problem_id"], row["prompt"][-2]["content"]) in failing
        assert row["corrected_from"] in ("repair", "reference")
    assert report["mixed_rows"] / (report["base_rows"] + report["mixed_rows"]) == pytest.approx(0.5, abs=0.1)


def test_the_harvest_is_in_lineage_with_its_sha256_and_source(study):
    runs_dir, runs, _ = study
    grpo = runs["grpo@1"]
    for label in ("dpo@1", "sft_repair@1"):
        run = runs[label]
        assert grpo.id in run.parents and run.config["flywheel"]["of_run"] == grpo.id
        with open_lineage(runs_dir / LINEAGE_FILE, readonly=True) as lineage:
            artifacts = {a.kind: a for a in lineage.artifacts(run.id)}
            edges = {(e["parent"], e["child"]): e["flows"] for e in lineage.db["edges"].rows}
            counts = {m.name: m.value for m in lineage.metrics(run.id) if m.dataset == "flywheel"}
        harvest = artifacts["harvest"]
        assert harvest.source_run == grpo.id and harvest.sha256 == sha256_file(Path(harvest.path))
        assert "failures" in edges[(grpo.id, run.id)]
        assert counts["samples"] > 0 and any(k.startswith("harvested/") for k in counts)
    assert runs["dpo@1"].model_parent == grpo.id


def test_the_pages_show_the_flywheel(study):
    from engine.report.generate import write_reports

    runs_dir, _, _ = study
    [report] = write_reports(runs_dir)
    errors = (report.dir / "errors.md").read_text()
    assert "## The failure flywheel" in errors
    assert "harvested from" in errors and "grpo" in errors
    assert all("could not be built" not in p.read_text() for p in report.pages)
