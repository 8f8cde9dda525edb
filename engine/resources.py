"""Where the files the package reads live: launch and report templates, the registry.

In the repository they are the top-level `templates/` and `registry/` folders (the layout users
know and edit); a built wheel carries the same folders inside the package as `engine/_shipped/`.
"""

from __future__ import annotations

from pathlib import Path

ENGINE_ROOT = Path(__file__).resolve().parent


def shipped(name: str) -> Path:
    """`name` (templates | registry) inside an installed wheel, else at the repository's top level."""
    inside = ENGINE_ROOT / "_shipped" / name
    return inside if inside.is_dir() else ENGINE_ROOT.parent / name


TEMPLATES = shipped("templates")
REWARD_FILE = ENGINE_ROOT / "reward.py"  # the file verl loads by path
