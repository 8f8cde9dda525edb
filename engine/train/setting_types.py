"""The types and ranges of trainer settings (`hparams:`, `overrides:`), checked before anything runs.

A trainer reads its settings long after `validate` (a trl config is built after the base
evaluations; verl composes its config on the cluster), and a wrong type there is a crash an hour
in, or worse a silent conversion. So every value is checked here against what its trainer
declares: trl's config dataclass field types (`Expected.of_annotation`), the type of verl's
composed Hydra default (`Expected.of_default`), and the ranges the trainers assume (`RANGES`).
"""

from __future__ import annotations

import math
import re
import types
from dataclasses import dataclass
from enum import Enum
from typing import Any, Literal, Optional, Union, get_args, get_origin

KINDS = ("bool", "int", "float", "str", "list", "dict", "null")
_WORDS = {"bool": "true or false", "int": "a whole number", "float": "a number", "str": "text",
          "list": "a list", "dict": "a mapping", "null": "null"}
# verl's defaults say 0 for many real-valued settings (entropy_coeff: 0); counts are the names that
# must stay whole numbers.
_COUNT = re.compile(r"(batch_size|steps|epochs|_freq|length|_size|^n$|nnodes|n_gpus|num_|_len$|max_.*_to_keep)")

# ...but a null default named in the plural may be a list of them (the steps a profiler records).
_LISTS = re.compile(r"(^steps$|_sizes$)")

@dataclass(frozen=True)
class Expected:
    """What a setting accepts: value kinds, and for an enum the strings it knows ("any": unchecked)."""

    kinds: frozenset[str]
    choices: tuple[str, ...] = ()
    CACHE_FORMAT = 1  # bump when `of_annotation` reads a type differently: cached readings are redone

    @property
    def any(self) -> bool:
        return not self.kinds

    def words(self) -> str:
        kinds = [k for k in KINDS if k in self.kinds and not (k == "int" and "float" in self.kinds)]
        if self.choices:
            kinds = ["one of " + ", ".join(self.choices)] + [k for k in kinds if k != "str"]
        return " or ".join(_WORDS.get(k, k) for k in kinds)

    def to_json(self) -> dict[str, Any]:
        return {"kinds": sorted(self.kinds), "choices": list(self.choices)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Expected":
        return cls(frozenset(data["kinds"]), tuple(data.get("choices", ())))

    @classmethod
    def of_annotation(cls, annotation: Any) -> "Expected":
        """A dataclass field's type (`float`, `int | None`, `SchedulerType | str`, ...)."""
        kinds: set[str] = set()
        choices: list[str] = []
        alts = get_args(annotation) if get_origin(annotation) in (Union, types.UnionType) else (annotation,)
        for alt in alts:
            origin = get_origin(alt) or alt
            if alt is type(None) or alt is None:
                kinds.add("null")
            elif origin is Literal:
                kinds |= {"bool" if isinstance(a, bool) else "str" for a in get_args(alt)}
            elif isinstance(origin, type) and issubclass(origin, Enum):
                kinds.add("str")
                choices += [str(m.value) for m in origin]
            elif origin in (bool, int, float, str, list, dict):
                kinds.add({bool: "bool", int: "int", float: "float", str: "str", list: "list", dict: "dict"}[origin])
            else:  # a class YAML cannot write (accelerate's ParallelismConfig): left to the trainer
                return cls(frozenset())
        return cls(frozenset(kinds), tuple(dict.fromkeys(choices)))

    @classmethod
    def of_default(cls, name: str, default: Any) -> "Expected":
        """The type of a verl default (Hydra's config is untyped YAML; its values say the type)."""
        if default is None:  # no type to read: a count or a ranged setting is still a number
            if _LISTS.search(name):  # `profiler.steps: [1, 5]`, `cudagraph_capture_sizes: [1, 8]`
                return cls(frozenset({"int", "list", "null"}))
            if _COUNT.search(name):
                return cls(frozenset({"int", "null"}))
            return cls(frozenset({"int", "float", "null"}) if name in RANGES else frozenset())
        if isinstance(default, bool):
            kinds = {"bool"}
        elif isinstance(default, int):
            kinds = {"int"} if _COUNT.search(name) else {"int", "float"}
        elif isinstance(default, float):
            kinds = {"int", "float"}
        elif isinstance(default, str):
            kinds = {"str", "int", "float"}  # Hydra passes a number through as text
        elif isinstance(default, (list, tuple)):
            kinds = {"list"}
        elif isinstance(default, dict):
            kinds = {"dict"}
        else:
            return cls(frozenset())
        return cls(frozenset(kinds | {"null"}))


@dataclass(frozen=True)
class Range:
    gt: Optional[float] = None
    ge: Optional[float] = None
    lt: Optional[float] = None
    le: Optional[float] = None
    also: tuple[float, ...] = ()  # a sentinel the trainer reads as "unset" (max_steps: -1)
    why: str = ""

    def holds(self, x: float) -> bool:
        if x in self.also:
            return True
        return not ((self.gt is not None and not x > self.gt) or (self.ge is not None and not x >= self.ge)
                    or (self.lt is not None and not x < self.lt) or (self.le is not None and not x <= self.le))

    def words(self) -> str:
        low = f"> {_num(self.gt)}" if self.gt is not None else f">= {_num(self.ge)}" if self.ge is not None else ""
        high = f"< {_num(self.lt)}" if self.lt is not None else f"<= {_num(self.le)}" if self.le is not None else ""
        text = " and ".join(p for p in (low, high) if p)
        return text + "".join(f" (or {_num(a)})" for a in self.also)


_POSITIVE = Range(gt=0)
_COUNT_RANGE = Range(ge=1)
_SHARE = Range(ge=0, le=1)
_OPEN_SHARE = Range(gt=0, le=1)
_NON_NEGATIVE = Range(ge=0)
# By the setting's own name (a trl field, or the last part of a verl key).
RANGES: dict[str, Range] = {
    **dict.fromkeys(("learning_rate", "lr", "adam_epsilon", "num_train_epochs", "save_steps", "logging_steps",
                     "eval_steps", "temperature"), _POSITIVE),
    **dict.fromkeys(("per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps",
                     "train_batch_size", "ppo_mini_batch_size", "ppo_micro_batch_size_per_gpu",
                     "log_prob_micro_batch_size_per_gpu", "micro_batch_size_per_gpu", "total_epochs",
                     "total_training_steps", "max_prompt_length", "max_response_length", "max_length",
                     "max_completion_length", "tensor_model_parallel_size", "ppo_epochs", "n_gpus_per_node",
                     "nnodes", "n", "generation_batch_size", "steps_per_generation", "num_iterations"), _COUNT_RANGE),
    "max_steps": Range(ge=1, also=(-1,)),
    "num_generations": Range(ge=2, why="GRPO compares each sample with the others of its group"),
    **dict.fromkeys(("warmup_ratio", "lr_warmup_steps_ratio", "adam_beta1", "adam_beta2"), _SHARE),
    **dict.fromkeys(("top_p", "gpu_memory_utilization"), _OPEN_SHARE),
    **dict.fromkeys(("weight_decay", "max_grad_norm", "beta", "kl_loss_coef", "warmup_steps", "clip_ratio",
                     "epsilon", "dataloader_num_workers"), _NON_NEGATIVE),
}


def _num(x: Optional[float]) -> str:
    return str(int(x)) if x is not None and float(x).is_integer() else str(x)


def yaml_number(text: str) -> Optional[float]:
    """The number YAML would read from `text` unquoted (1e-3, 0.001, 1_000, .inf), else None."""
    from ruamel.yaml import YAML

    if not re.fullmatch(r"\s*[-+.0-9][-+.0-9_eExXoOa-fA-F]*\s*|[-+]?\.(inf|Inf|INF|nan|NaN|NAN)", text):
        return None
    try:
        value = YAML(typ="safe", pure=True).load(text)
    except Exception:  # ruamel raises several types on malformed text  # noqa: BLE001
        return None
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def written(value: float) -> str:
    """A number as a spec should write it: small and large floats in YAML's exponent form."""
    if isinstance(value, int):
        return str(value)
    if value != 0 and (abs(value) < 1e-2 or abs(value) >= 1e6):
        mantissa, exponent = f"{value:e}".split("e")
        mantissa = mantissa.rstrip("0")
        return f"{mantissa}{'0' if mantissa.endswith('.') else ''}e{int(exponent)}"
    return repr(value)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    for kind, cls in (("bool", bool), ("int", int), ("float", float), ("str", str), ("list", list), ("dict", dict)):
        if isinstance(value, cls):
            return kind
    return type(value).__name__


def _shown(value: Any) -> str:
    text = repr(value) if not isinstance(value, (list, dict)) else ("a list" if isinstance(value, list) else "a mapping")
    return text if len(text) <= 40 else text[:37] + "..."


def value_problem(value: Any, expected: Expected, name: str, owner: str,
                  range_name: Optional[str] = None) -> Optional[tuple[str, str]]:
    """(message, fix) when `value`, written as `name`, is not what `owner` (e.g. "trl's
    SFTConfig.learning_rate") takes; `range_name` is the trainer's name for it, when it differs."""
    kind = _kind(value)
    ok = expected.any or kind in expected.kinds or (kind == "int" and "float" in expected.kinds)
    if ok and kind == "str" and expected.choices and value not in expected.choices:
        return (f"{_shown(value)} is not a value {owner} knows",
                f"use one of: {', '.join(expected.choices)}")
    if not ok:
        takes = expected.words()
        if kind == "str" and expected.kinds & {"int", "float", "bool"}:
            number = yaml_number(value)
            if number is not None and (isinstance(number, int) or "float" in expected.kinds):
                return (f"{_shown(value)} is text (it is quoted): {owner} takes {takes}",
                        f"write {written(number)} without quotes")
            if value.strip().lower() in ("true", "false") and "bool" in expected.kinds:
                return (f"{_shown(value)} is text (it is quoted): {owner} takes {takes}",
                        f"write {value.strip().lower()} without quotes")
        if kind == "float" and "int" in expected.kinds and math.isfinite(value) and value.is_integer():
            return (f"{_shown(value)} is not a whole number: {owner} takes {takes}", f"write {int(value)}")
        return f"{_shown(value)} is {_WORDS.get(kind, kind)}: {owner} takes {takes}", f"write {takes} for `{name}`"
    if kind in ("int", "float"):
        if not math.isfinite(value):
            return f"{_shown(value)} is not a finite number: {owner} takes a finite one", f"write a number for `{name}`"
        bound = RANGES.get(range_name or name)
        if bound is not None and not bound.holds(value):
            why = f" ({bound.why})" if bound.why else ""
            return (f"{_shown(value)} is out of range: {owner} must be {bound.words()}{why}",
                    f"use a value {bound.words()} for `{name}`")
    return None
