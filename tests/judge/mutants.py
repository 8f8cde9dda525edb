"""Deterministic small mutations of a correct program, for the judge's real-data tests.

Mutations work on the AST and the result is re-rendered with `ast.unparse`, so a
mutation can never touch only a comment or formatting. Each returns None when the
program has no place for it.
"""

from __future__ import annotations

import ast
import copy
from typing import Callable, Iterator


def _is_print(stmt: ast.stmt) -> bool:
    return (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
            and isinstance(stmt.value.func, ast.Name) and stmt.value.func.id == "print")


def _blocks(tree: ast.AST) -> Iterator[list[ast.stmt]]:
    for node in ast.walk(tree):
        for name in ("body", "orelse", "finalbody"):
            block = getattr(node, name, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                yield block


def off_by_one(tree: ast.Module) -> ast.Module | None:
    """The first integer literal in source order, plus one."""
    consts = [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and type(n.value) is int]
    if not consts:
        return None
    min(consts, key=lambda n: (n.lineno, n.col_offset)).value += 1
    return tree


def swap_outputs(tree: ast.Module) -> ast.Module | None:
    """The first two sibling print statements, swapped."""
    for block in _blocks(tree):
        prints = [i for i, s in enumerate(block) if _is_print(s)]
        if len(prints) >= 2:
            a, b = prints[:2]
            block[a], block[b] = block[b], block[a]
            return tree
    return None


def drop_line(tree: ast.Module) -> ast.Module | None:
    """The first augmented assignment (`total += x`) dropped (replaced by `pass`)."""
    for block in _blocks(tree):
        for i, stmt in enumerate(block):
            if isinstance(stmt, ast.AugAssign):
                block[i] = ast.Pass()
                return tree
    return None


MUTATIONS: dict[str, Callable[[ast.Module], ast.Module | None]] = {
    "off_by_one": off_by_one, "swap_outputs": swap_outputs, "drop_line": drop_line,
}


def mutants(program: str) -> dict[str, str]:
    """name → mutated program, for every mutation that applies."""
    try:
        original = ast.parse(program)
    except SyntaxError:
        return {}
    out = {}
    for name, mutate in MUTATIONS.items():
        changed = mutate(copy.deepcopy(original))
        if changed is not None:
            out[name] = ast.unparse(ast.fix_missing_locations(changed))
    return out
