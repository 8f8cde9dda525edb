"""Reading a problems file for `rlvr-run judge`, its row form detected from the fields.

Accepts JSONL (optionally .gz), a JSON array, or Parquet, holding HumanEval,
MBPP (full or sanitized), CodeContests (derived or Hugging Face) raw rows, or
normalized `Problem` rows. The forms and their converters are the data layer's
(`engine.data.sources.formats`); this module only picks one per file, from the
first row, and checks every row fits it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from pydantic import ValidationError

from engine.data.sources.files import READERS, RowsError
from engine.data.sources.formats import (
    FORMATS,
    ConvertContext,
    RowFormat,
    missing_fields,
)
from engine.errors import UserError
from engine.files import exists
from engine.problem import Problem

# Most specific first: a derived CodeContests row also has the HF form's fields.
DETECTION_ORDER = (
    "problem",
    "humaneval",
    "mbpp_sanitized",
    "mbpp",
    "codecontests_derived",
    "codecontests",
    "function",
    "stdio",
)


def detect_format(row: dict[str, Any]) -> RowFormat:
    """The first form whose required fields the row has; UserError naming the forms otherwise."""
    for name in DETECTION_ORDER:
        if not missing_fields(row, FORMATS[name], {}):
            return FORMATS[name]
    forms = ", ".join(f"{n} ({'+'.join(FORMATS[n].required)})" for n in DETECTION_ORDER)
    raise UserError(f"unrecognized problem row with fields {sorted(row)[:12]}; expected one of: {forms}")


def _rows(path: Path) -> Iterator[dict[str, Any]]:
    name = path.name.removesuffix(".gz")
    kind = "parquet" if name.endswith(".parquet") else "json" if name.endswith(".json") else "jsonl"
    try:
        yield from READERS[kind](path)
    except RowsError as exc:
        raise UserError(str(exc)) from None


def read_problems(path: Path, *, split: str = "judge") -> dict[str, Problem]:
    """Problems by id, in file order. Every error names the file, the row and the fix."""
    if not exists(path, kind="file"):
        raise UserError(f"problems file not found: {path}")
    problems: dict[str, Problem] = {}
    fmt: RowFormat | None = None
    ctx = ConvertContext(split=split)
    for number, row in enumerate(_rows(path), 1):
        fmt = fmt or detect_format(row)
        missing = missing_fields(row, fmt, {})
        if missing:
            raise UserError(f"{path}: row {number} lacks {', '.join(missing)} (file detected as {fmt.name} form)")
        try:
            problem = fmt.convert(row, ctx)
        except (ValidationError, ValueError, KeyError, TypeError) as exc:
            raise UserError(f"{path}: row {number} ({fmt.name} form) cannot be converted: {exc}") from None
        if problem.id in problems:
            raise UserError(f"{path}: row {number}: duplicate problem id {problem.id!r}")
        problems[problem.id] = problem
    if not problems:
        raise UserError(f"{path}: no problems in the file")
    return problems


def write_problems(problems: list[Problem], out: Path) -> None:
    """Normalized problems as JSON Lines (the `problem` row format every reader accepts)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(p.model_dump_json() + "\n" for p in problems), encoding="utf-8")
