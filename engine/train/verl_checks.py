"""Plan-time checks of every verl run, located in the spec: hyperparameters and overrides (their
types and ranges against verl's defaults, legacy keys, needless `+`), composition against the installed verl's Hydra config, and verl's own
CPU-side config checks (`verl.utils.config.validate_config`, what `main_ppo` runs before it
starts Ray: batch sizes that do not divide, missing micro-batch keys, ...), so a run that
would die on the cluster in its first minute is refused at validate time.
"""

from __future__ import annotations

import contextlib
import io
import re
import warnings
from typing import Any

from engine.errors import Diagnostic
from engine.files import atomic_write
from engine.plan.model import Run
from engine.spec.model import PhaseKind
from engine.spec.validated import ValidatedSpec
from engine.train.setting_types import Expected, value_problem
from engine.train.verl_compose import cache_file, check_overrides, composed, default_at
from engine.train.verl_overrides import (
    CONFIG_NAMES,
    HPARAM_TABLES,
    PLACEHOLDER_PATHS,
    flatten,
    unknown_hparams,
    user_override_errors,
    verl_overrides,
)


def plan_run_problems(runs: list[Run], validated: ValidatedSpec) -> list[Diagnostic]:
    """Every verl run's problems (hyperparameters, overrides), located in the spec."""
    seen: set[tuple[str, str]] = set()
    diagnostics: list[Diagnostic] = []
    for run in runs:
        if run.trainer != "verl" or run.kind not in CONFIG_NAMES:
            continue
        for keys, message, fix in _run_problems(run):
            where = _locate_unit_key(validated, run, keys)
            if (str(where), message) not in seen:
                seen.add((str(where), message))
                # a key's own problem points at its value; a section's (`hparams:`) at the section
                diagnostics.append(validated.loaded.diagnostic(where, message, fix, at_value=len(keys) > 1))
    return diagnostics


def _run_problems(run: Run) -> list[tuple[tuple[str, ...], str, str]]:
    """(key path inside the unit, message, fix) for every problem of one run."""
    overrides = run.config.get("overrides", {})
    problems = [(("overrides",), msg, "change or drop that override") for msg in user_override_errors(overrides)]
    typed = _typed_problems(run)
    if typed:  # building the command line would read these values
        return problems + typed
    unknown = unknown_hparams(run)
    if unknown:
        problems.append((("hparams",), unknown, "use a known name, or set the verl key itself under `overrides:`"))
        # Compose the rest anyway: a misspelled hyperparameter must not hide a misspelled override.
        known = {k: v for k, v in run.config.get("hparams", {}).items() if k in HPARAM_TABLES[run.kind]}
        run = run.model_copy(update={"config": {**run.config, "hparams": known}})
    lines = verl_overrides(run, PLACEHOLDER_PATHS)
    user_keys = {k.lstrip("+"): k for k in flatten(overrides)}
    problems += _unvalidated_saves(lines, user_keys)
    problems += _narrowed_choice(run, lines, user_keys)
    errors = check_overrides(lines, CONFIG_NAMES[run.kind])
    if not errors and not problems:
        problems += [(("hparams",), f"verl's own config check fails: {message}",
                      "make the batch sizes divide (train_batch_size × rollout n by the GPUs, mini by micro batch)")
                     for message in config_check(run, lines)]
    for error in errors:
        first = error.splitlines()[0]
        match = re.search(r"override '([^']+)'", first)
        key = match.group(1) if match else ""
        user_key = user_keys.get(key)
        path = ("overrides", user_key) if user_key else ("overrides",)
        problems.append((path, f"verl {CONFIG_NAMES[run.kind]} rejects this override: {first}",
                         "check the key against verl's config (verl/trainer/config/) or drop it"))
    return problems


def _typed_problems(run: Run) -> list[tuple[tuple[str, ...], str, str]]:
    """Every hyperparameter and override against the type of verl's default for its key, and the
    key's range (`engine.train.setting_types`)."""
    config_name = CONFIG_NAMES[run.kind]
    table = HPARAM_TABLES[run.kind]
    checked = [(("hparams", name), name, table[name][0], value)
               for name, value in run.config.get("hparams", {}).items() if name in table]
    checked += [(("overrides", key), key, key.lstrip("+"), value)
                for key, value in flatten(run.config.get("overrides", {})).items()]
    problems = []
    for where, name, key, value in checked:
        found, default = default_at(config_name, key)
        if not found:
            continue  # an undeclared key: composition reports it
        if value == default and type(value) is type(default):
            continue  # verl's own default (`nnodes: 0`, `val_kwargs.temperature: 0`) means what verl says
        leaf = key.rsplit(".", 1)[-1]
        problem = value_problem(value, Expected.of_default(leaf, default), name, f"verl's {key}", range_name=leaf)
        if problem:
            problems.append((where, *problem))
    return problems


def _unvalidated_saves(lines: list[str], user_keys: dict[str, str]) -> list[tuple[tuple[str, ...], str, str]]:
    """verl validates every test_freq steps and saves every save_freq (and both at the last step);
    the checkpoint handed on is the saved step that validated best (`engine.train.verl_finish`), so
    a saved step verl never validated cannot be chosen: a save_freq that is not a multiple of
    test_freq quietly narrows the choice (to the last step alone when no save meets a validation)."""
    values: dict[str, str] = {}
    for line in lines:
        key, _, value = line.partition("=")
        values[key.lstrip("+")] = value
    try:
        save, test = int(values["trainer.save_freq"]), int(values["trainer.test_freq"])
    except (KeyError, ValueError):
        return []
    if save <= 0 or test <= 0 or save % test == 0:
        return []
    # Located where the user set it: an override of either key, else the hparams that made them.
    named = next((user_keys[k] for k in ("trainer.save_freq", "trainer.test_freq") if k in user_keys), None)
    return [(("overrides", named) if named else ("hparams",),
             f"save_freq {save} is not a multiple of test_freq {test}: the checkpoints saved at "
             f"steps verl does not validate can never be chosen by validation",
             f"set save_freq to a multiple of test_freq (e.g. {test * max(1, round(save / test))})")]


# verl's "keep the last N checkpoints" keys: the PPO trainer's and the SFT trainer's
KEEP_LAST = ("trainer.max_actor_ckpt_to_keep", "trainer.max_ckpt_to_keep")


def _narrowed_choice(run: Run, lines: list[str], user_keys: dict[str, str]) -> list[tuple[tuple[str, ...], str, str]]:
    """Settings under which verl would quietly take checkpoints out of the validated choice
    (`engine.train.verl_finish`) of a run that selects by validation (select_on, early_stop_on):
    keeping only the LAST N checkpoints deletes the best validated step as soon as N later ones
    are saved; and saving every save_freq steps without test_freq validates the last step alone,
    so every earlier save is unchoosable and the last is handed on whatever its score."""
    if not any({"select", "early_stop"} & set(d.uses) for d in run.datasets.values()):
        return []  # no validation: the last checkpoint is handed on, and keeping the last N keeps it
    values = {key.lstrip("+"): value for key, _, value in (line.partition("=") for line in lines)}
    problems = []
    for key in KEEP_LAST:
        kept = values.get(key, "null")
        if kept.lower() not in ("null", "none", "~", ""):
            problems.append((("overrides", user_keys.get(key, key)),
                             f"{key}={kept} keeps verl's last {kept} checkpoints and deletes older ones while it "
                             "trains: the step that validates best can be gone before the checkpoint is chosen "
                             "(the last, not the best)",
                             "drop it: every saved step stays until the choice is made (save fewer with a larger "
                             "save_freq)"))
    try:
        save, test = int(values["trainer.save_freq"]), int(values.get("trainer.test_freq", "-1"))
    except (KeyError, ValueError):
        return problems
    if save > 0 and test <= 0:
        named = next((user_keys[k] for k in ("trainer.save_freq", "trainer.test_freq") if k in user_keys), None)
        where = (("overrides", named) if named else
                 ("hparams", "save_freq") if "save_freq" in run.config.get("hparams", {}) else ("hparams",))
        problems.append((where,
                         f"save_freq {save} without test_freq: verl validates the last step alone, so the steps it "
                         "saves before it can never be chosen and the last is handed on whatever its score",
                         f"set test_freq to save_freq or a divisor of it (e.g. test_freq: {save})"))
    return problems


def _locate_unit_key(validated: ValidatedSpec, run: Run, keys: tuple[str, ...]) -> tuple[str, ...]:
    """The spec path a unit-level key came from: the variant when it names it, else the phase."""
    spec = validated.spec
    if run.variant:
        variant = spec.variants[run.variant]
        own = variant.overrides if keys[0] == "overrides" else variant.hparams
        if own and (len(keys) == 1 or keys[1] in flatten(own)):
            return ("variants", run.variant, *keys[:1], *_nested(keys[1:]))
    return ("phases", run.phase, *keys[:1], *_nested(keys[1:]))


def _nested(keys: tuple[str, ...]) -> tuple[str, ...]:
    # Overrides may be written nested or dotted; locate() stops at the deepest match.
    return tuple(keys[0].split(".")) if keys else ()


NAMES_CHECKED_BY_NONE = ("trainer.experiment_name=", "trainer.project_name=")


def config_check(run: Run, lines: list[str]) -> list[str]:
    """verl's validation of the composed config, with the run's real values. A clean result is
    kept on disk beside the compositions (importing verl's checks costs seconds); a failed one
    is checked again every time."""
    # A run's names are in no check: keyed without them, a parent's edit (which renames its
    # children's ids) does not import verl's checks again for children whose settings are the same.
    checked = tuple(line for line in lines if not line.startswith(NAMES_CHECKED_BY_NONE))
    clean = cache_file("checked", CONFIG_NAMES[run.kind], checked)
    if clean.is_file():
        return []
    problems = _config_check(run, lines)
    if not problems:
        atomic_write(clean, "{}")
    return problems


def _config_check(run: Run, lines: list[str]) -> list[str]:
    config = composed(CONFIG_NAMES[run.kind], tuple(lines))
    if run.kind == PhaseKind.sft:
        return _sft_batches(config)
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            validate_config(config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    except (AssertionError, ValueError, TypeError) as exc:
        return [str(exc).strip().splitlines()[0]]
    return _ppo_batches(config)


def _ppo_batches(config: Any) -> list[str]:
    """The worker's own assertion, which verl only reaches on the GPUs: each GPU's share of a mini
    batch (mini × rollout n / GPUs) splits into whole micro batches."""
    actor, n = config.actor_rollout_ref.actor, config.actor_rollout_ref.rollout.n
    gpus = config.trainer.n_gpus_per_node * config.trainer.nnodes
    if actor.use_dynamic_bsz or not actor.ppo_micro_batch_size_per_gpu:
        return []
    per_gpu, rest = divmod(actor.ppo_mini_batch_size * n, gpus)
    if rest or per_gpu % actor.ppo_micro_batch_size_per_gpu:
        return [f"each GPU's share of a mini batch (ppo_mini_batch_size {actor.ppo_mini_batch_size} × rollout n {n} "
                f"/ {gpus} GPUs) must split into micro batches of {actor.ppo_micro_batch_size_per_gpu}"]
    return []


def _sft_batches(config: Any) -> list[str]:
    gpus = config.trainer.n_gpus_per_node * config.trainer.nnodes
    batch, micro = config.data.train_batch_size, config.data.micro_batch_size_per_gpu
    if batch % (micro * gpus):
        return [f"data.train_batch_size ({batch}) must be divisible by micro_batch_size_per_gpu ({micro}) "
                f"× GPUs ({gpus})"]
    return []
