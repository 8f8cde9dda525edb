"""Strict plain-data encoding: how values cross from a sandboxed program to the judge.

Only exact builtin types are accepted (`type(x) is int`, never a subclass), so
an object with a custom `__eq__` cannot reach a comparison; the judge decodes
the tagged form into fresh builtin objects of its own and compares those.
Three stdlib dict subclasses are accepted too (`Counter`, `OrderedDict`,
`defaultdict`): checked by identity against the class objects captured when
this module was imported (in the worker, before any untrusted code ran), their
items read with `dict.items`, and rebuilt in the judge as its own objects of
the same class, so comparisons keep the stdlib's meaning (a Counter equals a
dict with the same counts; two OrderedDicts compare in order). A user-defined
dict subclass is still refused, whatever its `__eq__` says.
Stdlib only: the sandbox worker imports this file directly.
"""

from __future__ import annotations

import collections
import sys

MAX_NODES = 1_000_000
MAX_CHARS = 32 * 1024 * 1024
# Decimal digits of one int, and of all ints of one value. Converting an int's text is quadratic
# before Python 3.12 (20 000 digits: ≈ 1.5 ms; 1 000 000: ≈ 6 s), and the trusted side decodes
# what a program returned: past this bound the answer is the program's output over the limit.
MAX_INT_DIGITS = 20_000
MAX_VALUE_DIGITS = 200_000
MAX_DEPTH = 200

if hasattr(sys, "set_int_max_str_digits"):
    sys.set_int_max_str_digits(0)


class NotPlain(Exception):
    """The value holds something other than plain builtin data (or is too big)."""


class TooLarge(NotPlain):
    """The value is plain data past the bounds a judge decodes under: the program's output limit."""


def encode(value: object, other=None) -> object:
    """The tagged form of `value`; `other(x)` encodes what is not plain data (a judge's own handles),
    or raises `NotPlain`."""
    budget = [MAX_NODES, MAX_CHARS, MAX_VALUE_DIGITS]
    return _enc(value, budget, 0, other)


def _enc(x: object, budget: list[int], depth: int, other) -> object:
    budget[0] -= 1
    if budget[0] < 0 or depth > MAX_DEPTH:
        raise TooLarge("value too large or too deeply nested")
    t = type(x)
    if x is None or t is bool:
        return x
    if t is str:
        budget[1] -= len(x)
        if budget[1] < 0:
            raise TooLarge("value too large")
        return x
    if t is int:
        if x.bit_length() > MAX_INT_DIGITS * 3.33:  # before `str`, itself quadratic
            raise TooLarge(f"an int of more than {MAX_INT_DIGITS} digits")
        text = str(x)
        budget[2] -= len(text)
        if len(text) > MAX_INT_DIGITS + 1 or budget[2] < 0:
            raise TooLarge(f"ints of more than {MAX_VALUE_DIGITS} digits in all")
        return ["i", text]
    if t is float:
        return ["f", repr(x)]
    if t is complex:
        return ["c", repr(x.real), repr(x.imag)]
    if t is bytes:
        budget[1] -= 2 * len(x)
        if budget[1] < 0:
            raise TooLarge("value too large")
        return ["b", x.hex()]
    # Identity, not a dict lookup: a metaclass could make a foreign class hash and compare equal to `list`.
    for cls, tag, iterate in _CONTAINERS:
        if t is cls:
            break
    else:
        if other is not None:
            return other(x)
        raise NotPlain(f"a {_type_name(t)} object is not plain data")
    if iterate in _ITEMS:  # the captured C method, not x.items: no overridable method runs
        pairs = list(iterate(x))
        return [tag, [[_enc(k, budget, depth + 1, other), _enc(v, budget, depth + 1, other)] for k, v in pairs]]
    return [tag, [_enc(v, budget, depth + 1, other) for v in iterate(x)]]


def _type_name(t: type) -> str:
    try:
        return f"{t.__module__}.{t.__qualname__}"
    except BaseException:  # noqa: BLE001 — a hostile metaclass
        return "foreign"


# Pristine stdlib dict subclasses are captured here, at import (before untrusted code runs).
# A defaultdict's factory is not data, so it travels and decodes as a dict.
_CONTAINERS = (
    (list, "l", list.__iter__), (tuple, "t", tuple.__iter__), (set, "s", set.__iter__),
    (frozenset, "S", frozenset.__iter__), (dict, "d", dict.items), (collections.Counter, "C", dict.items),
    (collections.OrderedDict, "O", collections.OrderedDict.items), (collections.defaultdict, "d", dict.items),
)
# OrderedDict (a C type, immutable) keeps its own order, which move_to_end can make differ from dict's.
_ITEMS = (dict.items, collections.OrderedDict.items)
_DICT_TYPES = {"d": dict, "C": lambda pairs: collections.Counter(dict(pairs)), "O": collections.OrderedDict}


def decode(data: object, other=None) -> object:
    """Fresh builtin objects from the tagged form, under the bounds `encode` keeps (`TooLarge`
    past them: the value's size, its depth, its ints' digits); `other(data)` decodes a tag this
    module does not know (a judge's own handles); anything else malformed is a ValueError."""
    return _dec(data, [MAX_NODES, MAX_VALUE_DIGITS], 0, other)


def _dec(data: object, budget: list[int], depth: int, other) -> object:
    budget[0] -= 1
    if budget[0] < 0 or depth > MAX_DEPTH:
        raise TooLarge("value too large or too deeply nested")
    if data is None or type(data) in (bool, str):
        return data
    if type(data) is not list or not data:
        raise ValueError(f"malformed plain value {str(data)[:80]!r}")
    tag = data[0]
    if tag == "i":
        text = data[1]
        if type(text) is not str:
            raise ValueError("malformed plain int")
        budget[1] -= len(text)
        if len(text) > MAX_INT_DIGITS + 1 or budget[1] < 0:
            raise TooLarge(f"an int of more than {MAX_INT_DIGITS} digits")
        return int(text)
    if tag == "f":
        return float(data[1])
    if tag == "c":
        return complex(float(data[1]), float(data[2]))
    if tag == "b":
        return bytes.fromhex(data[1])
    if tag in _DICT_TYPES:
        return _DICT_TYPES[tag]((_dec(k, budget, depth + 1, other), _dec(v, budget, depth + 1, other))
                                for k, v in data[1])
    if tag in _SEQUENCES:
        return _SEQUENCES[tag]([_dec(v, budget, depth + 1, other) for v in data[1]])
    if other is not None:
        return other(data)
    raise ValueError(f"unknown plain tag {str(tag)[:20]!r}")


_SEQUENCES = {"l": list, "t": tuple, "s": set, "S": frozenset}


def short_repr(value: object, limit: int = 300) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
