"""A second runner on a busy runs folder is refused at once: the lock is tried before the spec
is validated, before even the libraries validation needs are imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from engine.runs.runlock import RunLock

ROOT = Path(__file__).resolve().parents[2]


def test_a_second_runner_is_refused_before_validation_imports_anything(tmp_path):
    spec = tmp_path / "bad.yaml"  # validation would refuse it: the lock must speak first
    spec.write_text("name: bad\nbase_model: nowhere\ndatasets: {}\nphases: {}\nseeds: []\n")
    runs = tmp_path / "runs"
    probe = ("import json, sys, engine.cli\n"
             f"code = engine.cli.main([{str(spec)!r}, '--runs-dir', {str(runs)!r}])\n"
             "print(json.dumps([code, sorted(sys.modules)]))")
    with RunLock(runs):
        out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True,
                             env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "COLUMNS": "200"})
    code, modules = json.loads(out.stdout.splitlines()[-1])
    assert code == 2 and "another rlvr-run is executing" in out.stderr and f"pid {os.getpid()}" in out.stderr
    loaded = set(modules)
    assert not {"engine.runs.preflight", "engine.isolation.validate", "engine.spec.load", "engine.runs.pipeline",
                "engine.report.generate"} & loaded
    assert not [m for m in loaded if m.split(".")[0] in ("numpy", "torch", "datasketch", "matplotlib")]


def test_a_dry_run_takes_no_lock(tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text("name: bad\nbase_model: nowhere\ndatasets: {}\nphases: {}\nseeds: []\n")
    runs = tmp_path / "runs"
    with RunLock(runs):
        out = subprocess.run([sys.executable, "-m", "engine.cli", str(spec), "--runs-dir", str(runs), "--dry-run"],
                             cwd=ROOT, capture_output=True, text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 1 and "bad.yaml:" in out.stderr  # validation speaks: a dry run writes nothing
