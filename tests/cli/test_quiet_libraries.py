"""Third-party progress bars and warnings stay off rlvr-run's terminal (a model the runner loads
itself: transformers' "Loading weights" bar) and go to a run's log (a launch script gets the
environment as the user had it)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.cli import main
from engine.runs.executors.base import QUIETED_ENV, RUNNER_QUIET_ENV, Job
from engine.runs.executors.local import LocalExecutor

ROOT = Path(__file__).resolve().parents[2]
LOAD = ("from transformers import AutoModelForCausalLM\n"
        "AutoModelForCausalLM.from_pretrained({path!r})\n")


@pytest.fixture
def clean_env(monkeypatch):
    for name in [*RUNNER_QUIET_ENV, QUIETED_ENV]:
        monkeypatch.delenv(name, raising=False)


def _load_in_runner(model: Path, quiet: bool) -> str:
    code = ("import engine.cli\n" + ("engine.cli.quiet_libraries()\n" if quiet else "") + LOAD.format(path=str(model)))
    env = {k: v for k, v in os.environ.items() if k not in (*RUNNER_QUIET_ENV, QUIETED_ENV)}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, check=True)
    return done.stdout + done.stderr


@pytest.mark.slow  # tens of seconds (a real study, server or trainer): `make test-all` and CI run it
def test_a_model_the_runner_loads_prints_no_progress_bar(tiny_model):
    assert "Loading weights" in _load_in_runner(tiny_model, quiet=False)  # what the terminal showed
    assert "Loading weights" not in _load_in_runner(tiny_model, quiet=True)


def test_the_runner_quiets_itself_and_its_runs_get_the_users_environment(tmp_path, clean_env, monkeypatch):
    monkeypatch.setenv("TRANSFORMERS_VERBOSITY", "info")  # the user's own choice stays, for runs too
    assert main(["validate", "--no-content", str(ROOT / "specs" / "smoke.yaml")]) == 0
    assert os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1" and os.environ["TRANSFORMERS_VERBOSITY"] == "info"

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "launch.sh").write_text("env > env.txt\n")
    executor = LocalExecutor(cpus=1)
    started = executor.start(Job(id="r", run_dir=run_dir, kind="eval"), attempt=1, log_path=run_dir / "logs" / "1.log")
    while executor.poll(started) is None:
        time.sleep(0.05)
    seen = dict(line.split("=", 1) for line in (run_dir / "env.txt").read_text().splitlines() if "=" in line)
    assert "HF_HUB_DISABLE_PROGRESS_BARS" not in seen and QUIETED_ENV not in seen
    assert seen["TRANSFORMERS_VERBOSITY"] == "info"
