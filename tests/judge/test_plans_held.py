"""Workers keep the plans (tests) they were sent: each crosses the pipe once, not once per sample.

The judge mirrors what every worker holds and tells it which plans to forget; a worker asked to
run a plan it does not hold, or holding another plan under the same id, would give wrong or
INTERNAL_ERROR verdicts, so mixed samples of many problems through a tiny plan budget check both.
"""

from __future__ import annotations

import random

import pytest

from engine.judge.api import Judge, JudgeConfig
from engine.judge.cases import stdio_plan
from engine.judge.local import pool as local
from engine.problem import FunctionTests, Problem, StdioTest


def _function_problem(k: int) -> Problem:
    return Problem(id=f"toy/add{k}", source="toy", split="test", kind="function", statement="", entry_point="f",
                   function_tests=FunctionTests(asserts=[f"assert f({x}) == {x + k}" for x in range(3)]))


def _stdio_problem(k: int) -> Problem:
    return Problem(id=f"toy/echo{k}", source="toy", split="test", kind="stdio", statement="",
                   stdio_tests=[StdioTest(input=f"{x}\n", output=f"{x * k}\n") for x in range(3)])


def _samples(n_problems: int, rounds: int) -> list[tuple[Problem, str, bool]]:
    out = []
    for k in range(n_problems):
        fn, io = _function_problem(k), _stdio_problem(k)
        for _ in range(rounds):
            out.append((fn, f"def f(x):\n    return x + {k}\n", True))
            out.append((fn, f"def f(x):\n    return x + {k + 1}\n", False))
            out.append((io, f"print(int(input()) * {k})\n", True))
            out.append((io, f"print(int(input()) * {k} + 1)\n", False))
    random.Random(7).shuffle(out)
    return out


@pytest.mark.parametrize("plans", [2, local.PLANS])
def test_verdicts_stay_right_while_workers_forget_and_get_plans_again(monkeypatch, plans):
    monkeypatch.setattr(local, "PLANS", plans)
    samples = _samples(n_problems=6, rounds=3)
    with Judge(JudgeConfig(workers=2, cache=False)) as judge:
        for _ in range(2):
            results = judge.judge_many([(p, code) for p, code, _ in samples], code_is_program=True)
            assert [r.accepted for r in results] == [ok for _, _, ok in samples]
            assert {r.verdict.value for r in results} == {"ACCEPTED", "WRONG_ANSWER"}
        held = [w.plans for w in judge.backend._all]
    assert all(0 < len(h) <= plans for h in held)


def test_a_plan_crosses_to_a_worker_once_for_all_its_samples():
    problem = _function_problem(3)
    with Judge(JudgeConfig(workers=1, cache=False)) as judge:
        judge.judge_many([(problem, "def f(x):\n    return x + 3\n")] * 5, code_is_program=True)
        worker = judge.backend._all[0]
        assert len(worker.plans) == 1
        # The worker holds it: a job that names the plan without sending it is judged.
        assert judge.judge(problem, "def f(x):\n    return x + 3\n", code_is_program=True).accepted


def test_stdio_plans_are_the_same_objects_for_the_same_problem_object():
    a, b = _stdio_problem(2), _stdio_problem(2)
    assert stdio_plan(a, compare="tokens", tol=0.0) is stdio_plan(a, compare="tokens", tol=0.0)
    assert stdio_plan(a, compare="tokens", tol=0.0) is not stdio_plan(b, compare="tokens", tol=0.0)
    assert stdio_plan(a, compare="exact", tol=0.0)[1]["compare"] == "exact"


def test_workers_are_waited_on_past_fd_setsize():
    """A trainer's process can hold thousands of files: the judge must not wait with select()."""
    import os
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip("this machine's fd limit is below FD_SETSIZE")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    filler = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        with Judge(JudgeConfig(workers=1, cache=False)) as judge:
            judge.stats()  # starts the worker: its pipes get fds past the filler's
            assert min(w.proc.stdout.fileno() for w in judge.backend._all) > 1024
            problem = _function_problem(1)
            assert judge.judge(problem, "def f(x):\n    return x + 1\n", code_is_program=True).accepted
    finally:
        for fd in filler:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_threads_sharing_one_judge_get_their_own_verdicts():
    """verl's reward managers call from a pool of threads: each call takes idle workers as they
    free up, and plans, held per worker, never cross between the calls' problems."""
    from concurrent.futures import ThreadPoolExecutor

    samples = _samples(n_problems=4, rounds=2)
    chunks = [samples[k::4] for k in range(4)]
    with Judge(JudgeConfig(workers=2, cache=False)) as judge:
        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(lambda chunk: judge.judge_many([(p, c) for p, c, _ in chunk],
                                                                   code_is_program=True), chunks * 2))
    for chunk, got in zip(chunks * 2, results):
        assert [r.accepted for r in got] == [ok for _, _, ok in chunk]
