"""Named output checkers for problems whose comparison is not the default one.

`Problem.checker` names one of these; the judge calls it as
`checker(test_input, expected_output, program_output) -> bool` instead of the
configured comparison. "Print any valid answer" problems need a checker that
validates the answer against the input; such checkers are problem-specific
and are registered here by name with `@register("name")`.
Stdlib only besides engine.judge.compare: the sandbox worker imports it.
"""

from __future__ import annotations

from typing import Callable

from engine.judge.compare import outputs_match

Checker = Callable[[str, str, str], bool]
CHECKERS: dict[str, Checker] = {}


def register(name: str) -> Callable[[Checker], Checker]:
    def add(fn: Checker) -> Checker:
        if name in CHECKERS:
            raise ValueError(f"checker {name!r} registered twice")
        CHECKERS[name] = fn
        return fn

    return add


def get_checker(name: str) -> Checker:
    try:
        return CHECKERS[name]
    except KeyError:
        raise KeyError(f"unknown checker {name!r}; known: {', '.join(sorted(CHECKERS))}") from None


@register("yes_no")
def yes_no(test_input: str, expected: str, got: str) -> bool:
    """testlib's yesno/nyesno: tokens compared case-insensitively (YES = yes)."""
    return outputs_match(expected.lower(), got.lower(), mode="tokens")


def _float_checker(tol: float) -> Checker:
    def check(test_input: str, expected: str, got: str) -> bool:
        return outputs_match(expected, got, mode="float", tol=tol)

    check.__doc__ = f"testlib's rcmp: numbers within {tol:g} absolute or relative."
    return check


for _tol, _name in ((1e-4, "float_1e-4"), (1e-6, "float_1e-6"), (1e-9, "float_1e-9")):
    register(_name)(_float_checker(_tol))


@register("tokens_unordered")
def tokens_unordered(test_input: str, expected: str, got: str) -> bool:
    """Any permutation of the expected tokens (an answer that is a set or multiset of values)."""
    return sorted(expected.split()) == sorted(got.split())


@register("lines_unordered")
def lines_unordered(test_input: str, expected: str, got: str) -> bool:
    """The expected lines in any order, each line's tokens exact (one pair / edge per line)."""
    def lines(text: str) -> list[list[str]]:
        return sorted(line.split() for line in text.splitlines() if line.strip())

    return lines(expected) == lines(got)
