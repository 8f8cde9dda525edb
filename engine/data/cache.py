"""On-disk cache of normalized problems, so re-validation never re-streams a Hub split.

Keyed by everything that decides the normalized content: source, Hub id, config,
revision, split, the generated-test cap and the converter version. Stored as
gzipped JSON Lines of `Problem`s with the fingerprint in a sidecar.
Location: $RLVR_RUN_CACHE_DIR, else ~/.cache/rlvr-run.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Optional

from filelock import FileLock

from engine.files import atomic_write
from engine.problem import Problem

# Bump when a converter changes what it produces for the same rows.
CONVERTER_VERSION = 1


def cache_root() -> Path:
    return Path(os.environ.get("RLVR_RUN_CACHE_DIR") or Path.home() / ".cache" / "rlvr-run")


def cache_key(parts: dict[str, Any]) -> str:
    blob = json.dumps({**parts, "converter": CONVERTER_VERSION}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def _paths(key: str) -> tuple[Path, Path]:
    folder = cache_root() / "datasets"
    return folder / f"{key}.jsonl.gz", folder / f"{key}.json"


def read_cached(key: str) -> Optional[tuple[list[Problem], dict[str, Any]]]:
    data, meta = _paths(key)
    if not (data.is_file() and meta.is_file()):
        return None
    with gzip.open(data, "rt", encoding="utf-8") as fh:
        problems = [Problem.model_validate_json(line) for line in fh if line.strip()]
    return problems, json.loads(meta.read_text())


def write_cached(key: str, problems: list[Problem], meta: dict[str, Any]) -> None:
    data, meta_path = _paths(key)
    data.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(data) + ".lock"):
        tmp = data.with_suffix(".tmp")
        with gzip.open(tmp, "wt", encoding="utf-8") as fh:
            for p in problems:
                fh.write(p.model_dump_json() + "\n")
        tmp.replace(data)
        # The meta marks the data as complete (read_cached wants both): written whole or not at all.
        atomic_write(meta_path, json.dumps(meta, indent=1, sort_keys=True))
