"""Isolation rules 1, 2, 4, 5 on roles and uses: direct, through a variant, through an alias; waivers."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.errors import Diagnostic, SpecError
from engine.isolation.rules import RuleReport
from engine.isolation.validate import validate_spec
from engine.spec.validated import ValidatedSpec

ROOT = Path(__file__).resolve().parents[2]
SPECS = ROOT / "tests" / "specs"


def _violations(spec: Path) -> dict[str, Diagnostic]:
    with pytest.raises(SpecError) as info:
        validate_spec(spec, content=False)
    return {d.path: d for d in info.value.diagnostics}


def _rules(found: dict[str, Diagnostic]) -> dict[str, str]:
    return {path: d.rule.split(":")[0] for path, d in found.items()}


def test_rule1_test_set_used_to_select_and_stop_early():
    found = _violations(SPECS / "bad" / "rule1_direct.yaml")
    assert _rules(found) == {"phases.sft.select_on": "1", "phases.grpo.early_stop_on": "1"}
    assert found["phases.sft.select_on"].line == 9
    # HumanEval is test-only because the registry says so, though the spec did not write it
    assert "test-only dataset 'humaneval'" in found["phases.grpo.early_stop_on"].message


def test_rule1_through_a_variant_override():
    found = _violations(SPECS / "bad" / "rule1_variant.yaml")
    assert _rules(found) == {"variants.sft_on_mbpp.train": "1"}


def test_rule1_through_an_alias_of_the_same_file_and_of_the_same_split():
    found = _violations(SPECS / "bad" / "rule1_alias.yaml")
    assert _rules(found) == {"phases.sft.train": "1", "phases.sft.select_on": "1", "datasets.cc_more.role": "1"}
    assert "same data" in found["phases.sft.train"].message and "'held_out'" in found["phases.sft.train"].message


def test_rule2_valid_set_trains_and_builds_pairs():
    found = _violations(SPECS / "bad" / "rule2.yaml")
    assert _rules(found) == {"phases.sft.train": "2", "phases.dpo.pairs_from": "2"}


def test_rule4_evaluation_sets_must_be_frozen():
    found = _violations(SPECS / "bad" / "rule4.yaml")
    assert _rules(found) == {"datasets.mbpp_reg": "4", "datasets.mine": "4"}


def test_rule5_evaluation_protocols_must_match():
    found = _violations(SPECS / "bad" / "rule5.yaml")
    assert _rules(found) == {"phases.base.protocol": "5", "variants.base_greedy.protocol": "5", "phases.bon.n": "5"}


def test_a_waiver_turns_the_error_into_a_recorded_waiver():
    validated = validate_spec(SPECS / "good" / "waived.yaml", content=False)
    [waiver] = validated.waivers
    assert (waiver.rule, waiver.index) == (1, 0)
    assert waiver.reason == "reproducing a paper that selected on test"
    assert waiver.where.endswith("waived.yaml:8:51") and waiver.waiver_at.endswith("waived.yaml:11:5")
    assert "select checkpoints" in waiver.what
    # the second entry waives nothing: a warning naming it
    assert any("allow[1] (rule 2) waives nothing" in w for w in validated.warnings)
    assert validated.summary().endswith("1 waiver")


def test_a_waiver_for_another_phase_does_not_apply(tmp_path: Path):
    text = (SPECS / "bad" / "rule1_variant.yaml").read_text()
    spec = tmp_path / "s.yaml"
    spec.write_text(text + "allow:\n  - {rule: 1, dataset: mbpp_test, phase: sft, reason: wrong phase}\n")
    assert set(_violations(spec)) == {"variants.sft_on_mbpp.train"}
    spec.write_text(text + "allow:\n  - {rule: 1, dataset: mbpp_test, phase: sft_on_mbpp, reason: ablation}\n")
    assert [w.rule for w in validate_spec(spec, content=False).waivers] == [1]


def _flag_train_eval_pairs(validated: ValidatedSpec) -> RuleReport:
    """A rule-3 checker that finds leakage between every (train, test) pair, by name only."""
    report = RuleReport()
    trains = [n for n, d in validated.spec.datasets.items() if d.role.value == "train"]
    tests = [n for n, d in validated.spec.datasets.items() if d.role.value == "test"]
    for train in trains:
        for test in tests:
            waived = [i for i, w in enumerate(validated.spec.allow) if w.rule == 3 and w.datasets == [train, test]]
            if not waived:
                report.errors.append(validated.loaded.diagnostic(("datasets", train), f"{train} overlaps {test}",
                                                                 "deduplicate", rule="3"))
    return report


def test_rule3_hook_errors_are_reported_with_the_rest(tmp_path: Path):
    with pytest.raises(SpecError) as info:
        validate_spec(SPECS / "good" / "minimal.yaml", content_check=_flag_train_eval_pairs)
    assert [(d.path, d.rule) for d in info.value.diagnostics] == [("datasets.cc_train", "3")]


def test_rule3_waiver_left_unused_by_the_content_check_is_a_warning(tmp_path: Path):
    spec = tmp_path / "s.yaml"
    spec.write_text((SPECS / "good" / "minimal.yaml").read_text()
                    + "allow:\n  - {rule: 3, datasets: [cc_train, cc_test], reason: known overlap}\n")
    validated = validate_spec(spec, content_check=_flag_train_eval_pairs)
    assert any("allow[0] (rule 3) waives nothing" in w for w in validated.warnings)
    # without the content check, a rule-3 waiver is not judged
    assert validate_spec(spec, content=False).warnings == []
