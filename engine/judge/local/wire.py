"""Length-prefixed frames between the judge, its workers and their runners (standard library only)."""

from __future__ import annotations

import json
import os
import struct

HEADER = struct.Struct(">I")


MAX_FRAME = 64 * 1024 * 1024


LAZY_POLL_S = 0.05


def send(fd: int, message: dict) -> None:
    send_raw(fd, json.dumps(message).encode())


def send_raw(fd: int, data: bytes) -> None:
    write_all(fd, frame(data))


def frame(data: bytes) -> bytes:
    return HEADER.pack(len(data)) + data


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def read_exact(fd: int, n: int) -> bytes | None:
    chunks, left = [], n
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def receive(fd: int) -> dict | None:
    """The next frame, parsed; a frame nested past the parser's recursion is malformed like any
    other (ValueError), never a RecursionError its reader would not expect."""
    body = receive_raw(fd)
    if body is None:
        return None
    try:
        return json.loads(body)
    except RecursionError:
        raise ValueError("a frame nested past the parser's recursion") from None


def receive_raw(fd: int) -> bytes | None:
    head = read_exact(fd, HEADER.size)
    if head is None:
        return None
    return read_exact(fd, HEADER.unpack(head)[0])
