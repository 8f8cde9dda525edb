"""Folders of this machine in a page's text replaced by portable ones: whole paths only, the
longest first (`/root` is home, `/rootfs` and `/mnt/root` are not).

A study of a thousand runs knows a thousand run folders. One regular expression alternating
them all tries each folder at every character of every page (minutes per page set); here a
path can only start where no path character precedes it, and only the lengths the folders
have are looked up there, so a page costs about its own length.
"""

from __future__ import annotations

import re
from typing import Mapping

_PATH_CHAR = r"[\w./~-]"  # a folder never starts right after one of these
_AFTER = re.compile(r"[\w.-]")  # nor ends right before one of these (a `/` may follow: a file inside)


class PathReplacer:
    def __init__(self, moved: Mapping[str, str]) -> None:
        self.moved = {key: value for key, value in moved.items() if key not in ("", "/")}
        self._lengths = sorted({len(key) for key in self.moved}, reverse=True)
        firsts = "".join(sorted({re.escape(key[0]) for key in self.moved}))
        self._start = re.compile(f"(?<!{_PATH_CHAR})[{firsts}]") if firsts else None

    def sub(self, text: str) -> str:
        """`text` with each known folder, where it stands as a whole path, replaced."""
        if self._start is None:
            return text
        out: list[str] = []
        done = pos = 0
        end = len(text)
        while (found := self._start.search(text, pos)) is not None:
            begin = pos = found.start()
            for length in self._lengths:
                stop = begin + length
                if stop <= end and (stop == end or not _AFTER.match(text, stop)) and text[begin:stop] in self.moved:
                    out += [text[done:begin], self.moved[text[begin:stop]]]
                    done = pos = stop
                    break
            else:
                pos = begin + 1
        out.append(text[done:])
        return "".join(out)
