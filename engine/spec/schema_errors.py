"""Pydantic's validation errors about a spec, rewritten as plain words with a fix.

pydantic reports a location tuple, an error type and an English message aimed at
programmers; a researcher needs the key path as written in YAML, what is wrong
with it, and what to write instead ("did you mean ...").
"""

from __future__ import annotations

import difflib
import types
from enum import Enum
from typing import Annotated, Any, Iterable, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from engine.spec.base import SPEC_ADVICE
from engine.spec.model import Spec

Key = str | int
# (key path, message, fix, whether to point at the value rather than the key)
Described = tuple[tuple[Key, ...], str, str, bool]


def did_you_mean(word: object, choices: Iterable[str]) -> str:
    """' (did you mean 'x'?)' for a close match, else ''."""
    match = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.6)
    return f" (did you mean {match[0]!r}?)" if match else ""


def _unwrap(annotation: Any) -> list[Any]:
    """The alternatives of Optional/Union, without None."""
    if get_origin(annotation) is Annotated:  # constraints aside, the type
        return _unwrap(get_args(annotation)[0])
    if get_origin(annotation) in (Union, types.UnionType):
        return [b for a in get_args(annotation) if a is not type(None) for b in _unwrap(a)]
    return [annotation]


def _model_keys(model: type[BaseModel]) -> list[str]:
    return [f.alias or name for name, f in model.model_fields.items()]


def _annotation_at(keys: tuple[Key, ...], root: type[BaseModel] = Spec) -> Any:
    """The declared type at a key path of `root` (None when the path leaves the schema)."""
    current: Any = root
    for key in keys:
        step = None
        for alt in _unwrap(current):
            if isinstance(alt, type) and issubclass(alt, BaseModel):
                field = next((f for n, f in alt.model_fields.items() if key in (n, f.alias)), None)
                step = field.annotation if field else None
            elif get_origin(alt) in (dict, list):
                step = get_args(alt)[-1]
            if step is not None:
                break
        if step is None:
            return None
        current = step
    return current


def _expected(annotation: Any) -> str:
    """A type in words: 'an integer', 'one of a, b', 'a mapping', ..."""
    words = []
    for alt in _unwrap(annotation):
        if isinstance(alt, type) and issubclass(alt, Enum):
            words.append("one of " + ", ".join(str(m.value) for m in alt))
        elif get_origin(alt) is Literal:
            words.append("one of " + ", ".join(str(a) for a in get_args(alt)))
        elif isinstance(alt, type) and issubclass(alt, BaseModel):
            words.append("a mapping with keys " + ", ".join(_model_keys(alt)))
        else:
            words.append(_TYPE_WORDS.get(get_origin(alt) or alt, str(alt)))
    return " or ".join(dict.fromkeys(words))


_TYPE_WORDS: dict[Any, str] = {str: "a string", int: "an integer", float: "a number", bool: "true or false",
                               dict: "a mapping", list: "a list", Any: "any value"}


_BOUNDS = {"greater_than": (">", "gt"), "greater_than_equal": (">=", "ge"),
           "less_than": ("<", "lt"), "less_than_equal": ("<=", "le")}


def _value_at(data: Any, keys: tuple[Key, ...]) -> tuple[bool, Any]:
    for key in keys:
        if isinstance(data, dict) and key in data:
            data = data[key]
        elif isinstance(data, list) and isinstance(key, int) and 0 <= key < len(data):
            data = data[key]
        else:
            return False, None
    return True, data


def _clean_loc(loc: tuple[Key, ...], data: Any, root: type[BaseModel]) -> tuple[tuple[Key, ...], str]:
    """Drop pydantic's union-branch tags ('str', 'ModelRef', ...) from a location."""
    keys: list[Key] = []
    branch = ""
    for key in loc:
        found, _ = _value_at(data, (*keys, key))
        if found or _annotation_at((*keys, key), root) is not None:
            keys.append(key)
        else:
            branch = str(key)
    return tuple(keys), branch


def _name(keys: tuple[Key, ...]) -> str:
    """The key as a user reads it: `seeds[0]`, `temperature`."""
    if keys and isinstance(keys[-1], int):
        return f"{keys[-2] if len(keys) > 1 else ''}[{keys[-1]}]"
    return str(keys[-1]) if keys else "(spec)"


def _shown(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return "a mapping" if isinstance(value, dict) else "a list"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _describe(err: dict[str, Any], keys: tuple[Key, ...], data: Any, root: type[BaseModel]) -> tuple[str, str, bool]:
    kind, ctx = err["type"], err.get("ctx") or {}
    last = keys[-1] if keys else ""
    found, value = _value_at(data, keys)
    annotation = _annotation_at(keys, root)
    if kind == "extra_forbidden":
        parent = _annotation_at(keys[:-1], root)
        allowed = next((_model_keys(a) for a in _unwrap(parent) if isinstance(a, type) and issubclass(a, BaseModel)), [])
        hint = did_you_mean(last, allowed)
        fix = f"use one of: {', '.join(allowed)}" if allowed else "remove it"
        if not hint and "hparams" in allowed:
            fix = f"move it under `hparams:` (or a trainer key under `overrides:`), or {fix}"
        return (f"unknown key {last!r}{hint}", fix, False)
    if kind == "missing":
        return (f"missing required key {last!r}", f"add `{last}:` here ({_expected(annotation)})", False)
    if kind in ("enum", "literal_error"):
        choices = [c.strip(" '") for c in str(ctx.get("expected", "")).replace(" or ", ",").split(",") if c.strip()]
        return (f"{_shown(value)} is not allowed here{did_you_mean(value, choices)}",
                f"use one of: {', '.join(choices)}", True)
    if kind == "too_short" and ctx.get("min_length") == 1:
        return (f"{last!r} is empty", f"list at least one entry, e.g. `{last}: [1]`", True)
    if kind in _BOUNDS:
        word, bound = _BOUNDS[kind]
        limit = ctx.get(bound)
        return (f"must be {word} {limit}, got {_shown(value)}", f"use a value {word} {limit} for `{_name(keys)}`", True)
    if kind == "string_too_short":
        return (f"{last!r} must not be empty", f"write some text for `{_name(keys)}`", True)
    if kind == "string_pattern_mismatch":
        return (f"{_shown(value)} is not a valid name",
                "use letters, digits, '.', '_' or '-', starting with a letter or digit", True)
    if kind == SPEC_ADVICE:  # a model's own check: its words and fix, never the value (it may be a secret)
        return (err["msg"], str(ctx.get("fix", f"fix the value of `{_name(keys)}`")), True)
    if kind == "int_from_float" or (kind == "int_type" and isinstance(value, float)):  # strict ints say int_type
        return (f"expected an integer, got {_shown(value)}", f"write a whole number for `{_name(keys)}`", True)
    if found and value is None and (kind.endswith("_type") or kind == "model_attributes_type"):
        # `phases:` with nothing after it: the value's position would be the next line's key
        return (f"`{_name(keys)}` has no value", f"write {_expected(annotation)} after `{_name(keys)}:`", False)
    if kind.endswith("_type") or kind.endswith("_parsing") or kind == "model_type" or kind == "model_attributes_type":
        got = _shown(value) if found else "nothing"
        return (f"expected {_expected(annotation)}, got {got}", f"write {_expected(annotation)} for `{_name(keys)}`", True)
    return (f"{_shown(value) if found else last}: {err['msg']}", f"fix the value of `{_name(keys)}`", True)


def describe_pydantic_errors(exc: ValidationError, data: Any, root: type[BaseModel] = Spec) -> list[Described]:
    """One described problem per offending key; union branches merged into one."""
    out: dict[tuple[Key, ...], Described] = {}
    # every branch of a union of scalars fails on a mapping or a list (`hparams: {k: {a: 1}}`): the
    # first such error still describes the key, so no error is ever dropped
    unmatched: dict[tuple[Key, ...], dict[str, Any]] = {}
    for err in exc.errors():
        loc = tuple(err["loc"])
        if "[key]" in loc:  # a mapping key of the wrong type, e.g. `datasets: {1: ...}`
            keys = loc[: loc.index("[key]")]
            out.setdefault(keys, (keys, f"the name {keys[-1]!r} must be text, not {type(keys[-1]).__name__}",
                                  f'quote it: "{keys[-1]}"', False))
            continue
        keys, branch = _clean_loc(loc, data, root)
        if branch:
            # `str | Model`: keep the branch matching the written shape (a mapping → the model).
            is_model_branch = branch[:1].isupper()
            written_mapping = isinstance(_value_at(data, _branch_root(keys, err["loc"], branch))[1], dict)
            if is_model_branch != written_mapping:
                unmatched.setdefault(keys, err)
                continue
        if keys in out:
            continue
        message, fix, at_value = _describe(err, keys, data, root)
        out[keys] = (keys, message, fix, at_value)
    for keys, err in unmatched.items():
        # only where no error at this key or below it describes the problem already
        if not any(found[: len(keys)] == keys for found in out):
            message, fix, at_value = _describe(err, keys, data, root)
            if len(keys) >= 2 and keys[-2] == "hparams":
                fix = f"hparams hold plain values (numbers, text, true/false): move `{keys[-1]}` under `overrides:`"
            out[keys] = (keys, message, fix, at_value)
    return list(out.values())


def _branch_root(keys: tuple[Key, ...], loc: tuple[Key, ...], branch: str) -> tuple[Key, ...]:
    """The key path of the value a union branch was tried on."""
    return tuple(loc[: list(loc).index(branch)])

