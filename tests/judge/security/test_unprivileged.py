"""The hostile suite as an ordinary user: the judge enters a user namespace of its own and gets
the same isolation, and the same verdicts, as root.

Run as root, this test runs test_hostile.py again under `unshare --user` as uid and gid 65534
(nobody), with the judge's workers under the machine's own interpreter (`python3 -I -S`: the
worker side needs the standard library only), and compares its verdicts with this run's. Run as
an ordinary user, test_hostile.py itself is the unprivileged run.
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

from tests.judge.security.test_hostile import ADD, CASES, GOOD_ADD, VERDICTS, VERDICTS_FILE_ENV, WORKER_PYTHON_ENV

NOBODY = 65534
HERE = Path(__file__).resolve()
REPO = HERE.parents[3]
SYSTEM_PYTHON = next((p for p in ("/usr/bin/python3", "/usr/local/bin/python3") if os.access(p, os.X_OK)), None)
UNSHARE = shutil.which("unshare")
AS_NOBODY = [UNSHARE or "unshare", "--user", f"--map-user={NOBODY}", f"--map-group={NOBODY}"]
FULL = "userns+netns+ipcns+mountns+pidns"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="not root: test_hostile.py ran unprivileged already")


def _can_be_nobody() -> bool:
    if UNSHARE is None:
        return False
    return subprocess.run([*AS_NOBODY, "true"], capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def unprivileged(tmp_path_factory) -> dict:
    if not _can_be_nobody():
        pytest.skip("this machine refuses unprivileged user namespaces (unshare --user)")
    out = tmp_path_factory.mktemp("nobody") / "verdicts.json"
    os.chmod(out.parent, 0o777)
    env = {**os.environ, VERDICTS_FILE_ENV: str(out), "PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1"}
    if SYSTEM_PYTHON:
        env[WORKER_PYTHON_ENV] = SYSTEM_PYTHON
    run = subprocess.run([*AS_NOBODY, sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          str(HERE.with_name("test_hostile.py"))], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=1800)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    return json.loads(out.read_text())


@pytest.mark.slow  # the whole hostile suite as uid 65534: `make test-all` and CI run it
def test_the_hostile_suite_passes_as_nobody_with_full_isolation(unprivileged):
    assert unprivileged["uid"] == NOBODY
    assert unprivileged["level"] == FULL, unprivileged["isolation"]
    assert "userns(no-capabilities)" in unprivileged["isolation"]


@pytest.mark.slow  # the whole hostile suite as uid 65534: `make test-all` and CI run it
def test_same_verdicts_as_root(unprivileged):
    ours = dict(VERDICTS)
    if len(ours) < len(CASES):  # this file ran alone: judge the cases here
        with Judge(JudgeConfig(timeout_s=1.0, wall_timeout_s=3.0, memory_mb=512, max_output_bytes=1024 * 1024,
                               cache=False, workers=2)) as judge:
            assert judge.backend.isolation_level() == "sandbox-uid+netns+ipcns+mountns+pidns"
            for name, problem, program, _ in CASES:
                ours[name] = judge.judge(problem, program, code_is_program=True).verdict.value
    theirs = unprivileged["verdicts"]
    assert set(theirs) == {c[0] for c in CASES}
    # Where a case allows one verdict it is the same one; where it allows several (a fork bomb may
    # end on its CPU limit or on a failed fork), both runs gave one of them.
    for name, _, _, allowed in CASES:
        assert theirs[name] in allowed and ours[name] in allowed, (name, ours[name], theirs[name])
        if len(allowed) == 1:
            assert theirs[name] == ours[name], name


def test_the_workers_run_under_the_system_interpreter():
    """The worker side imports the standard library only: the machine's own python3 runs it."""
    if SYSTEM_PYTHON is None:
        pytest.skip("no system python3")
    with Judge(JudgeConfig(workers=1, cache=False, python=SYSTEM_PYTHON)) as judge:
        assert judge.judge(ADD, GOOD_ADD, code_is_program=True).accepted
        assert judge.backend.isolation_level() == "sandbox-uid+netns+ipcns+mountns+pidns"
