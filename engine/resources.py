"""Where what the package loads lives: launch and report templates, the registry, and the
classes its string registries name (`load_object`, imported on first use).

In the repository they are the top-level `templates/` and `registry/` folders (the layout users
know and edit); a built wheel carries the same folders inside the package as `engine/_shipped/`.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

ENGINE_ROOT = Path(__file__).resolve().parent


def shipped(name: str) -> Path:
    """`name` (templates | registry) inside an installed wheel, else at the repository's top level."""
    inside = ENGINE_ROOT / "_shipped" / name
    return inside if inside.is_dir() else ENGINE_ROOT.parent / name


TEMPLATES = shipped("templates")
REWARD_FILE = ENGINE_ROOT / "reward.py"  # the file verl loads by path


def load_object(target: str) -> Any:
    """The object `module:attribute` names, imported now: registries of backends by name keep
    strings so that choosing one never imports the others' machinery (torch, vllm, httpx)."""
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)
