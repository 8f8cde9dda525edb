"""`make install` installs what a new user's study needs, rule 3's search by meaning included,
and the README says what that costs to download."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _installed_extras() -> set[str]:
    """The extras of the project's own `-e ".[...]"` install in the Makefile's install recipe
    (uv or pip: one `EXTRAS` for both)."""
    makefile = (ROOT / "Makefile").read_text()
    assert '-e ".[$(EXTRAS)]"' in makefile
    (extras,) = re.findall(r"^EXTRAS := ([\w,]+)$", makefile, re.M)
    return set(extras.split(","))


def test_make_install_installs_the_semantic_extra():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    extras = _installed_extras()
    assert extras <= set(declared)
    assert "semantic" in extras, "make install leaves rule 3 by meaning out: a new user's study skips it"


def test_the_readme_shows_the_install_command_and_the_semantic_extras_size():
    readme = (ROOT / "README.md").read_text()
    shown = re.search(r'`make install`.*?`pip install -e "\.\[([\w,]+)\]"[^`]*`', readme, re.S)
    assert shown and set(shown.group(1).split(",")) == _installed_extras(), "the README shows what make install runs"
    assert re.search(r"`semantic` extra .*? (\d+) MB\s+download", readme, re.S), "the README states its download size"
