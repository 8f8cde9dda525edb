"""trl hyperparameters: a trl phase's `hparams:` / `overrides:` are fields of the installed trl's
config dataclass (SFTConfig, DPOConfig, GRPOConfig), of the field's type and in its range, checked
at validate time (`engine.train.setting_types`).

Importing trl costs seconds, so the field names and types of each config class are cached per trl
version under the rlvr-run cache; validate imports trl once per version, never per spec.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import typing
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Optional

from engine.data.cache import cache_root
from engine.errors import Diagnostic, UserError
from engine.files import atomic_write
from engine.plan.model import Run
from engine.resources import load_object
from engine.spec.model import PhaseKind
from engine.spec.schema_errors import did_you_mean
from engine.spec.validated import ValidatedSpec
from engine.train.setting_types import Expected, value_problem

CONFIG_CLASSES: dict[PhaseKind, str] = {
    PhaseKind.sft: "trl.trainer.sft_config:SFTConfig",
    PhaseKind.raft: "trl.trainer.sft_config:SFTConfig",
    PhaseKind.dpo: "trl.trainer.dpo_config:DPOConfig",
    PhaseKind.grpo: "trl.trainer.grpo_config:GRPOConfig",
    PhaseKind.repair: "trl.trainer.grpo_config:GRPOConfig",
}
# The spec's trainer-neutral names (the same words a verl phase uses) → trl's field.
ALIASES: dict[str, str] = {
    "lr": "learning_rate",
    "epochs": "num_train_epochs",
    "total_steps": "max_steps",
    "per_device_batch_size": "per_device_train_batch_size",
    "micro_batch_size_per_gpu": "per_device_train_batch_size",
}
GRPO_ALIASES = {"kl_coef": "beta"}
# Set by rlvr-run from the spec and the run directory; a spec value would be silently replaced.
RESERVED: dict[str, str] = {
    "output_dir": "checkpoints go to the run directory",
    "logging_dir": "logs go to the run directory",
    "report_to": "use the spec's `tracking:` section",
    "run_name": "runs are named by their unit and seed (their id without a tracker)",
    "seed": "use the spec's `seeds:`",
    "resume_from_checkpoint": "a re-run resumes from the last checkpoint by itself",
    "push_to_hub": "the chosen model is the run's model/ folder",
}


def config_class(kind: PhaseKind) -> Any:
    return load_object(CONFIG_CLASSES[kind])


def trl_field_types(kind: PhaseKind) -> dict[str, Expected]:
    """The fields of the installed trl's config class for `kind` and what each accepts (cached per
    trl version)."""
    try:
        trl_version = version("trl")
    except PackageNotFoundError:
        raise UserError("trl is not installed: `pip install 'rlvr-run[trl]'` (needed for `trainer: trl`)") from None
    # The fields come from trl's class and transformers' TrainingArguments it extends, read by
    # `Expected.of_annotation`: a change in any of the three reads them again.
    key = hashlib.sha256(f"{trl_version} {version('transformers')} {Expected.CACHE_FORMAT}".encode()).hexdigest()[:16]
    path = cache_root() / f"trl-config-types-{trl_version}-{key}.json"
    try:
        cached = json.loads(path.read_text())
        if not isinstance(cached, dict):
            raise ValueError("not a mapping")
        found = {name: Expected.from_json(e) for name, e in cached.get(CONFIG_CLASSES[kind], {}).items()}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):  # absent, or torn by hand: read again
        cached, found = {}, {}
    if found:
        return found
    cls = config_class(kind)
    hints = typing.get_type_hints(cls)
    cached[CONFIG_CLASSES[kind]] = {f.name: Expected.of_annotation(hints.get(f.name, f.type)).to_json()
                                    for f in dataclasses.fields(cls)}
    # whole-file atomic: a parallel validate reads either file, never a torn one (a class another
    # writer added meanwhile may be lost, and is read again next time)
    atomic_write(path, json.dumps(cached))
    return {name: Expected.from_json(e) for name, e in cached[CONFIG_CLASSES[kind]].items()}


def aliases(kind: PhaseKind) -> dict[str, str]:
    return {**ALIASES, **(GRPO_ALIASES if kind in (PhaseKind.grpo, PhaseKind.repair) else {})}


def trl_args(run_config: dict[str, Any], kind: PhaseKind) -> dict[str, Any]:
    """The run's hparams and overrides as trl config fields (aliases resolved)."""
    names = aliases(kind)
    merged = {**run_config.get("hparams", {}), **run_config.get("overrides", {})}
    return {names.get(k, k): v for k, v in merged.items()}


def key_problem(key: str, kind: PhaseKind, fields: frozenset[str]) -> Optional[tuple[str, str]]:
    """(message, fix) when `key` is not a field trl's config for `kind` accepts, else None."""
    field = aliases(kind).get(key, key)
    cls = CONFIG_CLASSES[kind].split(":")[1]
    if field in RESERVED:
        return f"`{key}` is set by rlvr-run ({RESERVED[field]})", f"remove `{key}`"
    if field in fields:
        return None
    known = set(fields) | set(aliases(kind))
    return (f"unknown trl hyperparameter `{key}` for {kind.value}: not a field of {cls}{did_you_mean(key, known)}",
            f"use a {cls} field (trl {version('trl')}), or one of {', '.join(sorted(aliases(kind)))}")


def trl_run_problems(runs: list[Run], validated: ValidatedSpec) -> list[Diagnostic]:
    """Every trl run's unknown, reserved or mistyped hyperparameters, located in the spec."""
    seen: set[tuple[str, ...]] = set()
    out: list[Diagnostic] = []
    for run in runs:
        if run.trainer != "trl" or run.kind not in CONFIG_CLASSES:
            continue
        types = trl_field_types(run.kind)
        fields = frozenset(types)
        for section in ("hparams", "overrides"):
            for key, value in run.config.get(section, {}).items():
                problem = key_problem(key, run.kind, fields)
                typed = None if problem else _value_problem(key, value, run.kind, types)
                where = _where(validated, run, section, key)
                if (problem or typed) and where not in seen:
                    seen.add(where)
                    message, fix = problem or typed
                    out.append(validated.loaded.diagnostic(where, message, fix, at_value=typed is not None))
    return out


def _value_problem(key: str, value: Any, kind: PhaseKind, types: dict[str, Expected]) -> Optional[tuple[str, str]]:
    field = aliases(kind).get(key, key)
    owner = f"trl's {CONFIG_CLASSES[kind].split(':')[1]}.{field}"
    return value_problem(value, types[field], field, owner)


def _where(validated: ValidatedSpec, run: Run, section: str, key: str) -> tuple[str, ...]:
    if run.variant:
        own = getattr(validated.spec.variants[run.variant], section) or {}
        if key in own:
            return ("variants", run.variant, section, key)
    return ("phases", run.phase, section, key)
