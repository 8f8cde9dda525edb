"""A spec's local problem files, checked at validate time: readable, in the declared row form, not empty.

Cheap, so it runs even without the content checks: the first rows are converted as the loader
converts them (their fields, their format) and the rest only counted. A file that fails here would
fail the run after its base evaluations, with advice about the Hub that does not apply to it.
"""

from __future__ import annotations

from itertools import islice
from pathlib import Path
from typing import Any, Iterator

from engine.data.dataset import DataContext
from engine.data.loaders import convert_rows
from engine.data.sources.files import READERS, RowsError
from engine.data.sources.formats import FORMATS, missing_fields, split_mapping
from engine.errors import SpecError, UserError
from engine.spec.validated import RuleReport, ValidatedSpec

SAMPLE_ROWS = 20


def check_local_files(validated: ValidatedSpec) -> RuleReport:
    """One located error per local dataset whose file cannot be what the spec says it is."""
    report = RuleReport()
    for name, ds in validated.spec.datasets.items():
        entry = validated.sources.get(name)
        if entry is None or entry.local is None or not ds.path:
            continue  # a hub source, or one `resolve` already refused
        ctx = DataContext(name=name, spec=validated.loaded, root=validated.registry.project_root)
        try:
            rows = _check(ctx, ds, entry.local)
        except SpecError as exc:
            report.errors += exc.diagnostics
        except UserError as exc:  # no spec to point into: cannot happen with `validated.loaded`
            report.errors.append(validated.loaded.diagnostic(("datasets", name), str(exc), "fix the file"))
        else:
            # what a dry run prices without the content checks (they count problems themselves): every
            # row is a problem unless an id list or MBPP's split by task id narrows them
            if not ds.ids and split_mapping(ds.fields, "problem")[0] not in ("mbpp", "mbpp_sanitized"):
                report.sizes[name] = rows
    return report


def _check(ctx: DataContext, ds: Any, kind: str) -> int:
    """The file's row count, once its first rows convert."""
    path = ctx.resolve(ds.path, "path")
    fmt_name, mapping = split_mapping(ds.fields, "problem")
    if fmt_name not in FORMATS:
        raise ctx.error("fields", f"unknown format `{fmt_name}`", f"set `fields.format` to one of: {', '.join(FORMATS)}")
    rows = READERS[kind](path)
    try:
        first = list(islice(rows, SAMPLE_ROWS))
    except (RowsError, OSError, UnicodeDecodeError, EOFError) as exc:
        raise ctx.error("path", _unreadable(path, exc), "fix the file or point `path:` at a well-formed one") from None
    if not first:
        raise ctx.error("path", f"{path} holds no rows", "point `path:` at a file with one problem per row")
    missing = missing_fields(first[0], FORMATS[fmt_name], mapping)
    if missing:
        fits = [f for f, fmt in FORMATS.items() if not missing_fields(first[0], fmt, {})]
        hint = f"the rows look like format `{fits[0]}`: set `fields: {{format: {fits[0]}}}`" if fits else (
            "map them in `fields:` as {<format field>: <column>}")
        raise ctx.error("fields", f"{path} row 1 lacks {', '.join(missing)} for format `{fmt_name}` "
                        f"(its columns: {', '.join(sorted(first[0]))})", f"{hint}, or set `fields.format` to the "
                        f"form the file holds ({', '.join(FORMATS)})")
    convert_rows(first, fmt_name, mapping, ds.split or "all", ds, ctx, where=str(path))
    try:
        return len(first) + _count(path, kind, rows)
    except (RowsError, OSError, UnicodeDecodeError, EOFError) as exc:
        raise ctx.error("path", _unreadable(path, exc), "fix the file or point `path:` at a well-formed one") from None


def _unreadable(path: Path, exc: Exception) -> str:
    return str(exc) if isinstance(exc, RowsError) else f"{path}: {type(exc).__name__}: {exc}"  # RowsError names it


def _count(path: Path, kind: str, rest: Iterator[dict[str, Any]]) -> int:
    """The rows after the sample: non-blank lines of a JSON Lines file (not parsed: that is the
    loader's work), the rest of an array or a table."""
    if kind != "jsonl":
        return sum(1 for _ in rest)
    import gzip

    opened = gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb")
    with opened as fh:
        return max(0, sum(1 for line in fh if line.strip()) - SAMPLE_ROWS)
