"""DeepMind CodeContests rows (the Hugging Face `deepmind/code_contests` schema) → Problem.

Only PYTHON3 solutions are kept (the judge runs python3; PYTHON2 code would be
judged as wrong for syntax, not for logic). Generated tests are capped because a
problem can carry hundreds of them and they dominate judge time and file size.
"""

from __future__ import annotations

import re
from typing import Any, Optional

from engine.problem import Problem, StdioTest

PYTHON3 = 3  # CodeContests Language enum: 0 unknown, 1 PYTHON (2), 2 CPP, 3 PYTHON3, 4 JAVA
SOURCE_NAMES = {0: "unknown", 1: "codechef", 2: "codeforces", 3: "hackerearth", 4: "codejam", 5: "atcoder", 6: "aizu"}
LICENSE = "CC-BY-4.0"


def slug(name: str) -> str:
    """`1076_D. Edge Deletion` → `1076_d_edge_deletion` (readable, one token per id-list line)."""
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def _tests(block: Optional[dict[str, Any]], kind: str, cap: Optional[int] = None) -> list[StdioTest]:
    if not block:
        return []
    pairs = list(zip(block.get("input") or [], block.get("output") or []))
    if cap is not None:
        pairs = pairs[:cap]
    return [StdioTest(input=i, output=o, kind=kind) for i, o in pairs]  # type: ignore[arg-type]


def _python3(block: Optional[dict[str, Any]]) -> list[str]:
    if not block:
        return []
    return [code for lang, code in zip(block.get("language") or [], block.get("solution") or []) if lang == PYTHON3]


def _time_limit_s(value: Optional[dict[str, Any]]) -> Optional[float]:
    if not value:
        return None
    seconds = (value.get("seconds") or 0) + (value.get("nanos") or 0) / 1e9
    return seconds or None


def problem_from_codecontests_hf(
    row: dict[str, Any], *, split: str, max_generated_tests: Optional[int] = None, problem_id: Optional[str] = None
) -> Problem:
    """Convert one `deepmind/code_contests` row; `problem_id` defaults to the slug of its name."""
    tests = (
        _tests(row.get("public_tests"), "public")
        + _tests(row.get("private_tests"), "private")
        + _tests(row.get("generated_tests"), "generated", max_generated_tests)
    )
    memory = row.get("memory_limit_bytes")
    return Problem(
        id=problem_id or f"codecontests/{slug(row['name'])}",
        name=row["name"],
        source="codecontests",
        split=split,
        kind="stdio",
        statement=row.get("description") or "",
        stdio_tests=tests,
        solutions=_python3(row.get("solutions")),
        incorrect_solutions=_python3(row.get("incorrect_solutions")),
        time_limit_s=_time_limit_s(row.get("time_limit")),
        memory_limit_mb=int(memory) // (1024 * 1024) if memory else None,
        difficulty=row.get("difficulty"),
        rating=row.get("cf_rating") or None,
        tags=list(row.get("cf_tags") or []),
        license=LICENSE,
        origin=SOURCE_NAMES.get(row.get("source") or 0, "unknown"),
    )
