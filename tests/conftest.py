"""Fixtures every test package may use."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATASETS = REPO.parent / "shared" / "datasets"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def shared_datasets() -> Path:
    """The real HumanEval / MBPP / CodeContests files. CI has them beside the clone."""
    if not SHARED_DATASETS.is_dir():
        pytest.skip(f"shared datasets not found at {SHARED_DATASETS}")
    return SHARED_DATASETS


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """A random-init tiny Qwen2 and its locally trained tokenizer (no hub), built once per session."""
    from engine.tinymodel import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"), hidden=32, layers=1, heads=2, kv_heads=1,
                            vocab_size=512)
