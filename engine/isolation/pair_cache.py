"""Rule 3's lexical findings between two datasets, on disk, keyed by everything that decides them.

Comparing two sketches (LSH candidates, exact Jaccard, containment, rewording) is deterministic:
its outcome depends on the two datasets' content fingerprints (sha256 over their normalized
problems), on the `leakage:` settings, and on the code that normalizes, sketches and compares.
All three are in the key, the code as the sha256 of its source files (ours and datasketch's), so an edited dataset,
setting or matcher is compared afresh and a stale entry can never answer: it is simply never
looked up again. A second validation then needs neither the comparison nor datasketch (whose
import, through scipy, costs most of a second).

Only what the comparison found is kept (ids, kind, scores); waivers, the semantic stage and
the verdict itself are applied to it on every run, as to a fresh comparison.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Optional

from engine.files import atomic_write
from engine.spec.model import LeakageSpec
from engine.spec.validated import Leak

# The modules whose code decides what a lexical comparison finds, ours and datasketch's (its
# LSH banding picks the candidate pairs), read without importing them.
_MATCHERS = ("neardup.py", "overlap.py", "normalize.py", "content.py", "pair_cache.py")
_LIBRARY = ("datasketch", ("lsh.py", "lean_minhash.py", "minhash.py", "storage.py"))
_FIELDS = ("train_id", "eval_id", "kind", "similarity", "scores")


@functools.lru_cache(maxsize=1)
def matcher_version() -> str:
    digest = hashlib.sha256()
    spec = importlib.util.find_spec(_LIBRARY[0])
    library = Path(spec.origin).parent if spec is not None and spec.origin else None
    files = [Path(__file__).parent / name for name in _MATCHERS]
    files += [library / name for name in _LIBRARY[1]] if library is not None else []
    for path in files:
        digest.update(str(path.name).encode())
        digest.update(path.read_bytes() if path.is_file() else b"(missing)")
    return digest.hexdigest()


def pair_key(train_fingerprint: str, eval_fingerprint: str, leakage: LeakageSpec) -> str:
    """The settings' every field (the sketches' n-gram and permutations among them) and the code,
    besides the two fingerprints: whatever changes what the comparison finds changes the key."""
    blob = json.dumps({"train": train_fingerprint, "evaluation": eval_fingerprint,
                       "leakage": leakage.model_dump(mode="json"), "code": matcher_version()}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


class PairCache:
    """One JSON file per compared pair under `<root>/leakage-pairs/`."""

    def __init__(self, root: Path) -> None:
        self.folder = Path(root) / "leakage-pairs"

    def leaks(self, train_fingerprint: str, eval_fingerprint: str, leakage: LeakageSpec,
              compare: Callable[[], list[Leak]]) -> list[Leak]:
        """What `compare` finds between the two datasets: from the cache, else compared and stored."""
        key = pair_key(train_fingerprint, eval_fingerprint, leakage)
        found = self.load(key)
        if found is None:
            found = compare()
            self.store(key, found)
        return found

    def load(self, key: str) -> Optional[list[Leak]]:
        try:
            rows = json.loads((self.folder / f"{key}.json").read_text())
            if not isinstance(rows, dict) or rows.get("key") != key:
                return None
            return [Leak(**_checked(row)) for row in rows["leaks"]]
        except (OSError, ValueError, TypeError, KeyError):
            return None  # missing, torn or foreign: compared afresh, never trusted

    def store(self, key: str, leaks: list[Leak]) -> None:
        rows = {"key": key, "leaks": [{name: asdict(leak)[name] for name in _FIELDS} for leak in leaks]}
        try:
            atomic_write(self.folder / f"{key}.json", json.dumps(rows))
        except OSError:
            pass  # a read-only cache folder costs the next run a comparison, nothing else


def _checked(row: Any) -> dict[str, Any]:
    if not isinstance(row, dict) or set(row) != set(_FIELDS):
        raise ValueError("not a cached leak")
    return row
