"""The REAL vLLM's Python source, of the version verl's `vllm` extra pins, for tests on a CPU.

vLLM's wheel cannot run here (its kernels are CUDA builds), but its pure-Python parts import with
a few small packages (the `dev` extra): `SamplingParams` and its validation, the output kinds, the
parallel-sampling parent request, the output processor, `LLMEngine`'s request and step handling.
`source()` downloads the wheel once (`pip download --no-deps`) into a cache folder and unpacks its
`.py` files and METADATA; the fake GPU forward pass (tests/fakes/vllm) runs on them.

`RLVR_VLLM_CACHE` names the cache folder (default ~/.cache/rlvr-run). Where the wheel cannot be
downloaded (no network) the tests that need it skip, saying so, unless `RLVR_REQUIRE_VLLM_SOURCE`
is set (CI sets it), when they fail.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from filelock import FileLock

VERSION = "0.24.0"  # the contract tests run against this; test_vllm_pin checks verl still pins it
REQUIRE_ENV = "RLVR_REQUIRE_VLLM_SOURCE"


class Unavailable(Exception):
    """The wheel could not be had (the reason is the message)."""


def cache_root() -> Path:
    return Path(os.environ.get("RLVR_VLLM_CACHE") or Path.home() / ".cache" / "rlvr-run")


def source(version: str = VERSION) -> Path:
    """The folder holding vLLM `version`'s `vllm/` package (Python files only) and its dist-info."""
    root = cache_root() / f"vllm-{version}"
    if _complete(root, version):
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    # Test processes (xdist workers) ask at once on a fresh clone: one downloads and unpacks, the
    # others wait for it and read its copy (they would otherwise unpack into one folder together).
    with FileLock(str(root) + ".lock"):
        if not _complete(root, version):
            _download(root, version)
    return root


def _complete(root: Path, version: str) -> bool:
    return (root / "vllm" / "_version.py").is_file() and (root / f"vllm-{version}.dist-info" / "METADATA").is_file()


def _download(root: Path, version: str) -> None:
    with tempfile.TemporaryDirectory(prefix="vllm-wheel-") as tmp:
        done = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                               "-d", tmp, f"vllm=={version}"], capture_output=True, text=True, timeout=900)
        wheels = list(Path(tmp).glob("vllm-*.whl"))
        if done.returncode != 0 or not wheels:
            raise Unavailable(f"pip download vllm=={version} failed: {(done.stderr or done.stdout).strip()[-300:]}")
        partial = root.with_name(root.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        with zipfile.ZipFile(wheels[0]) as wheel:
            for name in wheel.namelist():
                if name.endswith(".py") and name.startswith("vllm/") or name.endswith(".dist-info/METADATA"):
                    wheel.extract(name, partial)
        shutil.rmtree(root, ignore_errors=True)
        partial.rename(root)  # whole or not at all: a killed unpack is never taken for the source


def installed_version(root: Path) -> str:
    """The version the unpacked source says it is (its METADATA)."""
    [meta] = root.glob("vllm-*.dist-info/METADATA")
    for line in meta.read_text(encoding="utf-8").splitlines():
        if line.startswith("Version:"):
            return line.split(":", 1)[1].strip()
    raise ValueError(f"{meta} names no version")
