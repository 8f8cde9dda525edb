"""A reader that goes away (`rlvr-run status --json | head`) stops rlvr-run quietly, as it stops Unix tools."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("flags", [["--json"], []], ids=["print", "rich"])
def test_a_closed_stdout_ends_without_a_traceback(tmp_path: Path, flags: list[str]):
    # stdout's reader is gone before the command writes: every write to it fails
    proc = subprocess.Popen([sys.executable, "-m", "engine.cli", "status", *flags, "--runs-dir", str(tmp_path)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait() == 141, err  # 128 + SIGPIPE, what a shell reports for `yes | head`
    assert "Traceback" not in err and "BrokenPipeError" not in err
