"""A planned study priced for what its flywheel runs do, its detectable differences against the
controls the pages use, and a reward on the N most demanding tests priced at N tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.isolation.validate import validate_spec
from engine.plan.expand import plan
from engine.price.profiles import load_profile
from engine.price.study import price_plan
from engine.spec.registry import find_registry, load_registry

ROOT = Path(__file__).resolve().parents[2]

# specs/matrix.yaml's phases, plus two flywheels off GRPO: a DPO on its TIMEOUT failures that
# starts from the base model, and an SFT with format-repair rows of its SYNTAX_ERROR failures
EXTRA = """
  dpo_fw:
    kind: dpo
    from: base
    trainer: trl
    pairs_from: {failures: [TIMEOUT], of: grpo, chosen: [harvest, reference]}
    hparams: {lr: 5.0e-7, epochs: 1, beta: 0.1, per_device_batch_size: 2, gradient_accumulation_steps: 8}
    resources: {gpus: 8}

  sft_fw:
    kind: sft
    from: grpo
    trainer: trl
    train: cc_train
    mix: {repair_of: grpo, classes: [SYNTAX_ERROR], share: 0.1}
    hparams: {learning_rate: 1.0e-5, num_train_epochs: 1, per_device_train_batch_size: 2}
    resources: {gpus: 8}

variants:"""


def _priced(tmp_path: Path, text: str):
    spec = tmp_path / "matrix.yaml"
    spec.write_text(text, encoding="utf-8")
    validated = validate_spec(spec, content=False, registry=load_registry(find_registry(ROOT / "specs")))
    return price_plan(plan(validated), validated, gpu_type="h100", draws=1)


@pytest.fixture(scope="module")
def priced(tmp_path_factory):
    text = (ROOT / "specs" / "matrix.yaml").read_text(encoding="utf-8").replace("\nvariants:", EXTRA, 1)
    return _priced(tmp_path_factory.mktemp("fw"), text)


def _runs(priced, unit: str):
    return [r for r in priced.forecast.runs if r.unit == unit and r.kind != "eval"]


def test_a_flywheel_dpo_is_priced_for_the_pairs_it_will_train_on(priced):
    dpo = _runs(priced, "dpo_fw")[0]
    # cc_train's problems × 0.6 failing, each with a chosen answer (reference), 128 pairs a step
    assert dpo.steps > 10 and dpo.parts["update"] > 60  # was 1 step: no `pairs` dataset, 0 problems
    assert any("dpo_fw" in n and "flywheel DPO" in n and "pairs" in n for n in priced.forecast.notes)


def test_a_flywheel_sfts_repair_sampling_is_priced(priced):
    sft = _runs(priced, "sft_fw")[0]
    assert sft.parts.get("generate", 0) > 60 and sft.parts.get("judge", 0) > 0  # an SFT generates nothing else
    assert any("sft_fw" in n and "repair sampling" in n for n in priced.forecast.notes)


def test_a_flywheel_sft_corrected_by_references_is_priced_for_its_feedback_and_reference_judging(tmp_path):
    """`corrected: [reference]`: no repair tries, but every failure is still judged for its feedback
    and each reference before it stands as the correction; none of that was priced."""
    only = EXTRA.replace("share: 0.1}", "share: 0.1, corrected: [reference]}")
    text = (ROOT / "specs" / "matrix.yaml").read_text(encoding="utf-8").replace("\nvariants:", only, 1)
    sft = _runs(_priced(tmp_path, text), "sft_fw")[0]
    assert sft.parts.get("judge", 0) > 0 and sft.parts.get("generate", 0) == 0


def test_every_detectable_difference_is_against_the_pages_control(priced):
    found = {(c.kind, c.unit, c.control) for c in priced.comparisons}
    assert ("parent", "dpo_fw", "base") in found  # its `from:`, not grpo, whose failures it harvests
    assert not any(c.unit == "dpo_fw" and c.control == "grpo" for c in priced.comparisons)
    # a variant: against its phase (the ablation) and against its own `from:` (the versus-parent table)
    assert {("ablation", "dpo/dpo_flywheel", "dpo"), ("parent", "dpo/dpo_flywheel", "grpo"),
            ("parent", "grpo/dpo_grpo", "dpo")} <= found


def test_a_reward_on_the_most_demanding_tests_is_priced_at_that_many_timeouts(tmp_path, priced):
    text = (ROOT / "specs" / "matrix.yaml").read_text(encoding="utf-8").replace(
        "rollout: {preset: rollout_8, max_tokens: 2048}", "rollout: {preset: rollout_8, max_tokens: 2048, "
        "tests: {most_demanding: 15}}", 1)
    fifteen = _priced(tmp_path, text)
    judge = lambda p: next(r for r in p.forecast.runs if r.unit == "grpo").parts["judge"]  # noqa: E731
    # a dense reward: every test runs. All of a CodeContests problem's (judge_cpu_s), and a timing-out
    # sample burns the prior's 5 timeouts; or 15 of its tests, each among the largest inputs (the
    # demanding factor), and 15 timeouts. matrix.yaml's timeout is 6 s.
    profile = load_profile("h100")
    c, priors = profile.median(), profile.priors
    every = c.judge_cpu_s + c.timeout_rate * 6 * priors.dense_timeout_tests
    top = (c.judge_cpu_s / priors.tests("codecontests") * priors.demanding_test_factor * 15
           + c.timeout_rate * 6 * 15)
    assert judge(fifteen) == pytest.approx(judge(priced) * top / every, rel=1e-4)
    assert judge(fifteen) > judge(priced)  # the timeouts outweigh running 15 of ~45 tests
