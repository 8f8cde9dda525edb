"""Git snapshots, against real git in temporary repositories."""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from engine.runs.gitsnap import copy_snapshot, snapshot

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@e", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, **GIT_ENV}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True, env=env).stdout.strip()


def make_dirty_repo(root: Path) -> Path:
    """A repo with one commit, then a staged change, an unstaged change, untracked files
    (one over a 1 kB cap, one git-ignored)."""
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    (root / "a.py").write_text("x = 1\n")
    (root / "b.py").write_text("y = 1\n")
    (root / ".gitignore").write_text("ignored.bin\n")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "init")
    (root / "a.py").write_text("x = 2  # staged\n")
    git(root, "add", "a.py")
    (root / "b.py").write_text("y = 2  # unstaged\n")
    (root / "notes").mkdir()
    (root / "notes" / "new.txt").write_text("untracked\n")
    (root / "big.dat").write_bytes(b"\0" * 5000)
    (root / "ignored.bin").write_bytes(b"ignored")
    return root


def test_dirty_tree_is_recorded_whole(tmp_path: Path) -> None:
    repo = make_dirty_repo(tmp_path / "repo")
    out = tmp_path / "snap"
    snap = snapshot(repo / "notes", out, untracked_cap_bytes=1000)  # from a subfolder
    assert snap.git and snap.dirty and snap.branch == "main"
    assert snap.commit == git(repo, "rev-parse", "HEAD")
    assert "x = 2  # staged" in (out / "staged.diff").read_text()
    assert "x = 2" not in (out / "unstaged.diff").read_text()
    assert "y = 2  # unstaged" in (out / "unstaged.diff").read_text()
    status = (out / "status.txt").read_text()
    assert "M  a.py" in status and " M b.py" in status and "?? notes/new.txt" in status
    assert [u.path for u in snap.untracked] == ["notes/new.txt"]
    assert [(s.path, s.size) for s in snap.skipped] == [("big.dat", 5000)]
    with tarfile.open(out / "untracked.tar.gz") as tar:
        assert tar.getnames() == ["notes/new.txt"]
        assert tar.extractfile("notes/new.txt").read() == b"untracked\n"
    record = json.loads((out / "git.json").read_text())
    assert record["skipped"] == [{"path": "big.dat", "size": 5000}] and record["cap_bytes"] == 1000
    assert not (out / "not_a_git_repo.txt").exists()


def test_clean_tree_detached_head(tmp_path: Path) -> None:
    repo = make_dirty_repo(tmp_path / "repo")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "all")
    git(repo, "checkout", "-q", "--detach", "HEAD")
    snap = snapshot(repo, tmp_path / "snap")
    assert snap.git and not snap.dirty and snap.branch is None and snap.untracked == []
    assert (tmp_path / "snap" / "staged.diff").read_text() == ""
    assert not (tmp_path / "snap" / "untracked.tar.gz").exists()


def test_repository_without_commits(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "f.txt").write_text("f")
    snap = snapshot(repo, tmp_path / "snap")
    assert snap.git and snap.commit is None and snap.branch == "main"
    assert [u.path for u in snap.untracked] == ["f.txt"]


def test_not_a_git_repo_is_a_clear_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    # Stops git from finding a repository above tmp_path.
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    snap = snapshot(plain, tmp_path / "snap")
    assert not snap.git and "not inside a git work tree" in snap.reason
    assert "No git snapshot" in (tmp_path / "snap" / "not_a_git_repo.txt").read_text()
    assert json.loads((tmp_path / "snap" / "git.json").read_text())["git"] is False


def test_git_missing_is_a_clear_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    snap = snapshot(tmp_path, tmp_path / "snap")
    assert not snap.git and "git is not installed" in snap.reason
    assert (tmp_path / "snap" / "not_a_git_repo.txt").exists()


def test_copies_are_independent_of_the_source_folder(tmp_path: Path) -> None:
    repo = make_dirty_repo(tmp_path / "repo")
    snapshot(repo, tmp_path / "snap")
    copy_snapshot(tmp_path / "snap", tmp_path / "run" / "patches")
    staged = (tmp_path / "snap" / "staged.diff").read_text()
    # Removing the shared snapshot (materialize does) leaves the run's copy intact.
    for f in (tmp_path / "snap").iterdir():
        f.unlink()
    assert (tmp_path / "run" / "patches" / "staged.diff").read_text() == staged
