"""verl command lines: the override lists our launch scripts pass.

The same function builds the overrides that `launch.sh` renders and that the planner
composes against the installed verl's Hydra config (`engine.train.verl_compose`), so a typo
in a phase's `overrides:` fails at plan time instead of on the cluster.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from engine.errors import UserError
from engine.judge.reward_settings import JUDGE_KWARGS
from engine.plan.model import Run
from engine.spec.model import ModelRef, PhaseKind
from engine.train.verl_watch import ROLLOUTS_DIR

# verl reads these without declaring them, so they need a `+`: Hydra's struct mode refuses any other new key.
KNOWN_UNDECLARED = (
    "reward.custom_reward_function.reward_kwargs.",
    "reward.reward_kwargs.",
    "reward.max_concurrent",
    "reward.timeout",
    "actor_rollout_ref.rollout.engine_kwargs.vllm.",
    "ray_kwargs.ray_init.",
    "actor_rollout_ref.model.override_config.",
    "model.override_config.",
)
# What a GPU run needs and a CPU check cannot see: the gpu extra installs no flash-attn (verl's
# default attention), and without hf_model a checkpoint has no weights a child can load.
SDPA = "sdpa"
# verl's FSDP2 engine (its recommended one): FSDP1 refuses a module that starts on the CPU, so
# only FSDP2 runs the same command line on a GPU node and on a CPU.
FSDP = "fsdp2"
SAVE_CONTENTS = ["model", "optimizer", "extra", "hf_model"]
REWARD_KWARGS = "reward.custom_reward_function.reward_kwargs."
OWN_REWARD = ("reward.custom_reward_function.path", "reward.custom_reward_function.name",
              "reward.custom_reward_function")
REWARD_MANAGER = "pkg://engine.train.verl_reward_manager"  # imported where the reward is (it imports engine)
# Parsed but silently ignored by verl 0.9's main_ppo: it no longer migrates the pre-0.8 reward keys.
LEGACY_PREFIXES = ("custom_reward_function.", "reward_model.", "sandbox_fusion.")

_MICRO = (
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
)
GRPO_HPARAMS: dict[str, tuple[str, ...]] = {
    "lr": ("actor_rollout_ref.actor.optim.lr",),
    "train_batch_size": ("data.train_batch_size",),
    "mini_batch_size": ("actor_rollout_ref.actor.ppo_mini_batch_size",),
    "micro_batch_size_per_gpu": _MICRO,
    "max_prompt_length": ("data.max_prompt_length",),
    "max_response_length": ("data.max_response_length",),
    "kl_coef": ("actor_rollout_ref.actor.kl_loss_coef",),
    "entropy_coeff": ("actor_rollout_ref.actor.entropy_coeff",),
    "epochs": ("trainer.total_epochs",),
    "total_steps": ("trainer.total_training_steps",),
    "save_freq": ("trainer.save_freq",),
    "test_freq": ("trainer.test_freq",),
    "tensor_parallel": ("actor_rollout_ref.rollout.tensor_model_parallel_size",),
    "gpu_memory_utilization": ("actor_rollout_ref.rollout.gpu_memory_utilization",),
}
GRPO_DEFAULTS: dict[str, Any] = {
    "lr": 1e-6, "train_batch_size": 64, "mini_batch_size": 16, "micro_batch_size_per_gpu": 2,
    "max_prompt_length": 1024, "max_response_length": 2048, "kl_coef": 0.001, "entropy_coeff": 0,
    "epochs": 1, "save_freq": 50, "test_freq": 10, "tensor_parallel": 1,
    "gpu_memory_utilization": 0.6,
}
SFT_HPARAMS: dict[str, tuple[str, ...]] = {
    "lr": ("optim.lr",),
    "warmup_ratio": ("optim.lr_warmup_steps_ratio",),
    "train_batch_size": ("data.train_batch_size",),
    "micro_batch_size_per_gpu": ("data.micro_batch_size_per_gpu",),
    "max_length": ("data.max_length",),
    "epochs": ("trainer.total_epochs",),
    "total_steps": ("trainer.total_training_steps",),
    "save_freq": ("trainer.save_freq",),
    "test_freq": ("trainer.test_freq",),
}
# verl's engine optimizer defaults lr to 1e-3: never leave it implicit.
SFT_DEFAULTS: dict[str, Any] = {"lr": 1e-5, "train_batch_size": 64, "micro_batch_size_per_gpu": 2,
                                "max_length": 4096, "epochs": 1}
HPARAM_TABLES = {PhaseKind.grpo: GRPO_HPARAMS, PhaseKind.repair: GRPO_HPARAMS, PhaseKind.sft: SFT_HPARAMS}
CONFIG_NAMES = {PhaseKind.grpo: "ppo_trainer", PhaseKind.repair: "ppo_trainer",
                PhaseKind.sft: "sft_trainer_engine"}
# Multi-round repair is GRPO whose rollouts go through our agent loop (registered by the
# module verl imports from VERL_USE_EXTERNAL_MODULES).
REPAIR_AGENT_LOOP = "rlvr_repair"
REPAIR_LOOP_MODULE = "engine.train.verl_repair_loop"
# A run that asks for no GPU runs verl through rlvr-run's plug-in (engine/train/verl_plugin: a CPU
# platform and a transformers rollout of this name); everything else on its command line is the
# cluster's. GPU runs generate with vLLM.
CPU_ROLLOUT = "rlvr_hf"
GPU_ROLLOUT = "vllm"
PLUGIN_MODULE = "engine.train.verl_plugin"


def on_cpu(run: Run) -> bool:
    return run.resources.gpus == 0


def rollout_name(run: Run) -> str:
    return CPU_ROLLOUT if on_cpu(run) else GPU_ROLLOUT


def plugin_modules(run: Run) -> list[str]:
    """What the launch script puts in VERL_USE_EXTERNAL_MODULES: the modules verl imports in each
    of its processes (the CPU plug-in; the repair agent loop)."""
    return ([PLUGIN_MODULE] if on_cpu(run) else []) + ([REPAIR_LOOP_MODULE] if run.kind == PhaseKind.repair else [])


@dataclass(frozen=True, kw_only=True)
class VerlPaths:
    """Absolute locations a verl command line points at."""

    run_dir: Path
    reward_path: Path
    model_path: str


def model_path(base_model: Any) -> str:
    """The folder or hub id a launch script passes (a registry-built model's `~` expanded here,
    when the script is rendered: the frozen config keeps it unexpanded)."""
    path = base_model.path if isinstance(base_model, ModelRef) else str(base_model)
    return os.path.expanduser(path) if path.startswith("~") else path


def hydra_value(value: Any) -> str:
    """A Python value as a Hydra override value (lists and odd strings quoted)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(json.dumps(v) if isinstance(v, str) else hydra_value(v) for v in value) + "]"
    text = str(value)
    return text if re.fullmatch(r"[A-Za-z0-9_./:@-]+", text) else json.dumps(text)


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, path + "."))
        else:
            out[path] = value
    return out


def user_override_errors(overrides: dict[str, Any]) -> list[str]:
    """Rules Hydra cannot enforce: legacy reward keys, `+` only where verl needs it, and no judge
    setting for the reward beside the run's own `judge:` block."""
    errors = []
    for key in flatten(overrides):
        bare = key.lstrip("+")
        judged = bare.removeprefix(REWARD_KWARGS)
        if bare.startswith(REWARD_KWARGS) and judged in JUDGE_KWARGS:
            errors.append(f"override {key!r} sets the reward's judge apart from the run's: the reward judges "
                          f"with the spec's `judge:` block, as the evaluations do; set `judge: {{{judged}: ...}}`")
        elif bare == "reward.reward_manager" or bare.startswith("reward.reward_manager."):
            errors.append(f"override {key!r} replaces rlvr-run's reward manager (verl's naive one that also "
                          "passes the project's reward the step of each rollout, engine.train.verl_reward_manager): "
                          "its records would lose their step and the watcher its count; remove the override")
        elif bare in OWN_REWARD:
            errors.append(f"override {key!r} replaces the project's reward (engine/reward.py:compute_score, which "
                          "judges with the spec's `judge:` block and records every verdict for the watcher); "
                          "remove the override (the reward's mode is the phase's `reward:` key)")
        elif bare.startswith(LEGACY_PREFIXES):
            errors.append(f"override {key!r} is a legacy key verl 0.9 parses and then ignores; "
                          f"use the reward.* key instead (e.g. reward.{bare})")
        elif key.startswith("++") or (key.startswith("+") and not bare.startswith(KNOWN_UNDECLARED)):
            errors.append(f"override {key!r} adds a key verl does not declare; drop the '+' "
                          f"(allowed only under {', '.join(KNOWN_UNDECLARED)})")
    return errors


def unknown_hparams(run: Run) -> Optional[str]:
    """Why the run's hyperparameters do not all map to verl keys, or None."""
    table = HPARAM_TABLES[run.kind]
    unknown = sorted(set(run.config.get("hparams", {})) - set(table))
    if not unknown:
        return None
    return (f"unknown hyperparameter(s) {', '.join(unknown)} for {run.kind.value} on verl; "
            f"known: {', '.join(table)} (anything else goes under overrides:)")


def _hparam_values(run: Run, table: dict[str, tuple[str, ...]], defaults: dict[str, Any],
                   extra: dict[str, Any]) -> dict[str, Any]:
    hparams = {**defaults, **extra, **_epochs_for_steps(run), **run.config.get("hparams", {})}
    unknown = unknown_hparams(run)
    if unknown:
        raise UserError(unknown)
    return {key: value for name, value in hparams.items() for key in table[name]}


def _epochs_for_steps(run: Run) -> dict[str, Any]:
    """With `total_steps` and no `epochs`, the steps alone end training: verl's trainers stop at
    whichever comes first, the steps or the epochs, so the default one epoch would cut a run of
    more steps than one epoch holds short (no last-step validation, no last save). Every epoch
    holds at least one step, so `total_steps` epochs never stop it first."""
    hparams = run.config.get("hparams", {})
    if hparams.get("total_steps") and "epochs" not in hparams:
        return {"epochs": int(hparams["total_steps"])}
    return {}


def _protocol_hparams(run: Run) -> dict[str, Any]:
    rollout = run.protocols.get(run.config["protocols"].get("rollout", {}).get("name", ""))
    if rollout is None or not rollout.max_tokens:
        return {}
    # A repair trajectory holds every round's answer (feedback tokens are masked).
    return {"max_response_length": rollout.max_tokens * _rounds(run)}


def _rounds(run: Run) -> int:
    return (run.config.get("rounds") or 2) if run.kind == PhaseKind.repair else 1


def grpo_overrides(run: Run, paths: VerlPaths) -> list[str]:
    """`key=value` list for `python3 -m verl.trainer.main_ppo` (verl 0.9's minimal GRPO set), for
    grpo and repair runs."""
    data = paths.run_dir / "data"
    has_valid = any("select" in d.uses or "early_stop" in d.uses for d in run.datasets.values())
    values: dict[str, Any] = {
        "algorithm.adv_estimator": "grpo", "algorithm.use_kl_in_reward": False,
        "data.train_files": str(data / "train.parquet"),
        "data.val_files": str(data / ("valid.parquet" if has_valid else "train.parquet")),
        "data.filter_overlong_prompts": True, "data.truncation": "error",
        "actor_rollout_ref.model.path": paths.model_path,
        "actor_rollout_ref.actor.strategy": FSDP,
        "actor_rollout_ref.actor.use_kl_loss": True, "actor_rollout_ref.actor.kl_loss_type": "low_var_kl",
        **_hparam_values(run, GRPO_HPARAMS, GRPO_DEFAULTS, _protocol_hparams(run)),
        "actor_rollout_ref.rollout.name": rollout_name(run),
        **_rollout_sampling(run),
        "actor_rollout_ref.rollout.val_kwargs.n": 1, "actor_rollout_ref.rollout.val_kwargs.temperature": 0,
        "actor_rollout_ref.rollout.val_kwargs.do_sample": False,
        "reward.custom_reward_function.path": str(paths.reward_path),
        "reward.custom_reward_function.name": "compute_score",
        # verl's naive manager, passing our reward the step of the rollout it scores.
        "reward.reward_manager.source": "importlib",
        "reward.reward_manager.name": "RewardManager",
        "reward.reward_manager.module.path": REWARD_MANAGER,
        "+reward.custom_reward_function.reward_kwargs.mode": run.config.get("reward") or "dense",
        "+reward.custom_reward_function.reward_kwargs.run_config": str(paths.run_dir / "config.yaml"),
        "trainer.val_before_train": has_valid,
        "+actor_rollout_ref.model.override_config.attn_implementation": SDPA,
        "actor_rollout_ref.actor.checkpoint.save_contents": SAVE_CONTENTS,
        **_curriculum(run, "data.shuffle"),
        **_trainer_common(run, paths), "trainer.resume_mode": "auto",
    }
    if not has_valid:
        values["trainer.test_freq"] = -1
    # The watcher reads each step's verdicts from there (judge faults always, timeouts if asked);
    # a flywheel harvests its failures from there.
    values["trainer.rollout_data_dir"] = str(paths.run_dir / ROLLOUTS_DIR)
    if run.kind == PhaseKind.repair:
        values["actor_rollout_ref.rollout.agent.default_agent_loop"] = REPAIR_AGENT_LOOP
        values["actor_rollout_ref.rollout.multi_turn.max_assistant_turns"] = _rounds(run)
    values.update(flatten(run.config.get("overrides", {})))
    return [f"{key}={hydra_value(value)}" for key, value in values.items()]


def _rollout_sampling(run: Run) -> dict[str, Any]:
    name = run.config["protocols"].get("rollout", {}).get("name")
    protocol = run.protocols.get(name) if name else None
    prefix = "actor_rollout_ref.rollout."
    out: dict[str, Any] = {prefix + "n": 8, prefix + "temperature": 1.0, prefix + "top_p": 1.0}
    if protocol is not None:
        for field in ("n", "temperature", "top_p", "top_k"):
            if getattr(protocol, field) is not None:
                out[prefix + field] = getattr(protocol, field)
    return out


def _curriculum(run: Run, key: str) -> dict[str, Any]:
    """A curriculum's order lives in the exported rows: verl must not shuffle them."""
    return {key: False} if run.config.get("curriculum") == "difficulty" else {}


TRACKERS = ("wandb", "mlflow", "tensorboard")
DEFAULT_TIME_LIMIT_H = 72.0


def tracking_env(run: Run) -> list[tuple[str, str]]:
    """The spec's tracker settings as the tools' own variables (`wandb: {mode: offline}` → WANDB_MODE)."""
    tracking = run.config.get("tracking") or {}
    out = [(f"{tool.upper()}_{key.upper()}", str(value)) for tool in TRACKERS
           for key, value in sorted((tracking.get(tool) or {}).items())]
    if tracking.get("wandb") is not None:  # the live run grouped and tagged like `engine.runs.track`'s record
        seed = "none" if run.seed is None else str(run.seed)
        out += [("WANDB_RUN_GROUP", run.spec_name), ("WANDB_TAGS", f"phase:{run.phase},variant:{run.variant or 'none'},"
                                                                   f"seed:{seed},kind:{run.kind.value},live:true")]
    return out


def loggers(run: Run) -> list[str]:
    """verl's `trainer.logger`: its console and our file logger, plus the spec's own trackers."""
    tracking = run.config.get("tracking") or {}
    return ["console", "file", *(t for t in TRACKERS if tracking.get(t) is not None)]


def watched(run: Run) -> bool:
    """Whether a verl run's command goes through `engine.train.verl_watch`: it declares early
    stopping, or it is rewarded by the judge (whose faults fail it)."""
    return run.kind in (PhaseKind.grpo, PhaseKind.repair) or any("early_stop" in d.uses for d in run.datasets.values())


def _trainer_common(run: Run, paths: VerlPaths) -> dict[str, Any]:
    return {
        "trainer.logger": loggers(run),
        "trainer.project_name": run.spec_name,
        "trainer.experiment_name": run.id,
        "trainer.n_gpus_per_node": max(1, run.resources.gpus),
        "trainer.nnodes": 1,
        "trainer.default_local_dir": str(paths.run_dir / "checkpoints"),
    }


def sft_overrides(run: Run, paths: VerlPaths) -> list[str]:
    """`key=value` list for `torchrun ... -m verl.trainer.sft_trainer`."""
    data = paths.run_dir / "data"
    has_valid = any("select" in d.uses or "early_stop" in d.uses for d in run.datasets.values())
    values: dict[str, Any] = {
        "data.train_files": str(data / "sft_train.parquet"),
        "data.val_files": str(data / ("sft_valid.parquet" if has_valid else "sft_train.parquet")),
        "data.messages_key": "messages",
        "model.path": paths.model_path,
        "+model.override_config.attn_implementation": SDPA,
        "engine.strategy": FSDP,
        "checkpoint.save_contents": SAVE_CONTENTS,
        **_hparam_values(run, SFT_HPARAMS, SFT_DEFAULTS, {}),
        **_curriculum(run, "data.shuffle"),
        **_trainer_common(run, paths), "trainer.resume_mode": "auto",
        # Hydra's run folder (its .hydra/ config and the trainer's log) defaults to
        # outputs/<date>/<time>/ under the working directory, the run directory: keep outputs/ for results.
        "hydra.run.dir": "logs/hydra",
    }
    values.update(flatten(run.config.get("overrides", {})))
    return [f"{key}={hydra_value(value)}" for key, value in values.items()]


def verl_overrides(run: Run, paths: VerlPaths) -> list[str]:
    if run.kind in (PhaseKind.grpo, PhaseKind.repair):
        return grpo_overrides(run, paths)
    if run.kind == PhaseKind.sft:
        return sft_overrides(run, paths)
    raise UserError(f"{run.label}: no verl command for kind {run.kind.value}")


PLACEHOLDER_PATHS = VerlPaths(run_dir=Path("/RUN_DIR"), reward_path=Path("/ENGINE/reward.py"), model_path="MODEL")
