"""A built wheel works anywhere: installed (not editable) into a fresh venv and run from an
unrelated directory, it finds its own templates and registry."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # builds a wheel into a fresh venv; `make test-all` and CI run it

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A venv holding the wheel; the dependencies come from this interpreter's site-packages,
    added as a plain path, so the checkout's editable install is not seen."""
    root = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", str(REPO),
                    "-w", str(root / "dist")], check=True, capture_output=True, cwd=root)
    [wheel] = (root / "dist").glob("rlvr_run-*.whl")
    venv.create(root / "venv", with_pip=False)
    python = root / "venv" / "bin" / "python"
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", site, str(wheel)],
                   check=True, capture_output=True)
    (Path(site) / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return root


def _run(installed: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RLVR_RUN_CACHE_DIR": str(cwd / "cache")}
    env.pop("PYTHONPATH", None)
    return subprocess.run([installed / "venv" / "bin" / "python", "-m", "engine.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_wheel_is_what_runs(installed, tmp_path):
    out = subprocess.run([installed / "venv" / "bin" / "python", "-c", "import engine; print(engine.__file__)"],
                         cwd=tmp_path, capture_output=True, text=True, check=True, env={"PATH": os.environ["PATH"]})
    assert str(installed) in out.stdout and str(REPO) not in out.stdout


def test_validate_and_dry_run_from_an_unrelated_directory(installed, tmp_path):
    shutil.copy(REPO / "specs" / "matrix.yaml", tmp_path / "matrix.yaml")
    validated = _run(installed, "validate", "--no-content", "matrix.yaml", cwd=tmp_path)
    assert validated.returncode == 0, validated.stderr
    assert "ok: rlvr-coder-7b" in validated.stdout
    dry = _run(installed, "matrix.yaml", "--dry-run", cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    assert "plan of rlvr-coder-7b: 62 runs" in dry.stdout
    assert not (tmp_path / "runs").exists()
