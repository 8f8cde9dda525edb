"""Trainer settings are checked against their trainer's types and ranges before anything runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.errors import SpecError
from engine.runs.preflight import preflight
from engine.train.setting_types import Expected, value_problem, written, yaml_number

SPEC = """\
name: typed
base_model: tiny-coder
datasets:
  toy_train: {{source: toy, split: train, role: train}}
protocols:
  rollout: {{temperature: 1.0, n: 4, max_tokens: 64}}
phases:
  sft:
    kind: sft
    trainer: trl
    train: toy_train
    hparams: {{{sft}}}
  grpo:
    kind: grpo
    from: sft
    trainer: verl
    train: toy_train
    reward: dense
    rollout: rollout
    hparams: {{{grpo}}}
    overrides: {{{overrides}}}
seeds: [1]
"""


def _problems(tmp_path: Path, sft: str = "", grpo: str = "", overrides: str = "") -> dict[str, str]:
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(sft=sft, grpo=grpo, overrides=overrides))
    with pytest.raises(SpecError) as caught:
        preflight(spec, content=False)
    return {d.path: f"{d.line}:{d.col} {d.message} | fix: {d.fix}" for d in caught.value.diagnostics}


def test_trl_values_of_the_wrong_type_or_range_name_the_line_the_trainer_and_the_field(tmp_path):
    got = _problems(tmp_path, sft='max_steps: forty, learning_rate: "0.001", lr_scheduler_type: cosin, '
                                  'warmup_ratio: 1.5, per_device_train_batch_size: 0, bf16: "true"')
    assert got["phases.sft.hparams.max_steps"].startswith("12:26 'forty' is text: trl's SFTConfig.max_steps takes a whole")
    assert got["phases.sft.hparams.learning_rate"] == (
        "12:48 '0.001' is text (it is quoted): trl's SFTConfig.learning_rate takes a number | "
        "fix: write 1.0e-3 without quotes")
    assert "use one of: linear, cosine," in got["phases.sft.hparams.lr_scheduler_type"]
    assert "must be >= 0 and <= 1" in got["phases.sft.hparams.warmup_ratio"]
    assert "must be >= 1" in got["phases.sft.hparams.per_device_train_batch_size"]
    assert got["phases.sft.hparams.bf16"].endswith("fix: write true without quotes")


def test_verl_values_are_checked_against_the_type_of_verls_default(tmp_path):
    got = _problems(tmp_path, grpo='lr: "1e-6", total_steps: abc',
                    overrides='trainer: {save_freq: ten}, actor_rollout_ref: {actor: {clip_ratio: "0.2"}}')
    assert got["phases.grpo.hparams.lr"].endswith(
        "'1e-6' is text (it is quoted): verl's actor_rollout_ref.actor.optim.lr takes a number or null | "
        "fix: write 1.0e-6 without quotes")
    assert "verl's trainer.total_training_steps takes a whole number" in got["phases.grpo.hparams.total_steps"]
    assert "verl's trainer.save_freq takes a whole number" in got["phases.grpo.overrides.trainer.save_freq"]
    assert got["phases.grpo.overrides.actor_rollout_ref.actor.clip_ratio"].endswith("fix: write 0.2 without quotes")


def test_verl_ranges(tmp_path):
    got = _problems(tmp_path, grpo="lr: 0, train_batch_size: -4, gpu_memory_utilization: 1.5")
    assert "must be > 0" in got["phases.grpo.hparams.lr"]
    assert "must be >= 1" in got["phases.grpo.hparams.train_batch_size"]
    assert "must be > 0 and <= 1" in got["phases.grpo.hparams.gpu_memory_utilization"]


def test_values_of_the_right_type_pass(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(sft="learning_rate: 1.0e-3, max_steps: -1, lr_scheduler_type: cosine",
                                grpo="lr: 1.0e-6, total_steps: 20, entropy_coeff: 0.001",
                                overrides="trainer: {save_freq: 10, test_freq: 10}"))
    assert preflight(spec, content=False).plan.runs


@pytest.mark.parametrize("text,number", [("0.001", 0.001), ("1e-6", 1e-6), ("8", 8), ("1_000", 1000),
                                         ("forty", None), ("true", None), ("", None)])
def test_what_yaml_would_read_as_a_number(text, number):
    assert yaml_number(text) == number


@pytest.mark.parametrize("value,shown", [(0.001, "1.0e-3"), (1e-6, "1.0e-6"), (2.5e-5, "2.5e-5"), (0.2, "0.2"),
                                         (3, "3"), (1e7, "1.0e7")])
def test_numbers_are_suggested_as_yaml_reads_them(value, shown):
    assert written(value) == shown


def test_non_finite_numbers_are_refused():
    assert "not a finite number" in value_problem(float("nan"), Expected(frozenset({"float"})), "lr", "x")[0]


def test_settings_a_researcher_writes_pass(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(
        sft="learning_rate: 1e-5, max_steps: -1, warmup_ratio: 0.1, lr_scheduler_type: cosine_with_min_lr, "
            "gradient_checkpointing: true, logging_steps: 0.1",
        grpo="lr: 1.0e-6, total_steps: 20",
        # verl's own defaults (greedy validation, colocated reward model), a list where the default is
        # null, text where the default is null, and a new key
        overrides="actor_rollout_ref: {rollout: {val_kwargs: {temperature: 0}}}, reward: {reward_model: {nnodes: 0}}, "
                  "global_profiler: {steps: [1, 2]}, trainer: {default_hdfs_dir: hdfs://x}, "
                  "+actor_rollout_ref.model.override_config.attn_implementation: eager"))
    assert preflight(spec, content=False).plan.runs



@pytest.mark.parametrize("torn", ["{not json", "[]", '{"trl.SFTConfig": 5}', '{"trl.SFTConfig": {"lr": 3}}'])
def test_a_torn_trl_type_cache_is_read_again(tmp_path, monkeypatch, torn):
    from engine.spec.model import PhaseKind
    from engine.train import trl_config

    monkeypatch.setattr(trl_config, "cache_root", lambda: tmp_path)
    good = trl_config.trl_field_types(PhaseKind.sft)
    (cache,) = tmp_path.glob("trl-config-types-*.json")
    assert "transformers" not in cache.name and cache.name.count("-") == 4  # trl version and what else it reads
    cache.write_text(torn)
    assert trl_config.trl_field_types(PhaseKind.sft) == good
