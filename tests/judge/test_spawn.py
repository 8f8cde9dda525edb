"""Workers started early (`rlvr-run judge` starts them before its imports): the pool takes the ones
made for what it would make, starts its own otherwise, and none outlives the process unused."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from engine.judge.api import Judge, JudgeConfig
from engine.judge.local import spawn
from engine.problem import FunctionTests, Problem

ROOT = Path(__file__).resolve().parents[2]
PLUS = Problem(id="toy/plus", source="toy", split="test", kind="function", statement="plus", entry_point="plus",
               function_tests=FunctionTests(asserts=["assert plus(1) == 2"]))


def test_the_pool_takes_the_workers_started_early_for_it():
    config = JudgeConfig(workers=2, pin_workers=False, cache=False)
    spawn.start_early_for(config)
    early = [proc for _, proc in spawn._early]
    with Judge(config) as judge:
        [result] = judge.judge_many([(PLUS, "def plus(x):\n    return x + 1\n")], code_is_program=True)
        assert result.accepted
        assert {w.proc for w in judge.backend._all} == set(early) and not spawn._early


def test_workers_started_for_another_cpu_or_directory_are_not_taken(tmp_path, monkeypatch):
    spawn.start_early([None], sys.executable)
    [(_, stray)] = spawn._early
    monkeypatch.chdir(tmp_path)  # the sandbox must hide this directory too: the early worker does not
    with Judge(JudgeConfig(workers=1, pin_workers=False, cache=False)) as judge:
        judge.stats()
        assert judge.backend._all[0].proc is not stray
    spawn.close_early()
    assert stray.poll() is not None and not spawn._early


def test_an_early_worker_no_pool_took_ends_with_the_process():
    code = ("import sys; from engine.judge.local import spawn; spawn.start_early([None], sys.executable); "
            "print(spawn._early[0][1].pid, flush=True)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60,
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    pid = int(out.stdout.split()[0])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return
    # A zombie is gone for every purpose but its parent's (the subprocess has exited).
    with open(f"/proc/{pid}/stat") as fh:
        assert fh.read().rpartition(")")[2].split()[0] == "Z"


def test_threads_taking_at_once_each_get_a_worker_of_their_own():
    spawn.start_early([None] * 4, sys.executable)
    early = {proc for _, proc in spawn._early}
    with ThreadPoolExecutor(4) as pool:
        taken = list(pool.map(lambda _: spawn.take(None, sys.executable), range(4)))
    try:
        assert len(set(taken)) == 4 and set(taken) == early and not spawn._early
    finally:
        for proc in taken:
            proc.stdin.close()
            proc.wait(timeout=10)
            proc.stdout.close()
