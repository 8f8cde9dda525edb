"""Every trained run trains on the prompt template its config names, by one rule: the phase's
`prompt:`, else its rollout protocol's, else its select protocol's, else the study's evaluation
protocol's; never "whether select_on is set". A phase that trains on a template its evaluations
do not use is warned about at its spec line."""

from __future__ import annotations

from pathlib import Path

from engine.plan.expand import plan
from engine.runs.preflight import preflight

REPO = Path(__file__).resolve().parents[2]
SPEC = """\
name: prompts
base_model: tiny-coder
datasets:
  toy_train: {source: toy, split: train, role: train}
  toy_valid: {source: toy, split: valid, role: valid}
protocols:
  greedy: {preset: greedy, max_tokens: 16, prompt: short_chat}
  rollout: {temperature: 0.7, n: 2, max_tokens: 16, prompt: short_chat}
  plain_rollout: {temperature: 0.7, n: 2, max_tokens: 16}
phases:
  base: {kind: eval}
  sft: {kind: sft, from: base, trainer: trl, train: toy_train}
  sft_selected: {kind: sft, from: base, trainer: trl, train: toy_train, select_on: toy_valid}
  grpo: {kind: grpo, from: sft, trainer: trl, train: toy_train, reward: dense, rollout: plain_rollout}
variants:
  sft_own:
    phase: sft
    prompt: function_chat
seeds: [1]
evaluate:
  every_phase: {datasets: [toy_valid], protocol: greedy}
"""


def _checked(tmp_path: Path, text: str = SPEC):
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    return preflight(spec, content=False)


def _prompt(checked, label: str) -> dict:
    return next(r for r in checked.plan.runs if r.label == label).config["prompt"]


def test_an_sft_without_select_on_trains_on_the_evaluation_template(tmp_path):
    """It trained on the model's default template and was scored on `short_chat` (0.000 on every
    seed); with `select_on` the same SFT trained on `short_chat`. Both now train on it."""
    checked = _checked(tmp_path)
    assert _prompt(checked, "sft@1") == {"template": "short_chat", "from": "evaluate.every_phase `greedy`"}
    assert _prompt(checked, "sft_selected@1") == {"template": "short_chat", "from": "its select protocol `greedy`"}
    # a rollout protocol that names no template does not decide: the next rule does
    assert _prompt(checked, "grpo@1")["template"] == "short_chat"
    assert _prompt(checked, "sft/sft_own@1") == {"template": "function_chat", "from": "variants.sft_own.prompt"}
    assert not any(r.config.get("prompt") for r in checked.plan.runs if r.kind.value == "eval")


def test_a_phase_trained_on_a_template_its_evaluations_do_not_use_is_warned_about(tmp_path):
    checked = _checked(tmp_path)
    [warning] = [w for w in checked.plan.warnings if "trains on prompt template" in w]
    line = SPEC.splitlines().index("    prompt: function_chat") + 1
    assert warning.startswith(f"{tmp_path / 'spec.yaml'}:{line}:5: variants.sft_own trains on prompt template "
                              "`function_chat` (variants.sft_own.prompt), but its evaluations use `short_chat`")
    assert "fix: set `prompt: short_chat` on variants.sft_own" in warning
    same = _checked(tmp_path, SPEC.replace("prompt: function_chat", "prompt: short_chat"))
    assert not [w for w in same.plan.warnings if "trains on prompt template" in w]
    assert plan(same.validated).warnings == same.plan.warnings


def test_the_sft_rows_are_rendered_with_the_template_the_config_names(tmp_path):
    from engine.plan.frozen import read_frozen_run, run_registry
    from engine.prompts.templates import PromptChoice
    from engine.runs.materialize import materialize
    from engine.train.session import TrainRun
    from engine.train.sft import sft_dataset

    checked = _checked(tmp_path)
    run = next(r for r in checked.plan.runs if r.label == "sft@1")
    dirs = materialize(checked.plan, checked.validated, tmp_path / "runs")
    run_dir = next(d.path for d in dirs if d.run.id == run.id)
    frozen = read_frozen_run(run_dir)
    train = TrainRun(run_dir=run_dir, frozen=frozen, model="unused")
    rows = sft_dataset(train)
    problem = train.datasets("train")[0].problems[0]
    short = PromptChoice(registry=run_registry(run_dir), template="short_chat", model=frozen.base_model)
    assert rows[0]["prompt"] == [m.model_dump() for m in short.prompt(problem)]


def test_a_run_that_samples_its_own_training_rows_samples_them_on_its_training_template(tmp_path):
    """RAFT (and DPO) sample with their rollout protocol and train on the samples. A rollout
    protocol that names no template sampled on the model's default while the rows were rendered
    with the training template (`short_chat`): completions to one prompt trained under another."""
    from engine.evaluate.eval_run import tasks
    from engine.spec.validated import protocol_sha256
    from engine.plan.frozen import read_frozen_run, run_registry
    from engine.prompts.templates import PromptChoice
    from engine.runs.materialize import materialize

    text = SPEC.replace("variants:", "  raft: {kind: raft, from: sft, trainer: trl, train: toy_train, "
                                     "rollout: plain_rollout}\nvariants:")
    checked = _checked(tmp_path, text)
    run = next(r for r in checked.plan.runs if r.label == "raft@1")
    assert run.config["prompt"]["template"] == "short_chat"
    dirs = materialize(checked.plan, checked.validated, tmp_path / "runs")
    run_dir = next(d.path for d in dirs if d.run.id == run.id)
    frozen = read_frozen_run(run_dir)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    [task] = tasks(run_dir, str(model), frozen, "rollout", datasets=["toy_train"], out_dir=tmp_path / "out")
    short = PromptChoice(registry=run_registry(run_dir), template="short_chat", model=frozen.base_model)
    assert task.prompts[0] == [m.model_dump() for m in short.prompt(task.problems[0])]
    # its records are keyed by the template they were asked with: none asked otherwise resumes into them
    assert task.keys.protocol != protocol_sha256(frozen.protocols["rollout"])
