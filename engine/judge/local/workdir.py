"""Emptying a sample's work directory: between stdio tests (the runner) and between samples (the
worker), whatever a program left there.
"""

from __future__ import annotations

import os


_OWN_FILES = frozenset({".stdout", ".stderr"})  # the worker's, in the work directory of every job


def clear_leftovers() -> None:
    """Before a stdio test: what an earlier test of the sample left in the work directory goes.
    Each test is a fresh execution, and a program must not fill the directory so that the
    runner cannot write the next test's input (which would be the judge's fault)."""
    empty_directory(".", keep=_OWN_FILES)


def empty_directory(path: str, keep: frozenset[str] = frozenset()) -> None:
    """Remove everything under `path` but the names in `keep` at its top, never following a
    symlink, with one directory open at a time and no recursion: a program may nest directories
    thousands deep (`shutil.rmtree` recursed past Python's limit, a judge fault on every later
    sample of the worker) and past any path length. What cannot be removed is left."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except OSError:
        return
    names: list[str] = []  # the way down from `path`
    skipped = [set(keep)]  # per level: what stays
    try:
        while True:
            down = None
            with os.scandir(fd) as entries:
                for entry in entries:
                    if entry.name in skipped[-1]:
                        continue
                    if entry.is_dir(follow_symlinks=False):
                        down = down or entry.name
                        continue
                    try:
                        os.unlink(entry.name, dir_fd=fd)
                    except OSError:
                        skipped[-1].add(entry.name)
            if down is not None:
                try:
                    os.chmod(down, 0o700, dir_fd=fd)  # a directory its program made unreadable
                    child = os.open(down, flags, dir_fd=fd)
                except OSError:
                    skipped[-1].add(down)
                    continue
                os.close(fd)
                fd = child
                names.append(down)
                skipped.append(set())
                continue
            if not names:
                return
            parent = os.open("..", flags, dir_fd=fd)
            os.close(fd)
            fd = parent
            skipped.pop()
            name = names.pop()
            try:
                os.rmdir(name, dir_fd=fd)
            except OSError:
                skipped[-1].add(name)
    finally:
        os.close(fd)
