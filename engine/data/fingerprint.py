"""Content fingerprints of normalized problems.

A fingerprint is a sha256 over a canonical serialization of the *normalized*
problems, so the same content loaded from the Hub, a local mirror or a cache
gets the same fingerprint, and any change of content (a statement, a test, a
solution) gets a new one. Order of rows does not matter: problems are sorted by id.
"""

from __future__ import annotations

import hashlib
import json
from typing import Iterable

from engine.problem import Problem


def canonical_json(problem: Problem) -> str:
    """One line of JSON with sorted keys: the unit the fingerprint hashes."""
    return json.dumps(problem.model_dump(mode="json"), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def problems_fingerprint(problems: Iterable[Problem]) -> str:
    h = hashlib.sha256()
    for line in sorted(canonical_json(p) for p in problems):
        h.update(line.encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()


def file_sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
