"""Training runs for real: every trl phase trains a small model on CPU through the executor and
lineage. SFT first memorizes four toy problems (so its samples pass some tests), then DPO, GRPO,
repair and RAFT start from it; a kill -9 mid-training resumes from the last checkpoint."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from engine.evaluate.model_key import MANIFEST, model_key
from engine.runs.completion import check_completion
from engine.runs.lineage import LINEAGE_FILE, RunState, open_lineage
from engine.runs.materialize import materialize
from engine.runs.pipeline import run_spec
from engine.runs.preflight import preflight
from engine.train.outcome import logged_steps, read_outcome

# trains every trl phase on a CPU: minutes (`make test-all` and CI run it); the module's study is
# built in the first test's setup, over 300 s beside CI's other heavy tests
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

TRAIN = "toy/plus_k_12\ntoy/times_k_10\ntoy/mod_k_10\ntoy/sum_plus_k_10\n"
VALID = "toy/plus_k_10\ntoy/times_k_5\ntoy/mod_k_4\ntoy/sum_plus_k_2\n"
SPEC = """\
name: tiny-train
base_model: {{path: {model}}}
datasets:
  toy_train: {{source: toy, split: train, role: train, ids: train4.txt}}
  toy_valid: {{source: toy, split: valid, role: valid, ids: valid4.txt}}
protocols:
  greedy: {{preset: greedy, max_tokens: 40}}
  rollout: {{temperature: 0.5, top_p: 1.0, max_tokens: 40, n: 4}}
phases:
  sft:
    kind: sft
    trainer: trl
    train: toy_train
    select_on: toy_valid
    hparams: {{learning_rate: 5.0e-3, max_steps: {sft_steps}, per_device_train_batch_size: 4, save_steps: {save}}}
{more}seeds: [1]
{tracking}evaluate:
  every_phase: {{datasets: [toy_valid], protocol: greedy}}
allow:
  - {{rule: 3, datasets: [toy_train, toy_valid], reason: "toy families share one statement template"}}
"""
FROM_SFT = """\
  dpo:
    kind: dpo
    from: sft
    trainer: trl
    pairs_from: toy_train
    pairs: {k: 4}
    hparams: {max_steps: 2, per_device_train_batch_size: 2}
  grpo:
    kind: grpo
    from: sft
    trainer: trl
    train: toy_train
    reward: dense
    rollout: rollout
    early_stop: {timeout_rate: 0.5}
    traces: all
    hparams: {max_steps: 2, per_device_train_batch_size: 8}
  repair:
    kind: repair
    from: sft
    trainer: trl
    train: toy_train
    reward: dense
    rollout: rollout
    rounds: 2
    round_penalty: 0.05
    repair_return: sum
    traces: all
    hparams: {max_steps: 2, per_device_train_batch_size: 8}
  raft:
    kind: raft
    from: sft
    train: toy_train
    rollout: rollout
    cycles: 2
    samples_per_prompt: 4
    curriculum: difficulty
    hparams: {max_steps: 2, per_device_train_batch_size: 4}
"""


def write_spec(root: Path, model: Path, *, sft_steps: int = 80, save: int = 40, more: str = FROM_SFT,
               tracking: str = "") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "train4.txt").write_text(TRAIN)
    (root / "valid4.txt").write_text(VALID)
    spec = root / "spec.yaml"
    spec.write_text(SPEC.format(model=model, sft_steps=sft_steps, save=save, more=more, tracking=tracking))
    return spec


@pytest.fixture(scope="module")
def small_model(tmp_path_factory) -> Path:
    """Big enough to memorize four short answers in 80 steps (about 10 s of SFT)."""
    from engine.tinymodel import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("small-model"), hidden=64, layers=2, heads=4, kv_heads=2,
                            vocab_size=512)


@pytest.fixture(scope="module")
def study(small_model, tmp_path_factory):
    root = tmp_path_factory.mktemp("study")
    # tensorboard: the user's own tracker, passed through to trl, offline like every tracker here.
    outcome = run_spec(write_spec(root, small_model, tracking="tracking: {tensorboard: {}}\n"), runs_dir=root / "runs")
    runs = {r.label: r for r in outcome.plan.runs}
    return root / "runs", runs, outcome.result.states


def _dir(runs_dir: Path, run) -> Path:
    return runs_dir / "tiny-train" / run.id


def test_every_trl_phase_trains_hands_off_and_is_recorded(study):
    runs_dir, runs, states = study
    assert {label: states[r.id] for label, r in runs.items()} == {label: RunState.succeeded for label in runs}
    with open_lineage(runs_dir / LINEAGE_FILE, readonly=True) as lineage:
        for label in ("sft@1", "dpo@1", "grpo@1", "repair@1", "raft@1"):
            run_dir = _dir(runs_dir, runs[label])
            outcome = read_outcome(run_dir)
            assert outcome.chosen is not None and (run_dir / "model" / "config.json").is_file(), label
            assert model_key(str(run_dir / "model")) == json.loads((run_dir / "model" / MANIFEST).read_text())["key"]
            assert max(r["step"] for r in logged_steps(run_dir)) == outcome.expected_steps, label
            series = {m.name for m in lineage.metrics(runs[label].id) if m.dataset == "train" and m.step >= 0}
            assert {"loss", "lr", "step_time_s"} <= series, label
            assert "model" in {a.kind for a in lineage.artifacts(runs[label].id)}, label
        grpo = {m.name for m in lineage.metrics(runs["grpo@1"].id)}
        assert {"reward_mean", "judge_s", "timeout_rate"} <= grpo
        assert "pairs" in {a.kind for a in lineage.artifacts(runs["dpo@1"].id)}
        assert {m.name for m in lineage.metrics(runs["raft@1"].id)} >= {"raft/acceptance", "raft/rows"}


def test_the_users_tracker_gets_the_curves_too(study):
    runs_dir, runs, _ = study
    assert list((_dir(runs_dir, runs["sft@1"]) / "logs" / "tensorboard").rglob("events.out.tfevents.*"))


def test_the_result_pages_of_a_real_study(study):
    from engine.report.generate import write_reports

    runs_dir, _, _ = study
    [report] = write_reports(runs_dir)
    results = (report.dir / "results.md").read_text()
    for unit in ("| sft ", "| dpo ", "| grpo ", "| repair ", "| raft "):
        assert unit in results
    curves = (report.dir / "curves.md").read_text()
    assert "img/curve-reward_mean.png" in curves and "img/curve-loss.png" in curves
    assert all("could not be built" not in p.read_text() for p in report.pages)


def test_children_start_from_the_parent_model(study):
    runs_dir, runs, _ = study
    launch = (_dir(runs_dir, runs["grpo@1"]) / "launch.sh").read_text()
    assert f"--model {_dir(runs_dir, runs['sft@1']) / 'model'}" in launch


def test_selection_picks_the_checkpoint_the_evaluations_rank_best(study):
    runs_dir, runs, _ = study
    run_dir = _dir(runs_dir, runs["sft@1"])
    outcome = read_outcome(run_dir)
    assert [c.step for c in outcome.checkpoints] == [40, 80]
    for checkpoint in outcome.checkpoints:  # each score is an evaluation on disk
        assert (run_dir / "selection" / f"step-{checkpoint.step}" / "samples" / "toy_valid.jsonl").is_file()
    best = max(outcome.checkpoints, key=lambda c: (c.metrics["toy_valid"]["accepted@1"],
                                                   c.metrics["toy_valid"]["pass_ratio_mean"], c.step))
    assert outcome.chosen.step == best.step and outcome.chosen.path == best.path


def test_dpo_pairs_come_from_judged_samples_of_the_parent(study):
    runs_dir, runs, _ = study
    run_dir = _dir(runs_dir, runs["dpo@1"])
    pairs = [json.loads(line) for line in (run_dir / "data" / "pairs.jsonl").read_text().splitlines()]
    report = json.loads((run_dir / "data" / "pairs.report.json").read_text())
    assert pairs and report["pairs"] == len(pairs) and report["samples"] == 16
    assert all(p["chosen_pass_ratio"] - p["rejected_pass_ratio"] >= 0.3 for p in pairs)


def test_rl_rollouts_are_traced_with_their_rewards(study):
    runs_dir, runs, _ = study
    grpo = [json.loads(x) for x in (_dir(runs_dir, runs["grpo@1"]) / "traces" / "rollouts.jsonl").read_text().splitlines()]
    assert {t["step"] for t in grpo} == {1, 2} and len(grpo) == 16  # traces: all (8 completions a step)
    assert all(t["reward"] == t["pass_ratio"] and t["verdict"] and t["tokens"] for t in grpo)
    repair = [json.loads(x) for x in (_dir(runs_dir, runs["repair@1"]) / "traces" / "rollouts.jsonl").read_text().splitlines()]
    for t in repair:  # return B: summed pass ratios + 0.2·accepted − 0.05 per extra round
        if t["rounds"] == 1:
            assert t["reward"] == pytest.approx(t["pass_ratio"] + 0.2 * (t["verdict"] == "ACCEPTED"))
    assert any(t["rounds"] == 2 for t in repair)


def test_raft_records_each_cycle_and_writes_the_curriculum_order(study):
    runs_dir, runs, _ = study
    run_dir = _dir(runs_dir, runs["raft@1"])
    cycles = read_outcome(run_dir).cycles
    assert [int(c["cycle"]) for c in cycles] == [1, 2] and all(0 < c["acceptance"] <= 1 for c in cycles)
    order = json.loads((run_dir / "data" / "order.json").read_text())
    assert sorted(order["order"]) == sorted(TRAIN.split()) and order["basis"] == "dataset difficulty"


def test_a_run_that_trained_zero_steps_fails_its_completion_check(study, tmp_path):
    runs_dir, runs, _ = study
    copy = tmp_path / "sft"
    shutil.copytree(_dir(runs_dir, runs["sft@1"]), copy)
    for log in (copy / "logs").glob("metrics.*.jsonl"):
        log.write_text("")
    assert check_completion("sft", copy) == "exited 0 but its metric log (logs/metrics.*.jsonl) shows zero trained steps"
    shutil.rmtree(copy / "model")
    (copy / "model").mkdir()
    (copy / "model" / "config.json").write_text("{}")
    (copy / "model" / "model.safetensors").write_bytes(b"not weights")
    [log] = list((copy / "logs").glob("metrics.*.jsonl"))
    log.write_text("".join(json.dumps({"step": s, "data": {"loss": 1.0}}) + "\n" for s in range(1, 81)))
    assert "model/model.safetensors does not load" in check_completion("sft", copy)


def test_kill_9_mid_training_resumes_from_the_last_checkpoint(tiny_model, tmp_path):
    spec = write_spec(tmp_path, tiny_model, sft_steps=60, save=10, more="")
    checked = preflight(spec)
    [sft] = [d.path for d in materialize(checked.plan, checked.validated, tmp_path / "runs") if "sft" in d.run.label
             and d.run.kind.value == "sft"]
    env = {**os.environ, "RLVR_PYTHON": os.environ.get("RLVR_PYTHON", _python())}
    first = subprocess.Popen(["bash", "launch.sh"], cwd=sft, env={**env, "RLVR_ATTEMPT": "1"},
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 120
    while not (sft / "checkpoints" / "checkpoint-20" / "trainer_state.json").exists() and time.time() < deadline:
        time.sleep(0.2)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    assert not (sft / "model").exists()
    second = subprocess.run(["bash", "launch.sh"], cwd=sft, env={**env, "RLVR_ATTEMPT": "2"},
                            capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr[-2000:]
    assert "resuming from checkpoints/checkpoint-" in second.stdout
    steps = [row["step"] for row in logged_steps(sft)]
    assert steps == list(range(1, 61))  # the curve continues: no step twice, none missing
    resumed = [json.loads(x)["step"] for x in (sft / "logs" / "metrics.2.jsonl").read_text().splitlines()]
    assert resumed[0] > 20 and check_completion("sft", sft) is None


def _python() -> str:
    import sys

    return sys.executable
