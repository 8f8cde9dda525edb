"""The dataset cache's meta is written whole: a reader beside a writer (two validations of one
spec at once) sees the old meta or the new one, never a truncated file."""

from __future__ import annotations

import json
import threading

from engine.data import cache
from engine.data.toy import toy_problems


def test_a_reader_never_sees_half_a_meta(tmp_path, monkeypatch):
    monkeypatch.setenv("RLVR_RUN_CACHE_DIR", str(tmp_path))
    problems = toy_problems("valid")[:2]
    big = {"origin": "x" * (4 << 20), "fingerprint": "f"}  # a meta slow enough to be caught mid-write
    cache.write_cached("k", problems, big)
    _, meta = cache._paths("k")
    torn, done = [], threading.Event()

    def read() -> None:
        while not done.is_set():
            try:
                json.loads(meta.read_text())
            except ValueError:
                torn.append(1)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for _ in range(15):
            cache.write_cached("k", problems, big)
    finally:
        done.set()
        reader.join()
    assert not torn
    assert cache.read_cached("k")[1]["fingerprint"] == "f"
