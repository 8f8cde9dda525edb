"""The one atomic write and the one torn-line-tolerant JSON Lines reader (engine/files.py)."""

from __future__ import annotations

import os
import stat

import pytest

from engine.files import atomic_write, read_jsonl


def test_atomic_write_replaces_whole_and_leaves_nothing_behind(tmp_path):
    path = tmp_path / "sub" / "out.json"
    atomic_write(path, "old")
    atomic_write(path, b"new")
    assert path.read_text() == "new"
    assert sorted(p.name for p in path.parent.iterdir()) == ["out.json"]
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask  # not a temporary file's 0600


def test_a_failed_write_keeps_the_old_file(tmp_path):
    path = tmp_path / "out.txt"
    atomic_write(path, "kept")
    with pytest.raises(TypeError):
        atomic_write(path, 42)  # type: ignore[arg-type]
    assert path.read_text() == "kept" and [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_read_jsonl_skips_a_torn_last_line_and_non_objects(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text('{"step": 1}\n\n[1, 2]\n{"step": 2}\n{"step": 3, "da')
    assert list(read_jsonl(path)) == [{"step": 1}, {"step": 2}]
    assert list(read_jsonl(tmp_path / "absent.jsonl")) == []
