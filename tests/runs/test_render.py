"""Launch scripts: golden renders per kind, StrictUndefined, quoting, verl composition."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import jinja2
import pytest

from engine.errors import SpecError, UserError
from engine.isolation.validate import validate_spec
from engine.plan.expand import plan
from engine.plan.model import Plan, Run
from engine.runs.preflight import preflight
from engine.runs.render import RenderContext, launch_context, render_launch
from engine.spec.model import ModelRef, PhaseKind
from engine.spec.validated import ValidatedSpec
from engine.train import verl_compose, verl_overrides

GOLDEN = Path(__file__).resolve().parent / "golden"
SPEC = GOLDEN / "spec.yaml"
FAKE_ENGINE = Path("/opt/rlvr-run/engine")
FAKE_SPEC_DIR = Path("/runs/golden")


@pytest.fixture(scope="module")
def validated() -> ValidatedSpec:
    return validate_spec(SPEC, content=False)


@pytest.fixture(scope="module")
def golden_plan(validated: ValidatedSpec) -> Plan:
    return plan(validated)


def _first(p: Plan, kind: PhaseKind, parent_kind: PhaseKind | None = None) -> Run:
    for run in p.runs:
        if run.kind == kind and (parent_kind is None or (run.parents and p.by_id(run.parents[0]).kind == parent_kind)):
            return run
    raise AssertionError(f"no {kind} run in the golden plan")


def _render(p: Plan, v: ValidatedSpec, run: Run) -> str:
    ctx = launch_context(run, p, FAKE_SPEC_DIR, v.spec.base_model)
    return render_launch(run, dataclasses.replace(ctx, engine_root=FAKE_ENGINE))


CASES = {
    "eval": (PhaseKind.eval, None),
    "eval_of_best_of_n": (PhaseKind.eval, PhaseKind.best_of_n),
    "best_of_n": (PhaseKind.best_of_n, None),
    "sft": (PhaseKind.sft, None),
    "dpo": (PhaseKind.dpo, None),
    "grpo": (PhaseKind.grpo, None),
    "repair": (PhaseKind.repair, None),
}


TRL_CASES = {"trl_sft": PhaseKind.sft, "trl_grpo": PhaseKind.grpo, "trl_repair": PhaseKind.repair,
             "trl_raft": PhaseKind.raft}


@pytest.mark.parametrize("name", sorted(TRL_CASES))
def test_golden_trl_launch_scripts(name: str) -> None:
    v = validate_spec(GOLDEN / "trl_spec.yaml", content=False)
    p = plan(v)
    _check_golden(name, _render(p, v, _first(p, TRL_CASES[name])))
    assert "-m engine.train." in (GOLDEN / f"{name}.sh").read_text()


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_launch_scripts(name: str, golden_plan: Plan, validated: ValidatedSpec) -> None:
    _check_golden(name, _render(golden_plan, validated, _first(golden_plan, *CASES[name])))


def _check_golden(name: str, text: str) -> None:
    golden = GOLDEN / f"{name}.sh"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(text)
    assert golden.exists(), f"missing golden {golden}: regenerate with UPDATE_GOLDEN=1"
    assert text == golden.read_text(), f"{name}: rendering changed; review and regenerate with UPDATE_GOLDEN=1"
    # The script parses as bash and keeps to the house shape.
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)
    assert text.startswith("#!/usr/bin/env bash\n") and "set -euo pipefail" in text
    assert 'cd "$RUN_DIR"' in text


def test_strict_undefined_fails_loudly(tmp_path: Path, golden_plan: Plan) -> None:
    (tmp_path / "eval.sh.j2").write_text("echo {{ run.id }} {{ no_such_variable | shq }}\n")
    run = _first(golden_plan, PhaseKind.eval)
    ctx = RenderContext(run_dir=tmp_path, model_path="m")
    with pytest.raises(jinja2.UndefinedError, match="no_such_variable"):
        render_launch(run, ctx, template_dir=tmp_path)


def test_missing_template_is_a_clear_error(tmp_path: Path, golden_plan: Plan) -> None:
    run = _first(golden_plan, PhaseKind.dpo)
    with pytest.raises(UserError, match=r"no launch template for 'dpo' runs on trl.*trl_dpo\.sh\.j2"):
        render_launch(run, RenderContext(run_dir=tmp_path, model_path="m"), template_dir=tmp_path)


def test_every_value_is_shell_quoted(tmp_path: Path, golden_plan: Plan) -> None:
    """Run the rendered script with `printf` as the interpreter: each argument comes out intact."""
    run = _first(golden_plan, PhaseKind.eval)
    run_dir = tmp_path / "run dir with 'quotes' and $dollar"
    run_dir.mkdir()
    model = "/models/it's a \"model\"; rm -rf ~ $(whoami)"
    ctx = RenderContext(run_dir=run_dir, model_path=model, python="printf '%s\\n'")
    script = tmp_path / "launch.sh"
    script.write_text(render_launch(run, ctx))
    out = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=True,
                         env={"PATH": os.environ["PATH"], "RLVR_ATTEMPT": "a1"}).stdout.splitlines()
    assert out == ["-m", "engine.cli", "evaluate", "--run-dir", str(run_dir), "--model", model, "--backend", "auto"]
    assert sorted(p.name for p in run_dir.iterdir()) == ["logs", "outputs"]  # writes stay inside


@pytest.mark.parametrize("kind", [PhaseKind.grpo, PhaseKind.repair, PhaseKind.sft])
def test_rendered_verl_overrides_compose_against_installed_verl(kind: PhaseKind, golden_plan: Plan) -> None:
    run = _first(golden_plan, kind)
    paths = verl_overrides.VerlPaths(run_dir=FAKE_SPEC_DIR / run.id, reward_path=FAKE_ENGINE / "reward.py", model_path="m")
    overrides = verl_overrides.verl_overrides(run, paths)
    assert verl_compose.check_overrides(overrides, verl_overrides.CONFIG_NAMES[kind]) == []
    typo = [*overrides, "trainer.save_freqq=3"]
    errors = verl_compose.check_overrides(typo, verl_overrides.CONFIG_NAMES[kind])
    assert len(errors) == 1 and "trainer.save_freqq" in errors[0]


def test_grpo_command_has_the_minimal_verl_091_set(golden_plan: Plan) -> None:
    run = _first(golden_plan, PhaseKind.grpo)
    paths = verl_overrides.VerlPaths(run_dir=Path("/r"), reward_path=Path("/e/reward.py"), model_path="m")
    values = dict(o.split("=", 1) for o in verl_overrides.verl_overrides(run, paths))
    assert values["reward.custom_reward_function.path"] == "/e/reward.py"
    assert values["reward.custom_reward_function.name"] == "compute_score"
    assert values["actor_rollout_ref.rollout.name"] == "vllm"
    assert values["trainer.logger"] == '["console","file"]'
    assert values["trainer.default_local_dir"] == "/r/checkpoints"
    assert values["data.train_files"] == "/r/data/train.parquet"
    assert values["trainer.n_gpus_per_node"] == "2"  # resources.gpus of the phase
    assert values["actor_rollout_ref.rollout.n"] == "8"  # the rollout protocol's n
    assert values["trainer.save_freq"] == "20"  # the phase's overrides win over defaults
    for key in verl_overrides._MICRO:
        assert key in values
    assert not [k for k in values if k.startswith(verl_overrides.LEGACY_PREFIXES)]
    assert [k for k in values if k.startswith("+")] == [
        "+reward.custom_reward_function.reward_kwargs.mode",
        "+reward.custom_reward_function.reward_kwargs.run_config",
        "+actor_rollout_ref.model.override_config.attn_implementation"]
    # What a GPU run needs that a CPU check cannot see: no flash-attn, HF weights in every checkpoint.
    assert values["+actor_rollout_ref.model.override_config.attn_implementation"] == "sdpa"
    assert "hf_model" in values["actor_rollout_ref.actor.checkpoint.save_contents"]


def test_verl_scripts_carry_a_wall_clock_limit_and_the_users_trackers(tmp_path: Path) -> None:
    path = _spec_with(tmp_path, "seeds: [1]", "seeds: [1]\ntracking: {wandb: {project: p, mode: offline}}")
    checked = preflight(path, content=False)
    run = _first(checked.plan, PhaseKind.grpo)
    text = _render(checked.plan, checked.validated, run)
    assert "timeout --kill-after=120 259200 " in text  # 72 h unless resources.time_limit_h says otherwise
    assert "export WANDB_MODE=offline\nexport WANDB_PROJECT=p\n" in text
    assert "'trainer.logger=[\"console\",\"file\",\"wandb\"]'" in text


def test_every_verl_run_of_the_matrix_composes_and_passes_verls_checks() -> None:
    from engine.train.verl_checks import config_check

    matrix = Path(__file__).resolve().parents[2] / "specs" / "matrix.yaml"
    checked = preflight(matrix, content=False)  # raises SpecError on any problem of any run
    verl_runs = [r for r in checked.plan.runs if r.trainer == "verl"]
    assert len(verl_runs) == 14
    for run in verl_runs:
        lines = verl_overrides.verl_overrides(run, verl_overrides.PLACEHOLDER_PATHS)
        kind = verl_overrides.CONFIG_NAMES[run.kind]
        assert verl_compose.check_overrides(lines, kind) == [] and config_check(run, lines) == [], run.label


def _refusal(tmp_path: Path, old: str, new: str) -> str:
    """What validate says of the golden spec with `old` replaced by `new` (it must refuse it)."""
    with pytest.raises(SpecError) as caught:
        preflight(_spec_with(tmp_path, old, new), content=False)
    return str(caught.value)


def test_verl_own_batch_checks_fail_at_validate_time_with_the_spec_line(tmp_path: Path) -> None:
    text = _refusal(tmp_path, "hparams: {lr: 1.0e-6}", "hparams: {lr: 1.0e-6, micro_batch_size_per_gpu: 3}")
    assert "phases.grpo.hparams: verl's own config check fails: each GPU's share of a mini batch" in text


def test_saves_verl_never_validates_are_refused_at_validate_time(tmp_path: Path) -> None:
    """save_freq 5 with test_freq 10: half the checkpoints could never be chosen by validation."""
    text = _refusal(tmp_path, "trainer: {save_freq: 20}", "trainer: {save_freq: 5}")
    assert "phases.grpo.overrides.trainer.save_freq: save_freq 5 is not a multiple of test_freq 10" in text
    assert "set save_freq to a multiple of test_freq (e.g. 10)" in text


def _spec_with(tmp_path: Path, old: str, new: str) -> Path:
    text = SPEC.read_text()
    assert old in text
    path = tmp_path / "spec.yaml"
    path.write_text(text.replace(old, new))
    return path


def test_override_typo_fails_at_plan_time_with_its_spec_line(tmp_path: Path) -> None:
    path = _spec_with(tmp_path, "trainer: {save_freq: 20}", "trainer: {save_freqq: 20}")
    with pytest.raises(SpecError) as err:
        preflight(path, content=False)
    [diag] = err.value.diagnostics
    assert diag.path == "phases.grpo.overrides.trainer.save_freqq"
    assert diag.line == 19 and "Could not override 'trainer.save_freqq'" in diag.message


@pytest.mark.parametrize("key, words", [
    ("+trainer.extra_thing", "adds a key verl does not declare"),
    ("custom_reward_function.path", "legacy key"),
    ("+reward.custom_reward_function.reward_kwargs.timeout_s", "judge: {timeout_s: ...}"),
    ("reward.reward_manager.name", "replaces rlvr-run's reward manager"),
    ("reward.custom_reward_function.path", "replaces the project's reward"),
])
def test_undeclared_and_legacy_override_keys_are_refused(tmp_path: Path, key: str, words: str) -> None:
    path = _spec_with(tmp_path, "trainer: {save_freq: 20}", f"trainer: {{save_freq: 20}}, '{key}': 1")
    with pytest.raises(SpecError, match=words):
        preflight(path, content=False)


def test_unknown_hyperparameter_names_the_known_ones(tmp_path: Path) -> None:
    path = _spec_with(tmp_path, "hparams: {lr: 1.0e-6}", "hparams: {lr: 1.0e-6, lr_typo: 3}")
    with pytest.raises(SpecError, match=r"unknown hyperparameter\(s\) lr_typo.*known: lr"):
        preflight(path, content=False)


def test_base_model_spelled_out_reaches_the_command(golden_plan: Plan) -> None:
    run = _first(golden_plan, PhaseKind.eval)
    ctx = launch_context(run, golden_plan, FAKE_SPEC_DIR, ModelRef(path="/m/local"))
    assert "--model /m/local" in render_launch(run, ctx)


FAKE_ACCELERATE = Path(__file__).resolve().parents[1] / "fakes" / "accelerate_launch.py"


def _trl_sft_on(gpus: int, params_b: float | None) -> str:
    v = validate_spec(GOLDEN / "trl_spec.yaml", content=False)
    p = plan(v)
    run = _first(p, PhaseKind.sft)
    run = run.model_copy(update={"resources": run.resources.model_copy(update={"gpus": gpus})})
    ctx = dataclasses.replace(launch_context(run, p, FAKE_SPEC_DIR, v.spec.base_model, params_b),
                              engine_root=FAKE_ENGINE)
    return render_launch(run, ctx)


def test_a_trl_phase_on_several_gpus_is_launched_by_accelerate_fsdp_or_ddp_by_model_size() -> None:
    _check_golden("trl_sft_8gpu_7b", _trl_sft_on(8, 7.6))  # FSDP: a 7.6 B copy with Adam state is ~120 GB
    ddp = _trl_sft_on(2, 1.5)
    assert "--multi_gpu" in ddp and "--use_fsdp" not in ddp and "--num_processes 2" in ddp
    assert "--use_fsdp" in _trl_sft_on(4, None)  # unknown size: the strategy that fits either way
    assert "accelerate" not in _trl_sft_on(1, 7.6)  # one GPU: one plain process


def test_the_rendered_accelerate_launch_gets_the_runs_gpus_and_cpus(tmp_path: Path) -> None:
    """The script runs with a FAKE accelerate launch (no GPUs here) that records how it was called."""
    script = tmp_path / "launch.sh"
    script.write_text(_trl_sft_on(2, 1.5).replace(str(FAKE_SPEC_DIR), str(tmp_path / "runs")))
    log = tmp_path / "accelerate.jsonl"
    env = {"PATH": os.environ["PATH"], "RLVR_ATTEMPT": "a1", "RLVR_RUN_DIR": str(tmp_path), "RLVR_CPUS": "8",
           "CUDA_VISIBLE_DEVICES": "3,5", "FAKE_ACCELERATE_LOG": str(log),
           "RLVR_ACCELERATE": f"{sys.executable} {FAKE_ACCELERATE}"}
    subprocess.run(["bash", str(script)], check=True, env=env)
    [call] = [json.loads(line) for line in log.read_text().splitlines()]
    argv = call["argv"]
    assert (call["devices"], call["cpus"]) == ("3,5", "8")
    assert argv[argv.index("--num_processes") + 1] == "2" and "--multi_gpu" in argv
    assert argv[argv.index("--num_cpu_threads_per_process") + 1] == "4"  # 8 CPUs over 2 processes
    assert argv[argv.index("--module") + 1:argv.index("--module") + 4] == ["engine.train.sft", "--run-dir", str(tmp_path)]


def test_verl_settings_that_narrow_the_validated_choice_are_refused_at_validate_time(tmp_path: Path) -> None:
    """Keeping verl's last N checkpoints deletes the best validated step; an SFT that saves every
    save_freq steps without test_freq validates its last step alone: both hand on the last, not the best."""
    text = _refusal(tmp_path, "trainer: {save_freq: 20}", "trainer: {save_freq: 20, max_actor_ckpt_to_keep: 2}")
    assert "phases.grpo.overrides.trainer.max_actor_ckpt_to_keep: trainer.max_actor_ckpt_to_keep=2 keeps verl's " \
           "last 2 checkpoints" in text and "fix: drop it" in text
    text = _refusal(tmp_path, "hparams: {lr: 2.0e-5, max_length: 2048}",
                    "hparams: {lr: 2.0e-5, max_length: 2048, save_freq: 50}")
    assert "phases.sft.hparams.save_freq: save_freq 50 without test_freq: verl validates the last step alone" in text
    assert "set test_freq to save_freq or a divisor of it (e.g. test_freq: 50)" in text
    # with validation every 25 steps, both saves can be chosen: no refusal
    preflight(_spec_with(tmp_path, "hparams: {lr: 2.0e-5, max_length: 2048}",
                         "hparams: {lr: 2.0e-5, max_length: 2048, save_freq: 50, test_freq: 25}"), content=False)
