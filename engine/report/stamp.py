"""Output kept while what it is made from has not changed: beside a file, its stamp (the sha256 of
everything it was made from), written only once the output is, and removed before it is made
again, so an output cut short never passes for the data it was being made from. The figures
(`plots`) keep each figure by it; the result pages (`generate`) keep the whole folder by the stamp
beside its index, over `pages_digest`.

No import here draws or renders anything: a rerun with nothing to do decides to keep the pages
before matplotlib, the templates and the page builders are imported.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import time
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Optional

from engine.plan.frozen import run_registry_root
from engine.resources import TEMPLATES, shipped
from engine.runs.lineage import RunState
from engine.spec.registry import find_registry

if TYPE_CHECKING:
    from engine.report.study import Study

# A file changed less than this long ago may change again within the file system's clock tick
# and keep its stamp's size and times (git's "racy" entries): pages made from one are not kept.
RACY_S = 2.0
# Runs whose pages depend on the clock (time so far, time left): pages of a study with one are made every time.
UNSETTLED = frozenset({RunState.planned, RunState.queued, RunState.running})
# What draws and renders the pages beside the project's code, and where runs' data may be found.
RENDERERS = ("matplotlib", "jinja2", "tabulate", "numpy", "scipy")
DATA_PLACES = ("RLVR_RUN_CACHE_DIR", "RLVR_RUN_DATA_MIRROR", "HF_HOME", "HF_DATASETS_CACHE")


def _stamp(path: Path) -> Path:
    return path.with_name(f".{path.name}.sha256")


def current(path: Path, digest: str) -> bool:
    """`path` was made from what `digest` digests."""
    try:
        return path.is_file() and _stamp(path).read_text() == digest
    except OSError:
        return False


def unseal(path: Path) -> None:
    """Before `path` is made again: no stamp vouches for it while it is being made."""
    _stamp(path).unlink(missing_ok=True)


def seal(path: Path, digest: str) -> None:
    """Once `path` is made, whole, from what `digest` digests."""
    _stamp(path).write_text(digest)


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """What makes the pages: rlvr-run's own code, the report templates and matplotlib's version (a
    page shows numbers computed anywhere in the package, so all of it counts)."""
    digest = hashlib.sha256(" ".join(version(name) for name in RENDERERS).encode())
    for root in (Path(__file__).resolve().parents[1], TEMPLATES / "report"):
        for path in sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in (".py", ".j2")):
            digest.update(f"\0{path.relative_to(root)}\0".encode() + path.read_bytes())
    return digest.hexdigest()


def pages_digest(study: "Study", out: Path, *, failures: bool, settle: bool = False) -> Optional[str]:
    """A digest of what the pages of `study` in `out` are made from, or None when they must be made
    whatever it is: a run still under way, or a file they read changed too recently to tell.
    `settle` waits those RACY_S out instead (at most once): the pages a finished study's last run
    leaves are then kept by the next `rlvr-run SPEC`.

    The study's lineage rows (as `load_study` read them); every file of its runs' folders and of
    the registries the pages read (path, size, inode, modification and change times: the kernel
    sets ctime on every write and no call sets it back); the folder written to; whether the
    failures page is built; the code."""
    if any(run.state in UNSETTLED for run in study.runs):
        return None
    # every run records its spec again, with the time: a time no page shows, left out here
    rows = dataclasses.replace(study, spec=study.spec.model_copy(update={"recorded_at": ""}) if study.spec else None)
    digest = hashlib.sha256(f"{code_digest()}\0{Path(out).resolve()}\0{failures}\0{rows!r}".encode())
    folders = {Path(out).parent / run.id for run in study.runs} | {Path(r.run_dir) for r in study.runs if r.run_dir}
    registries = {shipped("registry")}
    if study.spec is not None and study.spec.path:
        registries.add(find_registry(Path(study.spec.path).parent))
    # a run shared with another study reads the registry of the study that planned it
    registries |= {run_registry_root(Path(r.run_dir)) for r in study.runs if r.run_dir}
    paths = sorted({*_files(sorted(folders)), *_files(sorted(r for r in registries if r.is_dir()))})
    states, newest = _states(paths)
    wait = RACY_S - (time.time_ns() - newest) / 1e9
    if 0 < wait <= RACY_S and settle:
        time.sleep(wait)
        states, newest = _states(paths)
        wait = RACY_S - (time.time_ns() - newest) / 1e9
    if wait > 0:  # changed just now, or dated in the future (a copied tree, a server's clock): never kept
        return None
    # Where the failures page finds the runs' data (a cache, a mirror) is outside the run folders.
    places = "\0".join(f"{name}={os.environ.get(name, '')}" for name in DATA_PLACES)
    digest.update(("".join(states) + places).encode())
    return digest.hexdigest()


def _states(paths: Iterable[Path]) -> tuple[list[str], int]:
    """Each file's path, size, inode and times, and the newest of those times."""
    states, newest = [], 0
    for path in paths:
        try:
            st = path.stat()
        except OSError:
            continue  # gone since it was listed: absent, as the next look will find it
        if not path.is_file():
            continue
        newest = max(newest, st.st_mtime_ns, st.st_ctime_ns)
        states.append(f"\0{path}\0{st.st_size} {st.st_ino} {st.st_mtime_ns} {st.st_ctime_ns}")
    return states, newest


def _files(folders: Iterable[Path]) -> Iterable[Path]:
    for folder in folders:
        for top, dirs, names in os.walk(folder):
            dirs.sort()
            yield from (Path(top) / name for name in names)
