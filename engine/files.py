"""The two ways rlvr-run touches a file it must not lose: an atomic write, and a JSON Lines
reader that tolerates the torn last line a killed writer leaves.

`atomic_write` writes beside the target and renames over it: a reader sees the old file or
the new one, never half of either, and a crash leaves at most a hidden `.NAME.*.partial`
file behind. `read_jsonl` yields each line's object; a line that is not a JSON object (the
line a kill cut short) is skipped, never an error: every appender writes whole lines and
flushes, so only a crashed write can make one.
"""

from __future__ import annotations

import json
import os
import secrets
import stat
from pathlib import Path
from typing import Any, BinaryIO, Iterator, Union


def atomic_write(path: Union[str, Path], data: Union[str, bytes], *, durable: bool = False) -> Path:
    """Write `data` (text as UTF-8) to `path` all at once. `durable` also fsyncs before the rename,
    for records that must survive a power cut, not only a crash of this process."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Not tempfile.mkstemp: its 0600 mode would outlive the rename; this one gets the umask's.
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.partial")
    try:
        with open(tmp, "xb") as handle:
            handle.write(data.encode("utf-8") if isinstance(data, str) else data)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def end_torn_line(handle: BinaryIO) -> None:
    """Before appending to a JSON Lines file opened `a+b`: end a torn last line an earlier kill
    left, so that the next record starts a line of its own instead of being glued to (and read
    as part of) the torn one."""
    if handle.seek(0, os.SEEK_END) > 0:
        handle.seek(-1, os.SEEK_END)
        if handle.read(1) != b"\n":
            handle.write(b"\n")


def read_jsonl(path: Union[str, Path]) -> Iterator[dict[str, Any]]:
    """Each JSON object line of `path` (none when it does not exist); blank, torn or non-object
    lines are skipped."""
    try:
        handle = open(path, encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return
    with handle:
        for line in handle:
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict):
                yield row


def exists(path: Union[str, Path], *, kind: str = "any") -> bool:
    """Whether `path` is there (with `kind` "file" or "dir": as that, links followed). A name the
    system refuses to look up (a component past its length limit, a NUL) is simply not there;
    pathlib's own checks raise for it instead."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return False
    return {"file": stat.S_ISREG, "dir": stat.S_ISDIR}.get(kind, lambda _: True)(mode)
