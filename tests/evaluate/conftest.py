"""The vLLM the backend meets in these tests: the real vLLM's Python source (the version verl pins,
downloaded once into a cache) with a FAKE GPU forward pass (tests/fakes/vllm)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

FAKES = Path(__file__).resolve().parents[1] / "fakes"


def _load_vllm_source():
    """tests/fakes/vllm_source.py, loaded by path: tests/fakes stays off sys.path (it holds the fake
    `vllm`, which only the tests that ask for it may import)."""
    spec = importlib.util.spec_from_file_location("vllm_source", FAKES / "vllm_source.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


vllm_source = _load_vllm_source()


@pytest.fixture(scope="session")
def vllm_root() -> Path:
    """The unpacked vLLM source; skips (fails where CI requires it) when it cannot be downloaded."""
    try:
        return vllm_source.source()
    except vllm_source.Unavailable as exc:
        if os.environ.get(vllm_source.REQUIRE_ENV):
            pytest.fail(f"{exc} (${vllm_source.REQUIRE_ENV} is set: the vLLM contract tests must run)")
        pytest.skip(f"vLLM {vllm_source.VERSION}'s source is needed and PyPI cannot be reached: {exc}")


@pytest.fixture
def fake_vllm(vllm_root, tmp_path, monkeypatch):
    """vLLM (real source, fake GPU) importable as `vllm` here and in the processes this test starts;
    returns a function giving the events its engines logged."""
    log = tmp_path / "fake_vllm.jsonl"
    monkeypatch.syspath_prepend(str(FAKES))
    monkeypatch.setenv("PYTHONPATH", f"{FAKES}:{Path.cwd()}")
    monkeypatch.setenv("RLVR_VLLM_SOURCE", str(vllm_root))
    monkeypatch.setenv("FAKE_VLLM_LOG", str(log))
    monkeypatch.setenv("RLVR_VLLM_COMPILE_CACHE", str(tmp_path / "compile-cache"))
    sys.modules.update(_LOADED)  # imported once per process (seconds), then kept aside between tests
    import vllm

    assert vllm.FAKE
    yield lambda: vllm.events(str(log))
    # the next test of this process sees no vllm unless it asks for this one too
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        _LOADED[name] = sys.modules.pop(name)


_LOADED: dict = {}
