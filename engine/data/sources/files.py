"""Reading local problem files: JSON Lines (optionally gzipped), a JSON array, Parquet.

Each reader yields plain row dicts; a malformed file is a `RowsError` naming
where it broke, which the loader turns into a dataset-level UserError.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any, Iterator


class RowsError(Exception):
    """A file that cannot be read as rows (message says where)."""


def _open_text(path: Path):
    return gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else path.open(encoding="utf-8")


def numbered_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, row) for every non-blank line, so callers can point at a bad row."""
    with _open_text(path) as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise RowsError(f"{path}:{number}: not JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise RowsError(f"{path}:{number}: a line must be a JSON object, got {type(row).__name__}")
            yield number, row


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    for _, row in numbered_jsonl(path):
        yield row


def read_json(path: Path) -> Iterator[dict[str, Any]]:
    with _open_text(path) as fh:
        try:
            data = json.load(fh)
        except json.JSONDecodeError as exc:
            raise RowsError(f"{path}:{exc.lineno}: not JSON ({exc.msg})") from None
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise RowsError(f"{path}: expected a JSON array of objects (one per problem)")
    yield from data


def read_parquet(path: Path) -> Iterator[dict[str, Any]]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises several unrelated types for a bad file
        raise RowsError(f"{path}: not a Parquet file ({exc})") from None
    yield from table.to_pylist()


READERS = {"jsonl": read_jsonl, "json": read_json, "parquet": read_parquet}
