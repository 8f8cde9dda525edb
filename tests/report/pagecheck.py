"""A result page is valid Markdown a reviewer can read: table rows match their header, links and
images resolve (shared by the report tests and the smoke study's)."""

from __future__ import annotations

import re
from pathlib import Path

from markdown_it import MarkdownIt


def check_page(path: Path) -> None:
    """Every table row has its header's cell count; every link and image exists."""
    tokens = MarkdownIt("commonmark").enable("table").parse(path.read_text())
    header, cells, in_head = 0, 0, False
    for token in tokens:
        if token.type == "thead_open":
            in_head, header = True, 0
        elif token.type == "thead_close":
            in_head = False
        elif token.type == "tr_open":
            cells = 0
        elif token.type in ("th_open", "td_open"):
            cells += 1
        elif token.type == "tr_close":
            if in_head:
                header = cells
            else:
                assert cells == header, f"{path.name}: a row has {cells} cells, its header {header}"
        elif token.type == "inline":
            for child in token.children or []:
                target = child.attrs.get("href") or child.attrs.get("src")
                if target and not re.match(r"^[a-z]+://", str(target)):
                    assert (path.parent / str(target)).exists(), f"{path.name}: {target} does not exist"
