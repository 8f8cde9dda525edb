"""A record of the code a run was launched from: git HEAD, status, diffs, untracked files.

Written with the real git CLI. Files land in one folder (a run's `patches/`):

    git.json          commit, branch, dirty flag, untracked files (kept / skipped, sizes)
    status.txt        `git status --porcelain=v1`
    unstaged.diff     `git diff` (work tree vs index)
    staged.diff       `git diff --cached` (index vs HEAD)
    untracked.tar.gz  untracked files up to the size cap (absent when there are none)

When the folder is not inside a git work tree, or git is not installed, git.json says
so (`"git": false` and the reason) and `not_a_git_repo.txt` explains it in words.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

DEFAULT_UNTRACKED_CAP_BYTES = 1_000_000  # per file: source edits, not datasets or weights
SNAPSHOT_FILES = ("git.json", "status.txt", "unstaged.diff", "staged.diff", "untracked.tar.gz",
                  "not_a_git_repo.txt")


@dataclass(kw_only=True)
class UntrackedFile:
    path: str
    size: int


@dataclass(kw_only=True)
class Snapshot:
    git: bool
    reason: str = ""
    root: str = ""
    commit: Optional[str] = None  # None in a repository without commits
    branch: Optional[str] = None  # None when HEAD is detached
    dirty: bool = False
    untracked: list[UntrackedFile] = field(default_factory=list)
    skipped: list[UntrackedFile] = field(default_factory=list)  # over the cap, not archived
    cap_bytes: int = DEFAULT_UNTRACKED_CAP_BYTES


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=False)


def _out(repo: Path, *args: str) -> Optional[str]:
    proc = _git(repo, *args)
    return proc.stdout.decode("utf-8", "replace").strip() if proc.returncode == 0 else None


def _no_repo(out_dir: Path, reason: str, cap: int) -> Snapshot:
    snap = Snapshot(git=False, reason=reason, cap_bytes=cap)
    (out_dir / "not_a_git_repo.txt").write_text(
        f"No git snapshot: {reason}\nThe code this run was launched from is not recorded.\n")
    (out_dir / "git.json").write_text(json.dumps(asdict(snap), indent=2) + "\n")
    return snap


def snapshot(repo: Path, out_dir: Path, *, untracked_cap_bytes: int = DEFAULT_UNTRACKED_CAP_BYTES) -> Snapshot:
    """Record the git state of the work tree containing `repo` into `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if shutil.which("git") is None:
        return _no_repo(out_dir, "git is not installed (no `git` on PATH)", untracked_cap_bytes)
    root = _out(repo, "rev-parse", "--show-toplevel")
    if root is None:
        return _no_repo(out_dir, f"{repo} is not inside a git work tree", untracked_cap_bytes)
    top = Path(root)
    status = _git(top, "status", "--porcelain=v1", "--untracked-files=all").stdout
    (out_dir / "status.txt").write_bytes(status)
    (out_dir / "unstaged.diff").write_bytes(_git(top, "diff", "--binary").stdout)
    (out_dir / "staged.diff").write_bytes(_git(top, "diff", "--cached", "--binary").stdout)
    kept, skipped = _untracked(top, untracked_cap_bytes)
    if kept:
        with tarfile.open(out_dir / "untracked.tar.gz", "w:gz") as tar:
            for item in kept:
                tar.add(top / item.path, arcname=item.path, recursive=False)
    snap = Snapshot(git=True, root=str(top), commit=_out(top, "rev-parse", "--verify", "-q", "HEAD"),
                    branch=_out(top, "symbolic-ref", "--short", "-q", "HEAD"), dirty=bool(status.strip()),
                    untracked=kept, skipped=skipped, cap_bytes=untracked_cap_bytes)
    (out_dir / "git.json").write_text(json.dumps(asdict(snap), indent=2) + "\n")
    return snap


def _untracked(top: Path, cap: int) -> tuple[list[UntrackedFile], list[UntrackedFile]]:
    listing = _git(top, "ls-files", "--others", "--exclude-standard", "-z").stdout
    kept: list[UntrackedFile] = []
    skipped: list[UntrackedFile] = []
    for raw in filter(None, listing.split(b"\0")):
        rel = raw.decode("utf-8", "surrogateescape")
        path = top / rel
        if not path.is_file() or path.is_symlink():
            continue
        item = UntrackedFile(path=rel, size=path.stat().st_size)
        (kept if item.size <= cap else skipped).append(item)
    return kept, skipped


def copy_snapshot(src: Path, dst: Path) -> None:
    """Put a snapshot into another folder, hard-linked where the filesystem allows."""
    dst.mkdir(parents=True, exist_ok=True)
    for name in SNAPSHOT_FILES:
        source = src / name
        if not source.exists():
            continue
        target = dst / name
        target.unlink(missing_ok=True)
        try:
            target.hardlink_to(source)
        except OSError:
            shutil.copy2(source, target)
