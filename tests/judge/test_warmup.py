"""The warm-up problems a worker runs before forking its nursery: their literal plans are what the
plan builder makes, they pass, and the worker is left as it was (CPU limit, signals, builtins)."""

from __future__ import annotations

import resource
import signal

import psutil
import pytest

from engine.judge.api import Judge, JudgeConfig
from engine.judge.cases import function_plan
from engine.judge.local import warmup
from engine.problem import FunctionTests, Problem


def _problem(wp: warmup.WarmupProblem) -> Problem:
    tests = FunctionTests(setup=wp.setup, asserts=wp.asserts, candidate=wp.candidate)
    return Problem(id=f"warmup/{wp.entry}", source="toy", split="test", kind="function", statement="",
                   entry_point=wp.entry, function_tests=tests)


@pytest.mark.parametrize("wp", warmup.PROBLEMS, ids=[p.entry for p in warmup.PROBLEMS])
def test_literal_plan_is_the_plan_builders(wp):
    assert function_plan(_problem(wp))[0] == wp.plan()


@pytest.mark.parametrize("wp", warmup.PROBLEMS, ids=[p.entry for p in warmup.PROBLEMS])
def test_warm_up_problem_passes_in_the_judge(wp):
    with Judge(JudgeConfig(timeout_s=2.0, workers=1, cache=False)) as judge:
        assert judge.judge(_problem(wp), wp.program, code_is_program=True).accepted


def test_warm_up_leaves_the_worker_as_it_found_it():
    with Judge(JudgeConfig(timeout_s=2.0, workers=1, cache=False)) as judge:
        judge.stats()  # starts the worker, which warms up before answering
        worker = psutil.Process(judge.backend._all[0].pid)
        assert worker.rlimit(psutil.RLIMIT_CPU) == resource.getrlimit(resource.RLIMIT_CPU)  # inherited from us
        caught = int(_status(worker)["SigCgt"], 16)
        assert not caught & (1 << (signal.SIGXCPU - 1)), "the runner's SIGXCPU handler stayed installed"


def _status(proc: psutil.Process) -> dict[str, str]:
    with open(f"/proc/{proc.pid}/status") as fh:
        return dict(line.rstrip("\n").split(":\t", 1) for line in fh if ":\t" in line)


def test_sandboxes_start_with_the_pre_imports_and_nothing_heavy():
    """Every module the worker holds is in every fork's page tables: what programs commonly import
    is there, and nothing big that none of them does (dataclasses alone brings inspect: +1.3 MB)."""
    probe = Problem(id="toy/modules", source="toy", split="test", kind="function", statement="", entry_point="f",
                    function_tests=FunctionTests(asserts=["assert f() == []"]))
    program = ("import sys\nHEAVY = ('dataclasses', 'inspect', 'ast', 'hashlib', 'threading', 'asyncio')\n"
               "def f():\n    return [m for m in HEAVY if m in sys.modules]\n"
               "print(sorted(m for m in ('typing', 're', 'json', 'collections') if m in sys.modules))\n")
    with Judge(JudgeConfig(timeout_s=2.0, workers=1, cache=False)) as judge:
        result = judge.judge(probe, program, code_is_program=True)
    assert result.accepted, result.failures
    assert result.stdout_tail.strip() == "['collections', 'json', 're', 'typing']"
