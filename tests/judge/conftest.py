"""Fixtures shared by the judge tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest


@pytest.fixture(scope="session")
def sf_server_module() -> ModuleType:
    """tests/judge/sandbox_fusion_server.py: a loopback server speaking SandboxFusion's schema."""
    if "sandbox_fusion_server" in sys.modules:
        return sys.modules["sandbox_fusion_server"]
    path = Path(__file__).with_name("sandbox_fusion_server.py")
    spec = importlib.util.spec_from_file_location("sandbox_fusion_server", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["sandbox_fusion_server"] = module  # its dataclasses look their module up here
    spec.loader.exec_module(module)
    return module
