"""The feedback a failing answer gets before its next round: structured, bounded, public only.

Built from the judge's result on the problem's PUBLIC tests (never the private ones, whose
inputs and outputs would leak the answer key): the verdict, the public pass ratio, up to K
failing public tests with input / expected / actual and the traceback tail, cut to about
`max_chars` (≈ 400 tokens).

Nothing in it may vary between two runs of the same answer: it is a prompt, and a prompt that
varies makes the next answer vary. So no run time (the judge's wall clock), and no traceback
frame of the judge's own harness (it names the file the judge is installed at); the program's
own frames are `<solution>`.
"""

from __future__ import annotations

import re
from typing import Optional

from engine.judge.verdict import SampleResult

MAX_CHARS = 1600  # ≈ 400 tokens
MAX_TESTS = 3
FIELD_CHARS = 200
# `  File "/…/engine/judge/local/runner.py", line 114, in _stdio_child`, with its source line and
# the carets under it when shown
_HARNESS_FRAME = re.compile(r'^  File "(?!<solution>)[^"]*", line \d+, in .*\n(?:    .*\n){0,2}', re.MULTILINE)


def _clip(text: Optional[str], limit: int = FIELD_CHARS) -> str:
    text = (text or "").strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def feedback(public: Optional[SampleResult], *, max_tests: int = MAX_TESTS, max_chars: int = MAX_CHARS) -> str:
    """The user turn that asks for a fix. `public` is the result on the public tests (None: none exist)."""
    if public is None:
        return ("Your program did not pass the hidden tests. There are no public tests to show. "
                "Fix the program and answer with the whole corrected program in one ```python block.")
    lines = [f"Your program was judged {public.verdict.value} on the public tests "
             f"(passed {public.passed} of {public.total})."]
    for failure in public.failures[:max_tests]:
        lines.append(f"- test {failure.index + 1}: {failure.verdict.value}")
        for label, value in (("input", failure.input), ("expected", failure.expected), ("got", failure.got),
                             ("message", failure.message)):
            if value:
                lines.append(f"  {label}: {_clip(value)}")
    stderr = _HARNESS_FRAME.sub("", public.stderr_tail)
    if stderr.strip():
        lines.append("Traceback (last lines):\n" + _clip(stderr[-600:], 600))
    lines.append("Fix the program and answer with the whole corrected program in one ```python block.")
    text = "\n".join(lines)
    return text if len(text) <= max_chars else text[: max_chars - 1] + "…"
