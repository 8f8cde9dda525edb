"""A page's machine folders are replaced exactly as one regular expression of every folder
(longest first, whole paths only) replaces them, however many folders the study has."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.report.portable import PathReplacer


def _by_one_expression(moved: dict[str, str], text: str) -> str:
    keys = [k for k in sorted(moved, key=len, reverse=True) if k not in ("", "/")]
    if not keys:
        return text
    pattern = re.compile("|".join(r"(?<![\w./~-])" + re.escape(k) + r"(?![\w.-])" for k in keys))
    return pattern.sub(lambda m: moved[m.group(0)], text)


MOVED = {"/root": "~", "/work/study/runs/smoke/abc123": "abc123", "/work/study/runs/smoke/abc1234": "abc1234",
         "/work/study": "../..", "specs/smoke.yaml": "smoke.yaml", "/": "never", "": "never"}


def test_whole_paths_only_and_the_longest_first():
    text = ("log: /work/study/runs/smoke/abc123/logs/attempt-1.log; /work/study/runs/smoke/abc1234; "
            "/rootfs /mnt/root /root/x x/root (/root) /work/study. specs/smoke.yaml /work/studyx ~/root")
    assert PathReplacer(MOVED).sub(text) == _by_one_expression(MOVED, text)
    assert PathReplacer(MOVED).sub(text).startswith("log: abc123/logs/attempt-1.log; abc1234; /rootfs /mnt/root ~/x")


def test_nothing_known_leaves_the_text_alone():
    assert PathReplacer({}).sub("/root/a") == "/root/a"
    assert PathReplacer({"/": "x", "": "y"}).sub("/root/a") == "/root/a"


_PIECES = st.sampled_from(["/", "a", "b", ".", "-", "~", " ", "\n", "é", "(", ")", ":", "_", "1"])
_KEYS = st.lists(st.text(_PIECES, min_size=1, max_size=8), max_size=8)


@settings(max_examples=300, deadline=None)
@given(keys=_KEYS, extra=st.lists(st.text(_PIECES, max_size=6), max_size=12), data=st.data())
def test_matches_one_regular_expression_of_every_folder(keys, extra, data):
    moved = {key: f"<{n}>" for n, key in enumerate(keys)}
    parts = extra + keys
    text = "".join(data.draw(st.permutations(parts))) if parts else ""
    assert PathReplacer(moved).sub(text) == _by_one_expression(moved, text)
