"""The bench scripts still load against the library (they are run by hand, so a renamed or removed
function would otherwise go unnoticed until someone measures)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.mark.parametrize("path", sorted(BENCH.glob("*.py")), ids=lambda p: p.name)
def test_bench_script_imports(path, monkeypatch):
    name = f"bench_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)  # its dataclasses look their module up there
    spec.loader.exec_module(module)  # runs up to its `if __name__ == "__main__":` guard
    assert callable(getattr(module, "main", None))
