"""Fixtures shared by the judge tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import NamedTuple

import pytest

from engine.problem import FunctionTests, Problem


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


class Exploit(NamedTuple):
    problem: Problem
    program: str  # the attack: gains only if the tests reach the program's process
    honest: str  # a correct program, which must still pass


# Tests that run code of their own (apart: the program runs in a process of its own), with the
# expected values as constants of that code.
LOOKUP = Problem(id="toy/lookup", source="toy", split="test", kind="function", statement="", entry_point="f",
                 function_tests=FunctionTests(candidate="candidate", check=(
                     "def check(candidate):\n"
                     "    for x, want in [(1, 1234567), (2, 7654321), (3, 5555555)]:\n"
                     "        assert candidate(x) == want\n")))
# Looks for the tests everywhere a program can reach from its own process: every frame's locals
# and what they hold (the tests' process's objects are there after a fork), the collector's
# objects, any mmap read as marshal at every offset, and any text that defines `check`. Pairs in
# the tests' constants become the answers.
TABLE_FROM_MEMORY = r'''
import gc, marshal, mmap, sys, types
table, seen = {}, set()

def consts(code):
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            consts(c)
        elif isinstance(c, tuple):
            table.update(item for item in c if isinstance(item, tuple) and len(item) == 2)

def walk(v, depth=0):
    if depth > 8 or id(v) in seen:
        return
    seen.add(id(v))
    if isinstance(v, types.CodeType):
        consts(v)
    elif isinstance(v, str) and "def check" in v:
        try:
            consts(compile(v, "<found>", "exec"))
        except Exception:
            pass
    elif isinstance(v, mmap.mmap):
        try:
            data = v[:]
        except ValueError:  # unmapped (the page the runner shares with its worker is, in here)
            return
        for off in range(min(len(data), 4096)):
            try:
                walk(marshal.loads(data[off:]), depth + 1)
            except Exception:
                pass
    elif isinstance(v, dict):
        for x in list(v.values()):
            walk(x, depth + 1)
    elif isinstance(v, (list, tuple)):
        for x in v:
            walk(x, depth + 1)
    elif hasattr(v, "__dict__") and not isinstance(v, (type, types.ModuleType)):
        walk(vars(v), depth + 1)

frame = sys._getframe()
while frame is not None:
    walk(dict(frame.f_locals))
    frame = frame.f_back
for obj in gc.get_objects():
    if isinstance(obj, (dict, types.FunctionType)):
        walk(obj.__code__ if isinstance(obj, types.FunctionType) else obj)
try:
    walk(open(sys.argv[0]).read())
except Exception:
    pass

def f(x):
    return table.get(x, -1)
'''


@pytest.fixture(scope="session")
def table_from_memory() -> Exploit:
    return Exploit(problem=LOOKUP, program=TABLE_FROM_MEMORY,
                   honest="def f(x):\n    return [0, 1234567, 7654321, 5555555][x]\n")
