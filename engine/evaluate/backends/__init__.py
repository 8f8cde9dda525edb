"""Generation backends behind one interface, chosen by name (`BACKENDS`), imported on first use."""

from __future__ import annotations

import importlib
from typing import Any

from engine.errors import UserError
from engine.evaluate.backends.base import Backend

BACKENDS = {
    "hf": "engine.evaluate.backends.hf:HFBackend",
    "vllm": "engine.evaluate.backends.vllm:VLLMBackend",
    "openai": "engine.evaluate.backends.openai:OpenAIBackend",
}


def make_backend(name: str, **options: Any) -> Backend:
    target = BACKENDS.get(name)
    if target is None:
        raise UserError(f"unknown generation backend {name!r}; use one of: {', '.join(BACKENDS)}")
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)(**options)


def default_backend() -> str:
    """vllm on a machine with a GPU and vllm installed, else hf."""
    if importlib.util.find_spec("vllm") is None:
        return "hf"
    import torch

    return "vllm" if torch.cuda.is_available() else "hf"
