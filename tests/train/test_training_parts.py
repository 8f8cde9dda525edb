"""The pure parts of training: the repair return, early stopping, curves, verl's checkpoint choice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.spec.phases import EarlyStopSpec
from engine.train.curves import curves
from engine.train.outcome import (
    CheckpointScore,
    TrainingOutcome,
    logged_steps,
    metric_logs,
    read_outcome,
)
from engine.train.rollout_reward import repair_return
from engine.train.early_stop import early_stop_reason
from engine.train.verl_finish import finish


def test_repair_returns_a_and_b():
    assert repair_return([0.5], True, kind="last", penalty=0.1) == pytest.approx(0.7)
    assert repair_return([0.2, 1.0], True, kind="last", penalty=0.1) == pytest.approx(1.1)
    assert repair_return([0.2, 0.6], False, kind="sum", penalty=0.05) == pytest.approx(0.75)


def _outcome(values: list[float]) -> TrainingOutcome:
    return TrainingOutcome(trainer="trl", checkpoints=[
        CheckpointScore(step=10 * (i + 1), path=f"c{i}", metrics={"v": {"accepted@1": v}}) for i, v in enumerate(values)])


def test_early_stop_after_patience_checkpoints_without_a_gain():
    stop = EarlyStopSpec(patience=2, min_delta=0.01)
    assert early_stop_reason(_outcome([0.1, 0.3, 0.3]), ["v"], "accepted@1", stop) is None
    assert early_stop_reason(_outcome([0.1, 0.3, 0.305, 0.29]), ["v"], "accepted@1", stop).startswith(
        "accepted@1 on v did not improve on 0.300 for 2 checkpoint(s)")
    assert early_stop_reason(_outcome([0.1, 0.3, 0.3, 0.4]), ["v"], "accepted@1", stop) is None
    assert early_stop_reason(_outcome([0.1, 0.1, 0.1]), [], "accepted@1", stop) is None


def _verl_log(run_dir: Path, attempt: str, rows: list[tuple[int, dict]]) -> None:
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    (run_dir / "logs" / f"metrics.{attempt}.jsonl").write_text(
        "".join(json.dumps({"step": s, "data": d}) + "\n" for s, d in rows))


def test_verl_file_logs_become_series_and_a_resumed_attempt_continues(tmp_path):
    _verl_log(tmp_path, "1", [(1, {"actor/pg_loss": 0.5, "critic/score/mean": 0.1, "timing_s/step": 9.0}),
                              (2, {"actor/pg_loss": 0.4, "critic/score/mean": 0.2})])
    _verl_log(tmp_path, "2", [(2, {"actor/pg_loss": 0.45, "critic/score/mean": 0.25}),
                              (3, {"actor/pg_loss": 0.3, "val-core/rlvr/toy/acc/mean@1": 0.5})])
    assert [r["step"] for r in logged_steps(tmp_path)] == [1, 2, 3]
    points = {(p.step, p.series): p.value for p in curves(tmp_path)}
    assert points[(2, "loss")] == 0.45 and points[(2, "reward_mean")] == 0.25  # the resumed attempt's value
    assert points[(1, "step_time_s")] == 9.0 and points[(3, "val/rlvr/toy/acc/mean@1")] == 0.5


def test_attempt_10_replaces_what_attempt_2_logged_not_the_reverse(tmp_path):
    _verl_log(tmp_path, "2", [(5, {"actor/pg_loss": 0.9})])
    _verl_log(tmp_path, "10", [(5, {"actor/pg_loss": 0.1})])
    _verl_log(tmp_path, "20261126T120000Z", [(6, {"actor/pg_loss": 0.05})])  # a script started by hand, later
    assert [p.name for p in metric_logs(tmp_path)] == ["metrics.2.jsonl", "metrics.10.jsonl",
                                                       "metrics.20261126T120000Z.jsonl"]
    assert logged_steps(tmp_path)[0]["data"]["actor/pg_loss"] == 0.1


def test_verl_finish_picks_the_best_validated_saved_step(tmp_path):
    (tmp_path / "config.yaml").write_text("run_id: r\nkind: grpo\nbase_model: {path: m}\ndatasets: {}\n"
                                          "hparams: {total_steps: 30}\n")
    for step in (10, 20, 30):
        (tmp_path / "checkpoints" / f"global_step_{step}").mkdir(parents=True)
    acc = "val-core/rlvr/toy/acc/mean@1"
    _verl_log(tmp_path, "1", [(s, {"actor/pg_loss": 1.0, **({acc: v} if v is not None else {})})
                              for s, v in ((10, 0.2), (15, 0.9), (20, 0.5), (30, 0.4))])
    outcome = finish(tmp_path)
    assert outcome.chosen.step == 20 and outcome.expected_steps == 30  # 15 was validated but never saved
    assert read_outcome(tmp_path).chosen.path == "checkpoints/global_step_20"


def test_the_verl_repair_agent_loop_registers_with_verl(monkeypatch):
    pytest.importorskip("uvicorn")  # verl's agent loop imports its server stack (the gpu extra)
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry

    import engine.train.verl_repair_loop  # noqa: F401  (what VERL_USE_EXTERNAL_MODULES imports)
    from engine.train.verl_overrides import REPAIR_AGENT_LOOP, REPAIR_LOOP_MODULE

    assert REPAIR_LOOP_MODULE == "engine.train.verl_repair_loop"
    assert _agent_loop_registry[REPAIR_AGENT_LOOP]["_target_"] == "engine.train.verl_repair_loop.RepairAgentLoop"
