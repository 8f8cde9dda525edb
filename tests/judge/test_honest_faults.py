"""What is whose when a sample meets the judge's limits: a real failure on any test decides the
sample (a judge fault only when no test failed), an answer too large to decode is the program's
OUTPUT_LIMIT within its bound (the trusted side never decodes it unbounded), and a frame nested past
the parser's recursion is a garbled stream, never an exception in the worker."""

from __future__ import annotations

import time
import types

import pytest

from engine.judge import plain
from engine.judge.api import Judge, JudgeConfig
from engine.problem import FunctionTests, Problem

# Test 0 passes an object the judge cannot carry to the program (its own limit); test 1 is real.
MIXED = Problem(id="toy/mixed", source="toy", split="test", kind="function", statement="", entry_point="f",
                function_tests=FunctionTests(setup="class Box:\n    v = 3",
                                             asserts=["assert f(Box()) == 3", "assert f(2) == 4"]))


@pytest.fixture(scope="module")
def judge():
    with Judge(JudgeConfig(timeout_s=2.0, wall_timeout_s=4.0, cache=False, workers=1)) as j:
        yield j


@pytest.mark.parametrize("stop_first", [False, True])
def test_a_real_failure_decides_the_sample_whatever_faults_came_first(judge, stop_first):
    wrong = judge.judge(MIXED, "def f(b):\n    return 5\n", code_is_program=True, stop_on_first_failure=stop_first)
    assert wrong.verdict.value == "WRONG_ANSWER", wrong.failures
    assert [f.verdict.value for f in wrong.failures][:1] == ["WRONG_ANSWER"]
    right = judge.judge(MIXED, "def f(b):\n    return 4\n", code_is_program=True, stop_on_first_failure=stop_first)
    assert right.verdict.value == "INTERNAL_ERROR"  # no test failed: the fault stands


@pytest.mark.parametrize("program", [
    # refused where it is encoded, in the program's process (a shift: 3 000 000 digits at no CPU cost,
    # so a loaded machine cannot turn the answer into the program's TIMEOUT)
    "def f(x):\n    return 1 << 10_000_000\n",
    # past the program's own encoder: what its process sends is decoded under the bound in the runner
    "import engine.judge.plain as p\np.encode = lambda v, other=None: ['i', '7' * 3_000_000]\n"
    "def f(x):\n    return 1\n",
], ids=["returned", "forged"])
def test_an_answer_past_the_decode_bound_is_the_programs_output_limit(judge, program):
    problem = Problem(id="toy/bigint", source="toy", split="test", kind="function", statement="", entry_point="f",
                      function_tests=FunctionTests(asserts=["assert f(1) == 7", "assert f(2) == 7"]))
    start = time.monotonic()
    result = judge.judge(problem, program, code_is_program=True)
    assert result.verdict.value == "OUTPUT_LIMIT", result.failures[:1]
    assert time.monotonic() - start < 10  # 3 000 000 digits would take minutes to decode unbounded


def test_plain_decodes_under_its_bounds():
    with pytest.raises(plain.TooLarge):
        plain.decode(["i", "9" * (plain.MAX_INT_DIGITS + 2)])
    deep: object = 1
    for _ in range(plain.MAX_DEPTH + 5):
        deep = ["l", [deep]]
    with pytest.raises(plain.TooLarge):
        plain.decode(deep)
    with pytest.raises(plain.TooLarge):
        plain.encode(10 ** (plain.MAX_INT_DIGITS + 10))
    assert plain.decode(plain.encode(10 ** 1000)) == 10 ** 1000


def test_a_frame_nested_past_the_parser_is_a_garbled_stream():
    from engine.judge.local.worker import _Frames

    frames = types.SimpleNamespace(bad=False, eof=False)
    assert _Frames._decode(frames, [b"[" * 200_000]) == []
    assert frames.bad and frames.eof


def test_a_message_nested_past_the_parser_is_malformed_not_a_recursion_error():
    import os

    from engine.judge.local import wire

    r, w = os.pipe()
    try:
        wire.send_raw(w, b"[" * 50_000)  # within a pipe's buffer: no reader needed
        with pytest.raises(ValueError, match="recursion"):
            wire.receive(r)
        wire.send(w, {"ok": 1})
        assert wire.receive(r) == {"ok": 1}
    finally:
        os.close(r)
        os.close(w)
