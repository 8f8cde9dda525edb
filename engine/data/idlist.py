"""Frozen problem-id lists: deterministic selection, writing with a sha256, verification.

A list file is plain text, one id per line, trailing newline; its sha256 (over the
file bytes) is written next to it as `NAME.txt.sha256` (sha256sum format) and is
what runs record. Lines name problems by their id without the source prefix
(`11` for `mbpp/11`); the full id (`mbpp/11`) is accepted too.
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

from engine.data.dataset import DataContext, LoadedDataset
from engine.data.fingerprint import problems_fingerprint
from engine.errors import UserError
from engine.problem import Problem


@dataclass(frozen=True, kw_only=True)
class IdList:
    path: Path
    ids: list[str]
    sha256: str  # of the file bytes


def short_id(problem: Problem) -> str:
    """`mbpp/11` → `11`: the id as a list names it."""
    prefix = f"{problem.source}/"
    return problem.id[len(prefix):] if problem.id.startswith(prefix) else problem.id


def natural_key(text: str) -> tuple:
    """Numbers compare as numbers (`HumanEval/9` < `HumanEval/10`, `11` < `100`)."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", text))


def select_ids(problems: list[Problem], n: int, seed: int) -> list[str]:
    """A seeded sample of `n` ids, sorted: `sorted(Random(seed).sample(population, n))`.

    The population is the dataset's ids in natural order, so for MBPP test this is
    exactly `sorted(random.Random(seed).sample(list(range(11, 511)), n))`.
    """
    population = sorted((short_id(p) for p in problems), key=natural_key)
    if not 0 < n <= len(population):
        raise UserError(f"cannot select {n} ids from {len(population)} problems; pick 1 ≤ n ≤ {len(population)}")
    return sorted(random.Random(seed).sample(population, n), key=natural_key)


def idlist_bytes(ids: list[str]) -> bytes:
    return "".join(f"{i}\n" for i in ids).encode("utf-8")


def write_idlist(path: Path, ids: list[str]) -> str:
    """Write the list and its `.sha256` sidecar; return the sha256."""
    data = idlist_bytes(ids)
    digest = hashlib.sha256(data).hexdigest()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    sidecar(path).write_text(f"{digest}  {path.name}\n")
    return digest


def sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _error(ctx: Optional[DataContext], message: str, fix: str) -> UserError:
    return ctx.error("ids", message, fix) if ctx is not None else UserError(f"{message}\n  fix: {fix}")


def read_idlist(path: Path, ctx: Optional[DataContext] = None) -> IdList:
    """Read a list (blank lines and `#` comments ignored); a stale sidecar is an error."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise _error(ctx, f"cannot read id list {path}: {exc.strerror}", "point `ids:` at an existing list") from None
    digest = hashlib.sha256(data).hexdigest()
    side = sidecar(path)
    if side.is_file() and side.read_text().split()[:1] != [digest]:
        raise _error(ctx, f"id list {path} does not match its sidecar {side.name} (edited after it was frozen?)",
                     "restore the list, or re-freeze it with `rlvr-run data idlist` (a new list is a new hash)")
    ids = [line.strip() for line in data.decode("utf-8").splitlines()]
    return IdList(path=path, ids=[i for i in ids if i and not i.startswith("#")], sha256=digest)


def match_ids(idlist: IdList, problems: list[Problem]) -> tuple[list[Problem], list[str]]:
    """(problems in list order, ids of the list that no problem has)."""
    index = {p.id: p for p in problems} | {short_id(p): p for p in problems}
    found = [index[i] for i in idlist.ids if i in index]
    return found, [i for i in idlist.ids if i not in index]


def _missing_message(idlist: IdList, missing: list[str], loaded: LoadedDataset) -> tuple[str, str]:
    shown = ", ".join(missing[:10]) + (f" … ({len(missing)} in all)" if len(missing) > 10 else "")
    return (f"id list {idlist.path.name} names {len(missing)} id(s) that {loaded.source}:{loaded.split} "
            f"no longer has: {shown}",
            "point `ids:` at a list made for this source and split, or re-freeze it with "
            f"`rlvr-run data idlist --dataset {loaded.source}:{loaded.split} ...`")


def verify_idlist(path: Path, loaded: LoadedDataset, ctx: Optional[DataContext] = None) -> IdList:
    """The list, if every id exists in `loaded`; else a UserError naming the missing ids."""
    idlist = read_idlist(path, ctx)
    _, missing = match_ids(idlist, loaded.problems)
    if missing:
        raise _error(ctx, *_missing_message(idlist, missing, loaded))
    return idlist


def apply_idlist(loaded: LoadedDataset, path: Path, ctx: DataContext) -> LoadedDataset:
    """`loaded` narrowed to the list's problems (list order); its fingerprint recomputed."""
    idlist = verify_idlist(path, loaded, ctx)
    found, _ = match_ids(idlist, loaded.problems)
    return replace(loaded, problems=found, fingerprint=problems_fingerprint(found), idlist_sha256=idlist.sha256)
