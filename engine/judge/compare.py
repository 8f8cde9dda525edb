"""Output comparison for stdin/stdout tests (testlib-like, one specified rule).

- tokens (default): both outputs split on any whitespace; same number of
  tokens, each identical (case-sensitive). Line structure and amounts of
  whitespace do not matter; a missing or extra token is a wrong answer (no
  zip-truncation).
- float: as tokens, but two tokens that both parse as numbers, at least one
  with a fraction/exponent, match when |a - b| <= tol or |a - b| <= tol * |b|
  (absolute-or-relative, like testlib's rcmp and Kattis' float_tolerance).
  Integer tokens stay exact.
- exact: byte-identical after normalizing line endings (CRLF → LF) and
  stripping trailing whitespace at the very end of the output.

Stdlib only: the sandbox worker imports this file directly.
"""

from __future__ import annotations

import math
import re

_INT = re.compile(r"[+-]?\d+\Z")


def outputs_match(expected: str, got: str, *, mode: str = "tokens", tol: float = 1e-6) -> bool:
    if mode == "exact":
        return _normalize(expected) == _normalize(got)
    want, have = expected.split(), got.split()
    if len(want) != len(have):
        return False
    if mode == "tokens":
        return want == have
    if mode == "float":
        return all(a == b or _close(a, b, tol) for a, b in zip(want, have))
    raise ValueError(f"unknown compare mode {mode!r} (tokens | exact | float)")


def _normalize(text: str) -> str:
    return text.replace("\r\n", "\n").rstrip()


def _close(expected: str, got: str, tol: float) -> bool:
    if _INT.match(expected) and _INT.match(got):
        return False  # two integers must be identical (checked by the caller)
    try:
        a, b = float(expected), float(got)
    except ValueError:
        return False
    if math.isnan(a) or math.isnan(b) or math.isinf(a) or math.isinf(b):
        return False
    diff = abs(a - b)
    return diff <= tol or diff <= tol * abs(a)
