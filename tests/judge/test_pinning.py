"""Worker CPU pinning: which CPU each worker, and every sandbox it forks, may run on."""

from __future__ import annotations

import os

import psutil

from engine.judge.api import Judge, JudgeConfig
from engine.judge.local.pool import worker_cpus
from engine.problem import FunctionTests, Problem

ALLOWED = sorted(os.sched_getaffinity(0))

AFFINITY = Problem(id="toy/affinity", source="toy", split="test", kind="function", statement="cpus", entry_point="cpus",
                   function_tests=FunctionTests(asserts=["assert cpus() == cpus()"]))
PROGRAM = "import os\ndef cpus():\n    return sorted(os.sched_getaffinity(0))\nprint(cpus())\n"


def _worker_affinities(judge: Judge) -> list[list[int]]:
    judge.stats()  # starts the workers
    workers = [psutil.Process(w.pid) for w in judge.backend._all]
    return [sorted(p.cpu_affinity()) for w in workers for p in (w, *w.children(recursive=True))]


def test_auto_pins_only_when_the_workers_cover_every_cpu():
    assert worker_cpus(JudgeConfig(workers=len(ALLOWED))) == ALLOWED
    assert worker_cpus(JudgeConfig(workers=2 * len(ALLOWED))) == ALLOWED * 2
    if len(ALLOWED) > 1:
        assert worker_cpus(JudgeConfig(workers=len(ALLOWED) - 1)) is None
    assert worker_cpus(JudgeConfig(workers=1, pin_workers=True)) == ALLOWED[:1]
    assert worker_cpus(JudgeConfig(workers=len(ALLOWED), pin_workers=False)) is None


def test_a_pinned_worker_its_nursery_and_its_sandboxes_share_one_cpu():
    with Judge(JudgeConfig(workers=2, pin_workers=True, cache=False)) as judge:
        expected = [[ALLOWED[slot % len(ALLOWED)]] for slot in range(2) for _ in ("worker", "nursery")]
        assert _worker_affinities(judge) == expected
        results = judge.judge_many([(AFFINITY, PROGRAM)] * 4, code_is_program=True)
    assert {r.stdout_tail.strip() for r in results} <= {str([c]) for c in ALLOWED[:2]}
    assert all(r.accepted for r in results)


def test_unpinned_workers_keep_every_cpu():
    with Judge(JudgeConfig(workers=1, pin_workers=False, cache=False)) as judge:
        assert _worker_affinities(judge) == [ALLOWED, ALLOWED]
        result = judge.judge(AFFINITY, PROGRAM, code_is_program=True)
    assert result.stdout_tail.strip() == str(ALLOWED)


def test_default_workers_follow_the_cpus_this_process_may_use():
    """Under a taskset or a cpuset, one worker per usable CPU, each pinned to its own."""
    os.sched_setaffinity(0, ALLOWED[:1])
    try:
        config = JudgeConfig()
        assert config.workers == 1
        assert worker_cpus(config) == ALLOWED[:1]
    finally:
        os.sched_setaffinity(0, ALLOWED)
