"""`preflight`: every problem of every stage in one report (what `rlvr-run validate` prints)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.cli import main
from engine.errors import SpecError
from engine.runs.preflight import preflight

SPEC = Path(__file__).resolve().parent / "golden" / "spec.yaml"


def _broken(tmp_path: Path, *replacements: tuple[str, str]) -> Path:
    text = SPEC.read_text()
    for old, new in replacements:
        assert old in text
        text = text.replace(old, new)
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return path


HPARAM_TYPO = ("hparams: {lr: 1.0e-6}", "hparams: {lrr: 1.0e-6}")
OVERRIDE_TYPO = ("trainer: {save_freq: 20}", "trainer: {save_freqq: 20}")
ISOLATION = ("pairs_from: cc_train", "pairs_from: humaneval")  # rule 1: a test set builds pairs


def test_a_misspelled_hyperparameter_does_not_hide_a_misspelled_override(tmp_path):
    with pytest.raises(SpecError) as err:
        preflight(_broken(tmp_path, HPARAM_TYPO, OVERRIDE_TYPO), content=False)
    messages = [d.message for d in err.value.diagnostics]
    assert any("unknown hyperparameter(s) lrr" in m for m in messages)
    assert any("Could not override 'trainer.save_freqq'" in m for m in messages)


def test_isolation_and_trainer_problems_come_in_one_report(tmp_path):
    with pytest.raises(SpecError) as err:
        preflight(_broken(tmp_path, ISOLATION, OVERRIDE_TYPO), content=False)
    paths = {d.path for d in err.value.diagnostics}
    assert "phases.grpo.overrides.trainer.save_freqq" in paths
    assert any(p.startswith("phases.dpo.pairs_from") for p in paths)


def test_validate_refuses_a_misspelled_verl_override(tmp_path, capsys):
    assert main(["validate", "--no-content", str(_broken(tmp_path, OVERRIDE_TYPO))]) == 1
    assert "save_freqq" in capsys.readouterr().err
