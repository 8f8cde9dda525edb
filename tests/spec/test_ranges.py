"""Seeds, sizes and counts in range, each refused at its line."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.errors import SpecError
from engine.isolation.validate import validate_spec

SPEC = """\
name: ranges
base_model: tiny-coder
datasets:
  toy_train: {{source: toy, split: train, role: train}}
protocols:
  rollout: {{temperature: 1.0, n: {n}, max_tokens: 64{seed}}}
phases:
  grpo: {{kind: grpo, trainer: {trainer}, train: toy_train, reward: dense, rollout: rollout}}
seeds: {seeds}
"""


def _diagnostics(tmp_path: Path, *, n: int = 4, seeds: str = "[1]", trainer: str = "trl", seed: str = "") -> dict:
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(n=n, seeds=seeds, trainer=trainer, seed=seed))
    with pytest.raises(SpecError) as caught:
        validate_spec(spec, content=False)
    return {d.path: (d.line, d.col, d.message, d.fix) for d in caught.value.diagnostics}


def test_seeds_outside_numpys_range_are_refused_each_at_its_line(tmp_path):
    got = _diagnostics(tmp_path, seeds="[-1, 99999999999999999999999999, 4294967296, true, 1.5]")
    assert got["seeds[0]"][:3] == (9, 9, "seed -1 is outside 0..4294967295, the seeds numpy (which the trainers "
                                         "seed) accepts")
    assert got["seeds[1]"][3] == "use a seed from 0 to 4294967295"
    assert "4294967296" in got["seeds[2]"][2]
    assert got["seeds[3]"][2] == "expected an integer, got True"
    assert got["seeds[4]"][2] == "expected an integer, got 1.5"


def test_the_largest_seed_passes_and_a_protocol_seed_is_held_to_the_same_range(tmp_path):
    got = _diagnostics(tmp_path, seeds="[0, 4294967295]", seed=", seed: -5")
    assert list(got) == ["protocols.rollout.seed"]


@pytest.mark.parametrize("trainer", ["trl", "verl"])
def test_a_grpo_rollout_of_one_sample_is_refused_at_its_n(tmp_path, trainer):
    line, col, message, fix = _diagnostics(tmp_path, n=1, trainer=trainer)["protocols.rollout.n"]
    assert (line, col) == (6, 34)
    assert "a group of one sample has no advantage" in message and "2 or more" in fix


def test_an_empty_section_is_reported_at_its_own_key(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text("name: x\nbase_model: tiny-coder\ndatasets: {}\nphases:\nseeds: [1]\n")
    with pytest.raises(SpecError) as caught:
        validate_spec(spec, content=False)
    [diag] = caught.value.diagnostics
    assert (diag.line, diag.col, diag.message) == (4, 1, "`phases` has no value")


def test_a_mapping_in_hparams_is_located_with_where_it_belongs(tmp_path: Path):
    spec = tmp_path / "s.yaml"
    spec.write_text("name: m\nbase_model: tiny-coder\ndatasets:\n  t: {source: toy, split: train, role: train}\n"
                    "phases:\n  sft:\n    kind: sft\n    trainer: trl\n    train: t\n"
                    "    hparams: {lr_scheduler_kwargs: {min_lr: 1.0e-6}}\nseeds: [1]\n")
    with pytest.raises(SpecError) as caught:
        validate_spec(spec, content=False)
    (diag,) = caught.value.diagnostics  # every branch of the union failed: the error is still reported
    assert (diag.line, diag.path) == (10, "phases.sft.hparams.lr_scheduler_kwargs")
    assert "move `lr_scheduler_kwargs` under `overrides:`" in diag.fix
