"""The judge's own failures are faults: INTERNAL_ERROR, judged again once, counted, never scored.

Faults of the runner's machinery that a healthy machine does not produce on demand (a fork
refused, memory it cannot get, a file it cannot open, a worker that exits mid-job) are injected
with `RLVR_JUDGE_FAULTS` (engine/judge/local/faults.py); a worker killed or stopped mid-job is
real. Where the judge's own limits used to be the program's (a file-size cap on the input the
runner writes, a per-uid process limit on the runner's own forks), a correct program is accepted.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import psutil
import pytest

from engine.judge.api import Judge, JudgeConfig
from engine.judge.local import faults
from engine.judge.local.limits import choose_process_bound
from engine.judge.local.pool import watchdog_s
from engine.problem import FunctionTests, Problem, StdioTest

ADD = Problem(id="toy/add", source="toy", split="test", kind="function", statement="add", entry_point="add",
              function_tests=FunctionTests(asserts=["assert add(1, 2) == 3", "assert add(2, 2) == 4"]))
CHECK = Problem(id="toy/add_check", source="toy", split="test", kind="function", statement="add", entry_point="add",
                function_tests=FunctionTests(candidate="candidate", check=(
                    "def check(candidate):\n    assert candidate(1, 2) == 3\n")))
SUM = Problem(id="toy/sum", source="toy", split="test", kind="stdio", statement="sum",
              stdio_tests=[StdioTest(input="1 2\n", output="3\n"), StdioTest(input="5 6\n", output="11\n")])
GOOD = {"function": "def add(a, b):\n    return a + b\n", "stdio": "a, b = map(int, input().split())\nprint(a + b)\n"}


def _config(**overrides) -> JudgeConfig:
    return JudgeConfig(**{"timeout_s": 1.0, "wall_timeout_s": 2.0, "workers": 1, "cache": False, **overrides})


@pytest.mark.parametrize("fault,problems", [
    ("fork", [ADD, CHECK, SUM]),  # the runner's fork of the program's process, or of a stdio test
    ("memory", [ADD, CHECK, SUM]),  # out of memory in the runner's own code
    ("open", [SUM]),  # a file the runner cannot open
    ("worker-dies", [ADD, SUM]),  # the worker exits mid-job
])
def test_an_injected_fault_of_the_machinery_is_a_judge_fault(monkeypatch, fault, problems):
    monkeypatch.setenv(faults.ENV, fault)
    with Judge(_config()) as judge:
        for problem in problems:
            before = judge.stats()["judge_faults"]
            result = judge.judge(problem, GOOD[problem.kind], code_is_program=True)
            assert result.verdict.value == "INTERNAL_ERROR", (fault, problem.id, result.verdict, result.failures[:1])
            assert not result.accepted and "judge fault" in ((result.message or "") + str(result.failures))
            assert judge.stats()["judge_faults"] == before + 2  # judged again once, and counted each time


def _kill_worker_while_judging(judge: Judge, problem: Problem, program: str, hit) -> object:
    """Judge `program`, and once its runner is busy, do `hit(worker_pid)`."""
    judge.stats()  # starts the worker
    worker = judge.backend._all[0].pid
    result = {}
    thread = threading.Thread(target=lambda: result.setdefault("r", judge.judge(problem, program,
                                                                                 code_is_program=True)))
    thread.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # its nursery's runner has a child: the program is running
        kids = psutil.Process(worker).children(recursive=True)
        if len(kids) >= 3:
            break
        time.sleep(0.01)
    hit(worker)
    thread.join(120)
    return result["r"]


def test_a_worker_killed_mid_job_is_replaced_and_the_sample_judged_again():
    slow_but_right = "import time\ntime.sleep(0.5)\n" + GOOD["function"]
    with Judge(_config()) as judge:
        result = _kill_worker_while_judging(judge, ADD, slow_but_right, lambda pid: os.kill(pid, signal.SIGKILL))
        assert result.accepted, (result.verdict, result.message)  # the second judgement stands
        assert judge.stats()["judge_faults"] == 1


def test_a_hung_worker_is_found_replaced_and_its_sample_judged_again():
    """A stopped worker answers nothing: past every guard of its job (`watchdog_s`) the pool kills
    it, starts another and judges the sample there."""
    one = Problem(id="toy/one", source="toy", split="test", kind="stdio", statement="",
                  stdio_tests=[StdioTest(input="1 2\n", output="3\n")])
    slow_but_right = "import time\ntime.sleep(0.3)\n" + GOOD["stdio"]
    with Judge(_config(timeout_s=0.25, wall_timeout_s=0.5)) as judge:
        start = time.monotonic()
        result = _kill_worker_while_judging(judge, one, slow_but_right, lambda pid: os.kill(pid, signal.SIGSTOP))
        took = time.monotonic() - start
    assert result.accepted, (result.verdict, result.message)
    assert judge.stats()["judge_faults"] == 1
    limit = watchdog_s({"order": [0], "limits": {"wall_s": 0.5}})
    assert limit <= took < limit + 30


def test_the_runners_own_limits_are_not_the_programs():
    """The runner writes each stdio input (here 2 MB, over the 1 MB output cap) and forks the
    program's processes (here with a process limit of 1): before, both were limited as the
    program is, and a correct program scored RUNTIME_ERROR."""
    big = Problem(id="toy/len", source="toy", split="test", kind="stdio", statement="",
                  stdio_tests=[StdioTest(input="x" * (2 << 20) + "\n", output=f"{2 << 20}\n")])
    with Judge(_config(max_output_bytes=1 << 20, max_processes=1)) as judge:
        assert judge.judge(big, "print(len(input()))\n", code_is_program=True).accepted
        for problem in (ADD, CHECK, SUM):
            result = judge.judge(problem, GOOD[problem.kind], code_is_program=True)
            assert result.accepted, (problem.id, result.verdict, result.failures[:1])
        forks = judge.judge(ADD, "import os\nif os.fork() == 0:\n    os._exit(0)\n" + GOOD["function"],
                            code_is_program=True)
        assert forks.verdict.value == "RUNTIME_ERROR"  # the program's own processes stay bounded


def test_where_the_per_uid_process_limit_is_sound():
    assert choose_process_bound(sandbox_uid=True, userns=False, pidns=True, release="4.18.0-553.el8_10.x86_64") == "rlimit"
    assert choose_process_bound(sandbox_uid=False, userns=True, pidns=True, release="4.18.0-553.el8_10.x86_64") == "no-fork"
    assert choose_process_bound(sandbox_uid=False, userns=True, pidns=True, release="5.13.19") == "no-fork"
    assert choose_process_bound(sandbox_uid=False, userns=True, pidns=True, release="5.14.0-70") == "rlimit"
    assert choose_process_bound(sandbox_uid=False, userns=True, pidns=True, release="6.18.44-fc") == "rlimit"
    assert choose_process_bound(sandbox_uid=False, userns=True, pidns=False, release="6.8.0") == "no-fork-no-signals"
    assert choose_process_bound(sandbox_uid=False, userns=False, pidns=False, release="6.8.0") == "no-fork-no-signals"


_AS_NOBODY = r'''
import json, os, sys
os.environ["RLVR_JUDGE_FAULTS"] = sys.argv[1]
from engine.judge.api import Judge, JudgeConfig, UnsandboxedJudge
from engine.problem import FunctionTests, Problem
ADD = Problem(id="toy/add", source="toy", split="test", kind="function", statement="add", entry_point="add",
              function_tests=FunctionTests(asserts=["assert add(1, 2) == 3"]))
GOOD = "def add(a, b):\n    return a + b\n"
PROGRAMS = {
    "good": GOOD,
    "threads": "import threading\nr = []\nt = threading.Thread(target=r.append, args=(1,))\nt.start()\nt.join()\n" + GOOD,
    "fork": "import os\nif os.fork() == 0:\n    os._exit(0)\n" + GOOD,
    "daemon": "import os, time\ntry:\n    if os.fork() == 0:\n        os.setsid()\n        time.sleep(30)\n"
              "        os._exit(0)\nexcept OSError:\n    pass\n" + GOOD,
    "kill_all": "import os, signal\ntry:\n    os.kill(-1, signal.SIGKILL)\nexcept OSError:\n    pass\n" + GOOD,
    # Reaching another process without a signal syscall: its CPU limit set to 0, or an fd whose
    # owner it is (sent SIGKILL, by F_SETSIG, when the fd is ready). Wrong where it could.
    "prlimit_other": "import os, resource\ntry:\n    resource.prlimit(os.getppid(), resource.RLIMIT_CORE, (0, 0))\n"
                     "    REACHED = 1\nexcept OSError:\n    REACHED = 0\ndef add(a, b):\n    return a + b + REACHED\n",
    "fd_owner_other": "import fcntl, os, struct\nr, w = os.pipe()\nREACHED = 0\nfor set_owner in (lambda: fcntl.fcntl(r, "
                      "fcntl.F_SETOWN, os.getppid()), lambda: fcntl.fcntl(r, 10, 9), lambda: fcntl.ioctl(r, 0x8901, "
                      "struct.pack('i', os.getppid()))):\n    try:\n        set_owner()\n        REACHED += 1\n"
                      "    except OSError:\n        pass\ndef add(a, b):\n    return a + b + REACHED\n",
}
out = {}
with Judge(JudgeConfig(workers=1, cache=False)) as judge:
    out["level"] = judge.backend.isolation_level()
    try:
        judge.judge(ADD, GOOD, code_is_program=True)
    except UnsandboxedJudge as exc:
        out["refused"] = str(exc)
with Judge(JudgeConfig(workers=1, cache=False, allow_unsandboxed=True, timeout_s=2.0)) as judge:
    out["verdicts"] = {name: judge.judge(ADD, p, code_is_program=True).verdict.value for name, p in PROGRAMS.items()}
    out["isolation"] = judge.stats()["isolation"]
print(json.dumps(out))
'''


def _as_nobody(fault: str) -> dict:
    import json
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root to become an ordinary user in a user namespace")
    repo = Path(__file__).resolve().parents[2]
    run = subprocess.run(["unshare", "--user", "--map-user=65534", "--map-group=65534", sys.executable, "-c",
                          _AS_NOBODY, fault], cwd=repo, env={**os.environ, "PYTHONPATH": str(repo)},
                         capture_output=True, text=True, timeout=300)
    if run.returncode != 0 and "unshare failed" in run.stderr:
        pytest.skip("this machine refuses unprivileged user namespaces")
    assert run.returncode == 0 and run.stdout.strip(), run.stderr[-3000:]  # a kill(-1) that got out ends it
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_in_a_user_namespace_without_a_pid_namespace_the_judge_refuses_and_programs_reach_no_process():
    """Where the kernel refuses the PID namespace, a sample runs as the user's own uid beside the
    judge, the trainer and vLLM: the judge refuses unless allowed, and when allowed the program
    may neither signal another process (kill(-1) used to end every process of the user) nor
    start one that would outlive it."""
    out = _as_nobody("pidns")
    assert "pidns" not in out["level"] and "userns" in out["level"]
    assert "the user's processes" in out["refused"] and "allow_unsandboxed: true" in out["refused"]
    assert "no-new-processes,no-signals" in out["isolation"]
    verdicts = out["verdicts"]
    assert verdicts["good"] == verdicts["threads"] == verdicts["daemon"] == verdicts["kill_all"] == "ACCEPTED"
    assert verdicts["prlimit_other"] == verdicts["fd_owner_other"] == "ACCEPTED"
    assert verdicts["fork"] == "RUNTIME_ERROR"


def test_before_linux_5_14_a_user_namespace_bounds_processes_without_the_per_uid_limit():
    """On a kernel that counts RLIMIT_NPROC per host uid (told here by an injected fault), the
    runner forks without it and the program may start threads but no process."""
    out = _as_nobody("old-kernel")
    assert out["level"] == "userns+netns+ipcns+mountns+pidns" and "refused" not in out
    assert "no-new-processes)" in out["isolation"]
    verdicts = out["verdicts"]
    assert verdicts["good"] == verdicts["threads"] == verdicts["daemon"] == verdicts["kill_all"] == "ACCEPTED"
    assert verdicts["fork"] == "RUNTIME_ERROR"
