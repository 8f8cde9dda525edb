"""The isolation level is part of every number, and a judge that cannot isolate refuses to judge.

A real unsandboxed judge: as root, `unshare --user --map-user=65534` without a group mapping
runs this project as nobody with an unmapped gid, where the kernel refuses the judge a user
namespace of its own (the gid must be mapped), so it obtains no isolation at all.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine.judge.api import Judge, JudgeConfig
from engine.judge.config import judged_unsandboxed, missing_isolation
from engine.problem import FunctionTests, Problem

REPO = Path(__file__).resolve().parents[2]
ADD = Problem(id="toy/add", source="toy", split="test", kind="function", statement="add", entry_point="add",
              function_tests=FunctionTests(asserts=["assert add(1, 2) == 3"]))
GOOD = "def add(a, b):\n    return a + b\n"


def test_levels_name_what_is_missing():
    assert missing_isolation("userns+netns+ipcns+mountns+pidns") == []
    assert missing_isolation("sandbox-uid+netns+ipcns+mountns+pidns") == []
    assert missing_isolation("remote") == []
    assert missing_isolation("none") == ["the network", "the filesystem", "the user's processes"]
    assert missing_isolation("userns+netns+ipcns+pidns") == ["the filesystem"]
    assert judged_unsandboxed("rlvr-judge-1/local/cpu6s/mem1024MB/tokens/none")
    assert judged_unsandboxed("rlvr-judge-1/local/cpu6s/mem1024MB/tokens/userns+netns")
    assert not judged_unsandboxed("rlvr-judge-1/local/cpu6s/mem1024MB/tokens/userns+netns+ipcns+mountns+pidns")
    assert not judged_unsandboxed("rlvr-judge-1/local/cpu6s/mem1024MB/tokens")  # recorded before levels


def test_the_version_ends_with_the_level_obtained():
    with Judge(JudgeConfig(workers=1)) as judge:
        level = judge.backend.isolation_level()
        assert judge.version == f"{judge.config.version}/{level}"
        assert not missing_isolation(level), judge.stats()["isolation"]
        assert judge.judge(ADD, GOOD, code_is_program=True).accepted


_FROM_CWD = """
import json
from engine.judge.api import Judge, JudgeConfig
from engine.problem import FunctionTests, Problem
add = Problem(id="toy/add", source="toy", split="test", kind="function", statement="add", entry_point="add",
              function_tests=FunctionTests(asserts=["assert add(1, 2) == 3"]))
with Judge(JudgeConfig(workers=1)) as judge:
    print(json.dumps([judge.backend.isolation_level(), judge.judge(add, "def add(a, b):\\n    return a + b\\n",
                                                                   code_is_program=True).accepted]))
"""


@pytest.mark.parametrize("cwd", ["/tmp", "/var/tmp"])
def test_a_judge_started_from_a_fresh_mount_point_isolates_fully(cwd):
    # The working directory is hidden from samples; /tmp itself was then covered again after the
    # worker's fresh /tmp held its work directory and the interpreter's staged directories.
    run = subprocess.run([sys.executable, "-c", _FROM_CWD], cwd=cwd, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert run.returncode == 0, run.stderr[-3000:]
    level, accepted = json.loads(run.stdout.splitlines()[-1])
    assert not missing_isolation(level) and accepted, level


_UNSANDBOXED = """
import json, sys
from engine.judge.api import Judge, JudgeConfig, UnsandboxedJudge
from engine.judge.ground_truth import ground_truth_from_problem
from engine.judge import reward
from engine.problem import FunctionTests, Problem
ADD = Problem(id="toy/add", source="toy", split="test", kind="function", statement="add", entry_point="add",
              function_tests=FunctionTests(asserts=["assert add(1, 2) == 3"]))
GOOD = "def add(a, b):\\n    return a + b\\n"
out = {}
with Judge(JudgeConfig(workers=1)) as judge:
    try:
        judge.judge(ADD, GOOD, code_is_program=True)
    except UnsandboxedJudge as exc:
        out["refused"] = str(exc)
    out["version"] = judge.version
try:
    reward.compute_score("toy", "```python\\n" + GOOD + "```", ground_truth_from_problem(ADD))
except UnsandboxedJudge:
    out["reward_refused"] = True
with Judge(JudgeConfig(workers=1, allow_unsandboxed=True)) as judge:
    out["allowed"] = judge.judge(ADD, GOOD, code_is_program=True).verdict.value
print(json.dumps(out))
"""


def test_a_judge_without_isolation_refuses_unless_allowed():
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root to become nobody with an unmapped group")
    run = subprocess.run(["unshare", "--user", "--map-user=65534", sys.executable, "-c", _UNSANDBOXED],
                         cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                         timeout=300)
    if run.returncode != 0 and "unshare failed" in run.stderr:
        pytest.skip("this machine refuses unprivileged user namespaces")
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["version"].endswith("/none")
    assert "cannot isolate the network and the filesystem" in out["refused"]
    assert "fix:" in out["refused"] and "allow_unsandboxed: true" in out["refused"]
    assert out["reward_refused"] is True  # training stops instead of rewarding unsandboxed
    assert out["allowed"] == "ACCEPTED"


def test_the_judges_working_directory_and_the_run_directory_are_hidden(tmp_path, monkeypatch):
    """A GRPO run's directory holds the exported training data, tests included: no sample reads it,
    wherever the run lives (here under /tmp, which is no data root)."""
    cwd, run_dir = tmp_path / "cwd", tmp_path / "run"
    for d in (cwd, run_dir):
        d.mkdir()
        (d / "tests.jsonl").write_text("the answers\n")
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("RLVR_RUN_DIR", str(run_dir))
    from engine.judge.local.spawn import hidden_dirs

    assert {str(cwd), str(run_dir)} <= set(hidden_dirs())  # hidden wherever they are, not only under /tmp
    reads = "".join(f"try:\n    open({str(d / 'tests.jsonl')!r}).read()\n    seen.append({str(d)!r})\n"
                    "except OSError:\n    pass\n" for d in (cwd, run_dir))
    with Judge(JudgeConfig(workers=1, cache=False)) as judge:
        result = judge.judge(ADD, "seen = []\n" + reads + "def add(a, b):\n    return a + b if not seen else 0\n",
                             code_is_program=True)
    assert result.accepted, (result.verdict, result.failures[:1])


def test_a_replacement_worker_at_a_weaker_level_stops_the_judge(tmp_path):
    """The version a caller records before judging names the first workers' level: a worker that
    dies and comes back weaker (here a real one started as nobody with an unmapped group, which
    gets no isolation at all) must stop the judge, never judge under the stronger name."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root to start a worker as nobody with an unmapped group")
    from engine.judge.config import IsolationChanged

    weaker = tmp_path / "python-as-nobody"
    weaker.write_text(f"#!/bin/sh\nexec unshare --user --map-user=65534 {sys.executable} \"$@\"\n")
    weaker.chmod(0o755)
    with Judge(JudgeConfig(workers=1, cache=False)) as judge:
        version = judge.version
        assert not judged_unsandboxed(version)
        assert judge.judge(ADD, GOOD, code_is_program=True).accepted
        judge.backend.config.python = str(weaker)  # whatever starts next starts weaker
        for worker in judge.backend._all:
            worker.proc.kill()
            worker.proc.wait()
        with pytest.raises(IsolationChanged, match="'none'"):
            judge.judge(ADD, GOOD + "# after the death\n", code_is_program=True)
        with pytest.raises(IsolationChanged):  # and for good: no later call judges under the old name
            judge.judge(ADD, GOOD + "# later\n", code_is_program=True)


def test_the_reward_stops_training_when_the_level_changes(tmp_path):
    """A GRPO step whose judge changed level fails with the fix; it never trains on rewards of 0."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root to start a worker as nobody with an unmapped group")
    from engine.judge import reward
    from engine.judge.config import IsolationChanged
    from engine.judge.ground_truth import ground_truth_from_problem
    from engine.judge.reward_settings import RewardSettings

    config = tmp_path / "config.yaml"
    config.write_text("judge: {concurrency: 1}\n")
    truth = ground_truth_from_problem(ADD)
    answer = "```python\n" + GOOD + "```"
    [first] = reward.compute_score_batch(["toy"], [answer], [truth], run_config=str(config))
    assert first["score"] == 1.0
    judge = reward._JUDGES.get(RewardSettings.resolve({"run_config": str(config)}, None))
    weaker = tmp_path / "python-as-nobody"
    weaker.write_text(f"#!/bin/sh\nexec unshare --user --map-user=65534 {sys.executable} \"$@\"\n")
    weaker.chmod(0o755)
    judge.backend.config.python = str(weaker)
    for worker in judge.backend._all:
        worker.proc.kill()
        worker.proc.wait()
    with pytest.raises(IsolationChanged):
        reward.compute_score_batch(["toy"], [answer.replace("b\n", "b  # changed\n")], [truth], run_config=str(config))
