"""A loaded dataset and the context a data error points at (shared by loaders and id lists)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from engine.errors import SpecError, UserError
from engine.files import exists
from engine.problem import Problem
from engine.spec.load import LoadedSpec

RowCallback = Callable[[int], None]


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
            if exists(candidate):
                return candidate.resolve()
        tried = ", ".join(str(c) for c in candidates)
        raise self.error(key, f"file not found: {raw} (looked at {tried})",
                         f"fix `{key}:` to point at an existing file (relative paths are read from the spec's folder)")
