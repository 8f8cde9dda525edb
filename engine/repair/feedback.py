"""The feedback a failing answer gets before its next round: structured, bounded, public only.

Built from the judge's result on the problem's PUBLIC tests (never the private ones, whose
inputs and outputs would leak the answer key): the verdict, the public pass ratio, up to K
failing public tests with input / expected / actual, the traceback tail and the run time,
cut to about `max_chars` (≈ 400 tokens).
"""

from __future__ import annotations

from typing import Optional

from engine.judge.verdict import SampleResult

MAX_CHARS = 1600  # ≈ 400 tokens
MAX_TESTS = 3
FIELD_CHARS = 200


def _clip(text: Optional[str], limit: int = FIELD_CHARS) -> str:
    text = (text or "").strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def feedback(public: Optional[SampleResult], *, max_tests: int = MAX_TESTS, max_chars: int = MAX_CHARS) -> str:
    """The user turn that asks for a fix. `public` is the result on the public tests (None: none exist)."""
    if public is None:
        return ("Your program did not pass the hidden tests. There are no public tests to show. "
                "Fix the program and answer with the whole corrected program in one ```python block.")
    lines = [f"Your program was judged {public.verdict.value} on the public tests "
             f"(passed {public.passed} of {public.total}; {public.wall_s:.2f} s)."]
    for failure in public.failures[:max_tests]:
        lines.append(f"- test {failure.index + 1}: {failure.verdict.value}")
        for label, value in (("input", failure.input), ("expected", failure.expected), ("got", failure.got),
                             ("message", failure.message)):
            if value:
                lines.append(f"  {label}: {_clip(value)}")
    if public.stderr_tail.strip():
        lines.append("Traceback (last lines):\n" + _clip(public.stderr_tail[-600:], 600))
    lines.append("Fix the program and answer with the whole corrected program in one ```python block.")
    text = "\n".join(lines)
    return text if len(text) <= max_chars else text[: max_chars - 1] + "…"
