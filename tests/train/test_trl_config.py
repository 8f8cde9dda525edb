"""trl hyperparameters are fields of the installed trl's config classes, checked at validate time."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.errors import SpecError
from engine.runs.preflight import preflight
from engine.spec.model import PhaseKind
from engine.train.trl_config import key_problem, trl_args, trl_field_types

SPEC = """\
name: trl-hparams
base_model: {{path: {model}}}
datasets:
  toy_train: {{source: toy, split: train, role: train}}
phases:
  sft:
    kind: sft
    trainer: trl
    train: toy_train
    hparams: {{{hparams}}}
seeds: [1]
"""


def _spec(tmp_path: Path, hparams: str) -> Path:
    (tmp_path / "model").mkdir(exist_ok=True)
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC.format(model=tmp_path / "model", hparams=hparams))
    return path


def test_a_misspelled_trl_hyperparameter_names_the_spec_line_and_the_field(tmp_path):
    with pytest.raises(SpecError) as caught:
        preflight(_spec(tmp_path, "lr: 1.0e-5, gradient_accumulation_step_: 4"), content=False)
    text = str(caught.value)
    assert "spec.yaml:10:" in text and "unknown trl hyperparameter `gradient_accumulation_step_`" in text
    assert "did you mean 'gradient_accumulation_steps'" in text and "not a field of SFTConfig" in text


def test_fields_rlvr_run_owns_are_refused_with_the_reason(tmp_path):
    with pytest.raises(SpecError, match=r"`output_dir` is set by rlvr-run \(checkpoints go to the run directory\)"):
        preflight(_spec(tmp_path, "output_dir: /tmp/x"), content=False)


def test_known_fields_and_aliases_pass_and_map():
    fields = frozenset(trl_field_types(PhaseKind.grpo))
    assert {"num_generations", "beta", "learning_rate"} <= fields
    assert key_problem("kl_coef", PhaseKind.grpo, fields) is None
    assert key_problem("beta", PhaseKind.sft, frozenset(trl_field_types(PhaseKind.sft))) is not None  # a DPO/GRPO field
    assert trl_args({"hparams": {"lr": 1e-4, "kl_coef": 0.02, "epochs": 2}}, PhaseKind.grpo) == {
        "learning_rate": 1e-4, "beta": 0.02, "num_train_epochs": 2}


def test_verl_fsdp_monkey_patch_imports_with_the_installed_trl():
    """verl's apply_monkey_patch imports this whenever trl is importable: trl 1.13+ removed it."""
    try:
        from trl.experimental.ppo import AutoModelForCausalLMWithValueHead  # noqa: F401
    except ImportError:
        from trl import AutoModelForCausalLMWithValueHead  # noqa: F401
