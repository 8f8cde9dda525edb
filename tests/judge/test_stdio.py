"""Stdin/stdout tests through the real judge: per-test verdicts, limits, large outputs, sparse mode."""

from __future__ import annotations

import pytest

from engine.judge.api import Judge, JudgeConfig
from engine.problem import Problem, StdioTest


def _problem(*pairs: tuple[str, str], pid: str = "toy/echo") -> Problem:
    return Problem(id=pid, source="toy", split="test", kind="stdio", statement="double it",
                   stdio_tests=[StdioTest(input=i, output=o) for i, o in pairs])


DOUBLE = _problem(("1\n", "2\n"), ("2\n", "4\n"), ("3\n", "6\n"))


@pytest.fixture(scope="module")
def judge():
    with Judge(JudgeConfig(timeout_s=1.0, wall_timeout_s=6.0, cache=False, workers=2,
                           max_output_bytes=8 * 1024 * 1024)) as j:
        yield j


def _verdicts(result) -> list[tuple[int, str]]:
    return [(f.index, f.verdict.value) for f in result.failures]


def test_per_test_timeout(judge):
    program = "n = int(input())\nwhile n == 2: pass\nprint(2 * n)\n"
    result = judge.judge(DOUBLE, program, code_is_program=True)
    assert result.verdict.value == "TIMEOUT" and (result.passed, result.total) == (2, 3)
    assert _verdicts(result) == [(1, "TIMEOUT")] and result.pass_ratio == pytest.approx(2 / 3)


def test_per_test_runtime_error(judge):
    program = "n = int(input())\nif n == 3:\n    raise KeyError('boom')\nprint(2 * n)\n"
    result = judge.judge(DOUBLE, program, code_is_program=True)
    assert result.verdict.value == "RUNTIME_ERROR" and result.passed == 2
    assert _verdicts(result) == [(2, "RUNTIME_ERROR")] and "KeyError" in result.failures[0].message
    assert "KeyError: 'boom'" in result.stderr_tail


def test_wrong_answer_reports_truncated_input_expected_got(judge):
    long_in, long_out = "7 " * 1000 + "\n", "14 " * 1000 + "\n"
    problem = _problem(("1\n", "2\n"), (long_in, long_out))
    result = judge.judge(problem, "print(*(2 * int(t) + 1 for t in input().split()))\n", code_is_program=True)
    assert result.verdict.value == "WRONG_ANSWER" and result.passed == 0
    second = result.failures[1]
    assert second.index == 1 and second.input.startswith("7 7 ") and second.expected.startswith("14 14 ")
    assert second.got.startswith("15 15 ")
    assert max(len(second.input), len(second.expected), len(second.got)) <= 300


def test_output_limit(judge):
    result = judge.judge(DOUBLE, "import sys\nsys.stdout.write('9' * (20 * 1024 * 1024))\n", code_is_program=True)
    assert result.verdict.value == "OUTPUT_LIMIT" and not result.accepted


def test_large_correct_output_is_accepted_not_timeout(judge):
    n = 2 * 1024 * 1024  # "1 " * n = 4 MiB
    problem = _problem((f"{n}\n", "1 " * n))
    result = judge.judge(problem, "import sys\nsys.stdout.write('1 ' * int(input()))\n", code_is_program=True)
    assert result.accepted and result.verdict.value == "ACCEPTED", (result.verdict, result.message)


def test_stdin_is_a_file_readable_with_fstat(judge):
    program = "import os\ndata = os.read(0, os.fstat(0).st_size).split()\nprint(2 * int(data[0]))\n"
    assert judge.judge(DOUBLE, program, code_is_program=True).accepted


def test_stdin_via_sys_stdin_buffer_without_final_newline(judge):
    program = "import sys\nfor line in sys.stdin.buffer:\n    print(2 * int(line))\n"
    problem = _problem(("5", "10"), ("6\n", "12"))
    assert judge.judge(problem, program, code_is_program=True).accepted


def test_sparse_stops_at_the_first_failure(judge):
    problem = _problem(("1\n", "2\n"), ("2\n", "4\n"), ("3\n", "6\n"), ("4\n", "8\n"), ("5\n", "10\n"))
    program = "n = int(input())\nif n >= 2:\n    while True: pass\nprint(2 * n)\n"
    dense = judge.judge(problem, program, code_is_program=True)
    assert _verdicts(dense) == [(1, "TIMEOUT"), (2, "TIMEOUT"), (3, "TIMEOUT")]
    sparse = judge.judge(problem, program, code_is_program=True, stop_on_first_failure=True)
    assert _verdicts(sparse) == [(1, "TIMEOUT")] and sparse.message == "stop_on_first_failure"
    assert (sparse.passed, sparse.total, sparse.accepted) == (1, 5, False)


def test_each_test_is_a_fresh_execution(judge):
    # State written by one test's run must not leak into the next one.
    program = ("import os\nseen = os.path.exists('mark')\nopen('mark', 'w').close()\n"
               "print(-1 if seen else 2 * int(input()))\n")
    assert judge.judge(DOUBLE, program, code_is_program=True).verdict.value in ("ACCEPTED", "WRONG_ANSWER")
    result = judge.judge(DOUBLE, "print(2 * int(input()))\n", code_is_program=True)
    assert result.accepted


def test_exit_code_nonzero_is_runtime_error_even_with_right_output(judge):
    result = judge.judge(DOUBLE, "print(2 * int(input()))\nraise SystemExit(3)\n", code_is_program=True)
    assert result.verdict.value == "RUNTIME_ERROR" and result.passed == 0


def test_program_closing_stdout_itself_exits_cleanly(judge):
    # CodeContests 306_C: `with sys.stdout as fout:` closes stdout; CPython's shutdown skips it.
    program = "import sys\nwith sys.stdin as fin, sys.stdout as fout:\n    print(2 * int(next(fin)), file=fout)\n"
    assert judge.judge(DOUBLE, program, code_is_program=True).accepted


def test_output_written_to_the_original_stdout_at_exit_is_kept(judge):
    # CodeContests 938_E: sys.stdout swapped for a StringIO, copied to sys.__stdout__ by an atexit hook.
    program = ("import atexit, io, sys\nbuf = io.StringIO()\nsys.stdout = buf\n"
               "atexit.register(lambda: sys.__stdout__.write(buf.getvalue()))\nprint(2 * int(input()))\n")
    assert judge.judge(DOUBLE, program, code_is_program=True).accepted
