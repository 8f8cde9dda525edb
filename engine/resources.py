"""Where what the package uses lives: launch and report templates, the registry, the classes
its string registries name (`load_object`, imported on first use), and the GPUs this process
may use (`visible_gpus`).

In the repository they are the top-level `templates/` and `registry/` folders (the layout users
know and edit); a built wheel carries the same folders inside the package as `engine/_shipped/`.
"""

from __future__ import annotations

import importlib
import os
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


def visible_gpus() -> list[str]:
    """The GPU ids this process may use: CUDA_VISIBLE_DEVICES when it is set (empty: none), else the
    NVIDIA devices the machine shows (/dev/nvidia0, ...; none on a CPU machine). No CUDA runtime is
    loaded to find out."""
    found = sorted((p.name[len("nvidia"):] for p in Path("/dev").glob("nvidia[0-9]*")), key=int)
    preset = os.environ.get("CUDA_VISIBLE_DEVICES")
    if preset is None:
        return found
    # CUDA reads the list up to its first invalid entry: "0,-1,1" shows GPU 0 alone, and "0,1,2,3"
    # on a machine of two GPUs shows two (an index the machine lacks is invalid too).
    shown = []
    for entry in (g.strip() for g in preset.split(",")):
        if not entry or entry.startswith("-") or (found and entry.isdigit() and int(entry) >= len(found)):
            break
        shown.append(entry)
    return shown
