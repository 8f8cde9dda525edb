"""Checkpoint selection never reads a missing metric as 0: `select_metric` is checked when the
spec is validated (known name, available for the trainer and the select protocol, did-you-mean,
its spec line); at run time a missing metric is an error; verl ranks by it as trl does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.errors import SpecError
from engine.runs.preflight import preflight
from engine.spec.phases import EarlyStopSpec
from engine.train.early_stop import early_stop_reason
from engine.train.outcome import CheckpointScore, TrainingOutcome
from engine.train.select_metric import MissingMetric, metric_value
from engine.train.verl_finish import finish

SPEC = """\
name: sel
base_model: tiny-coder
datasets:
  toy_train: {source: toy, split: train, role: train, ids: registry/idlists/toy_train_196.txt}
  toy_valid: {source: toy, split: valid, role: valid, ids: registry/idlists/toy_valid_42.txt}
protocols:
  greedy: {preset: greedy, max_tokens: 64, prompt: short_chat}
phases:
  base: {kind: eval}
  sft:
    kind: sft
    from: base
    trainer: TRAINER
    train: toy_train
    select_on: toy_valid
    select_metric: METRIC
    hparams: {learning_rate: 1.0e-3, max_steps: 2}
seeds: [1]
evaluate:
  every_phase: {datasets: [toy_valid], protocol: greedy}
"""


def _diagnostic(tmp_path: Path, metric: str, trainer: str = "trl", edit: tuple[str, str] = ("", "")):
    spec = tmp_path / "sel.yaml"
    spec.write_text(SPEC.replace("METRIC", metric).replace("TRAINER", trainer).replace(*edit))
    with pytest.raises(SpecError) as info:
        preflight(spec, content=False)
    [diagnostic] = [d for d in info.value.diagnostics if d.path.endswith("select_metric")]
    return diagnostic


def test_an_unknown_select_metric_is_refused_at_its_line_with_a_suggestion(tmp_path):
    found = _diagnostic(tmp_path, "acepted@1")
    assert found.path == "phases.sft.select_metric" and found.line == 16
    assert "unknown select_metric 'acepted@1' (did you mean 'accepted@1'?)" in found.message


def test_pass_at_k_needs_k_samples_in_the_select_protocol(tmp_path):
    found = _diagnostic(tmp_path, "pass@4")
    assert "needs 4 samples per problem" in found.message and "'greedy' (n = 1)" in found.message


def test_a_select_metric_that_ranks_nothing_is_refused(tmp_path):
    found = _diagnostic(tmp_path, "accepted@1", edit=("    select_on: toy_valid\n", ""))
    assert "ranks nothing" in found.message


def test_known_metrics_pass(tmp_path):
    spec = tmp_path / "sel.yaml"
    spec.write_text(SPEC.replace("METRIC", "pass_ratio_mean").replace("TRAINER", "trl"))
    preflight(spec, content=False)


def _scores(values: list[dict]) -> TrainingOutcome:
    return TrainingOutcome(trainer="trl", checkpoints=[
        CheckpointScore(step=10 * (i + 1), path=f"c{i}", metrics={"v": m}) for i, m in enumerate(values)])


def test_a_checkpoint_missing_the_metric_is_an_error_not_a_zero():
    outcome = _scores([{"accepted@1": 0.5}, {"accepted@1": 0.4}, {}, {"accepted@1": 0.3}])
    with pytest.raises(MissingMetric, match="checkpoint at step 30 has no 'accepted@1' on 'v'"):
        early_stop_reason(outcome, ["v"], "accepted@1", EarlyStopSpec(patience=2))
    with pytest.raises(MissingMetric):
        metric_value({"v": {"accepted@1": 1.0}}, "v", "pass_ratio_mean", 10)


def _verl_run(tmp_path: Path, select_metric: str, logged: dict[int, dict]) -> Path:
    (tmp_path / "config.yaml").write_text("run_id: r\nkind: grpo\nbase_model: {path: m}\ndatasets: {}\n"
                                          f"select_metric: {select_metric}\n")
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "metrics.1.jsonl").write_text(
        "".join(json.dumps({"step": s, "data": d}) + "\n" for s, d in logged.items()))
    for step in logged:
        (tmp_path / "checkpoints" / f"global_step_{step}").mkdir(parents=True)
    return tmp_path


ACC, RATIO = "val-core/rlvr/toy/acc/mean@1", "val-aux/rlvr/toy/pass_ratio/mean@1"


def test_verl_chooses_by_the_select_metric_like_trl(tmp_path):
    run = _verl_run(tmp_path, "pass_ratio_mean", {10: {ACC: 0.5, RATIO: 0.6}, 20: {ACC: 0.4, RATIO: 0.8}})
    chosen = finish(run).chosen
    assert chosen.step == 20 and "best pass_ratio_mean" in chosen.why  # accepted@1 would pick step 10


def test_verl_refuses_to_rank_a_step_without_the_metric(tmp_path):
    run = _verl_run(tmp_path, "pass_ratio_mean", {10: {ACC: 0.5, RATIO: 0.6}, 20: {ACC: 0.9}})
    with pytest.raises(SystemExit, match="step 20 logged no 'pass_ratio_mean'"):
        finish(run)


def test_verl_accepts_only_what_its_validation_logs(tmp_path):
    found = _diagnostic(tmp_path, "accepted@1", trainer="verl")
    assert "a verl SFT run ranks its checkpoints by validation loss" in found.message


def test_pass_at_k_the_checkpoint_summary_never_reports_is_refused(tmp_path):
    # n = 4 reports pass@1, pass@2: pass@3 would be missing from every scored checkpoint
    found = _diagnostic(tmp_path, "pass@3", edit=("prompt: short_chat}", "prompt: short_chat, n: 4, temperature: 0.8}"))
    assert "'pass@3' is not among the pass@k" in found.message and "pass@1, pass@2" in found.fix


class _Answers:
    """A FAKE backend (no model here): every sample is the problem's reference program."""

    name = "fake"

    def __init__(self, programs: list[str]) -> None:
        self.programs = programs

    def stream(self, requests):
        from engine.evaluate.backends.base import Generation

        for i, request in enumerate(requests):
            yield i, [Generation(text=f"```python\n{self.programs[i]}```", prompt_tokens=1, completion_tokens=1,
                                 finish_reason="stop", latency_s=0.0, seed=0)
                      for _ in range(request.decoding.n)]

    def close(self) -> None:
        pass


def test_a_scored_checkpoint_reports_the_pass_at_k_its_select_protocol_allows(tmp_path):
    from ruamel.yaml import YAML

    from engine.data.toy import toy_problems
    from engine.evaluate.score import score_model
    from engine.plan.frozen import read_frozen_run

    config = {"run_id": "r", "kind": "sft", "base_model": {"path": "tiny", "chat": True},
              "datasets": {"toy_valid": {"source": "toy", "split": "valid", "role": "valid", "uses": ["select"]}},
              "protocols": {"select": {"name": "sampled", "prompt": "short_chat", "n": 2, "temperature": 0.8}}}
    with (tmp_path / "config.yaml").open("w") as handle:
        YAML(typ="safe").dump(config, handle)
    problems = toy_problems("valid", 0)
    backend = _Answers([p.solutions[0] for p in problems])
    [scored] = score_model(tmp_path, "tiny", read_frozen_run(tmp_path), protocol="select", datasets=["toy_valid"],
                           out_dir=tmp_path / "selection", backend=backend)
    assert metric_value({"toy_valid": scored.metrics}, "toy_valid", "pass@2", 10) == 1.0


def _early_stop_diagnostic(tmp_path: Path, kind_edit: tuple[str, str], phase_edit: tuple[str, str]):
    spec = tmp_path / "sel.yaml"
    spec.write_text(SPEC.replace("    select_metric: METRIC\n", "").replace("TRAINER", "verl")
                    .replace(*kind_edit).replace(*phase_edit))
    with pytest.raises(SpecError) as info:
        preflight(spec, content=False)
    return [d for d in info.value.diagnostics if d.path.endswith("early_stop_on")]


def test_verl_refuses_an_early_stop_set_that_is_not_its_select_set(tmp_path):
    # verl SFT validates select_on alone: early stopping would read toy_valid's loss, not toy_train's
    [found] = _early_stop_diagnostic(tmp_path, ("", ""), ("    select_on: toy_valid\n",
                                                          "    select_on: toy_valid\n    early_stop_on: toy_train\n"))
    assert found.path == "phases.sft.early_stop_on"
    assert "early_stop_on 'toy_train' is not select_on ('toy_valid')" in found.message
    # without select_on, trl keeps the last checkpoint; verl would choose by the early-stop set
    [found] = _early_stop_diagnostic(tmp_path, ("", ""), ("    select_on: toy_valid\n",
                                                          "    early_stop_on: toy_valid\n"))
    assert "is not select_on (unset)" in found.message


def test_verl_with_one_validation_set_passes(tmp_path):
    spec = tmp_path / "sel.yaml"
    spec.write_text(SPEC.replace("    select_metric: METRIC\n", "").replace("TRAINER", "verl")
                    .replace("    select_on: toy_valid\n", "    select_on: toy_valid\n    early_stop_on: toy_valid\n")
                    .replace("{learning_rate: 1.0e-3, max_steps: 2}", "{lr: 1.0e-3, total_steps: 2}"))
    preflight(spec, content=False)
