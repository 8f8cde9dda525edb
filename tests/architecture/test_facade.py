"""`import engine` exposes the stages as plain functions, loaded on first use."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import engine

REPO = Path(__file__).resolve().parents[2]


def test_every_public_name_resolves():
    for name in engine.__all__:
        assert getattr(engine, name) is not None, name


def test_importing_engine_loads_nothing_heavy():
    code = "import sys, engine; print(' '.join(sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            cwd=REPO).stdout.split()
    assert not {"pydantic", "torch", "rich", "engine.judge"} & set(loaded)


def test_a_dry_run_through_the_facade(tmp_path):
    outcome = engine.run_spec(REPO / "tests" / "runs" / "golden" / "spec.yaml", runs_dir=tmp_path / "runs",
                              dry_run=True)
    assert outcome.plan.runs and outcome.result is None
    assert not (tmp_path / "runs").exists()
