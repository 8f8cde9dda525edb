"""Turn a problem's tests into the plan the sandbox worker executes.

Function tests: each assert becomes a *logic tree* (compare / and / or / not)
over *leaves* (the operands). A leaf that is a literal is decoded here, in the
judge; a leaf that names only builtins and the test's imports is evaluated in
the sandbox before the program runs (so the program cannot influence it); any
other leaf is evaluated after the program ran, per test, and crosses back as
strict plain data (`engine.judge.plain`). The judge then applies the
comparison itself, on objects it built, so an always-equal object or a
patched builtin cannot make an assert pass. Statements that are not a single
assert (and HumanEval `check` functions that could not be split) run whole in
the sandbox with every comparison operand forced through the same plain-data
round trip; they pass on the positive "unit finished" frame.
"""

from __future__ import annotations

import ast
import builtins
import functools
import re
from typing import Any

from engine.judge import plain
from engine.judge.extract import parse_quietly
from engine.problem import Problem

_BUILTINS = frozenset(dir(builtins))


def function_plan(problem: Problem, program: str = "") -> tuple[dict[str, Any], dict[str, Any]]:
    """(public plan the sandbox sees, secret part only the worker sees: expected literals and labels).

    A name the program binds at top level (MBPP 126 defines its own `sum`) is not a builtin
    for its tests: operands using it are evaluated after the program, as the test means.
    Plans are cached by the tests' content and the builtins the program shadows (the only way
    the program changes a plan), so the n samples of one problem parse its tests once; the
    returned dicts are shared and must not be mutated.
    """
    tests = problem.function_tests
    if tests is None:
        raise ValueError(f"problem {problem.id} has no function tests")
    key = (problem.entry_point, tests.candidate, tests.setup, tuple(tests.asserts), tuple(tests.challenge), tests.check)
    suspects = _builtins_named_in(key) & set(_WORD.findall(program))
    shadowed = frozenset(suspects & _top_level_names(program)) if suspects else frozenset()
    return _plan(key, shadowed)


_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@functools.lru_cache(maxsize=4096)
def _builtins_named_in(key: tuple) -> frozenset[str]:
    texts = [part for item in key for part in (item if isinstance(item, tuple) else (item,)) if part]
    return _BUILTINS & frozenset(_WORD.findall("\n".join(texts)))


def clear_plan_cache() -> None:
    """Forget cached plans (benchmarks use it to time the cold path)."""
    _plan.cache_clear()
    _builtins_named_in.cache_clear()


@functools.lru_cache(maxsize=4096)
def _plan(key: tuple, shadowed: frozenset[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    entry_point, candidate, setup, asserts, challenge, check = key
    imports = _imports(setup)
    trusted = (_BUILTINS - shadowed) | _bound_names(imports)
    units: list[dict[str, Any]] = []
    for src in [*asserts, *challenge]:
        units.append(_assert_unit(src, trusted))
    if not units and check:
        units.append({"kind": "check", "src": _plain_guarded(check), "label": f"check({entry_point})"})
    public = {
        "setup": setup,
        "imports": imports,
        "entry": entry_point,
        "candidate": candidate,
        "units": [_public_unit(u) for u in units],
    }
    secret = {"units": [{"label": u["label"], "tree": u.get("tree"),
                         "literals": {str(n): leaf["literal"] for n, leaf in enumerate(u.get("leaves", ()))
                                      if "literal" in leaf},
                         "sources": [leaf["src"] for leaf in u.get("leaves", ())]} for u in units]}
    return public, secret


def _public_unit(unit: dict[str, Any]) -> dict[str, Any]:
    public = {"kind": unit["kind"]}
    if unit["kind"] == "assert":
        public["leaves"] = [{"src": leaf["src"], "phase": leaf["phase"]} if "phase" in leaf else {}
                            for leaf in unit["leaves"]]
    else:
        public["src"] = unit["src"]
    return public


def _imports(setup: str) -> str:
    try:
        tree = ast.parse(setup)
    except SyntaxError:
        return ""
    return "\n".join(ast.unparse(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)))


def _top_level_names(program: str) -> set[str]:
    try:
        tree = parse_quietly(program)
    except (SyntaxError, ValueError):
        return set()  # the sandbox reports the syntax error; no operand runs
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name.split(".")[0]) for a in node.names)
        else:
            names.update(n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))
    return names


def _bound_names(imports: str) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(imports).body:
        for alias in node.names:  # type: ignore[attr-defined]
            names.add(alias.asname or alias.name.split(".")[0])
    return names


def _assert_unit(src: str, trusted: frozenset[str] | set[str]) -> dict[str, Any]:
    try:
        body = ast.parse(src.strip()).body
    except SyntaxError:
        return {"kind": "stmt", "src": src, "label": src}  # the sandbox reports the syntax error
    if len(body) != 1 or not isinstance(body[0], ast.Assert):
        return {"kind": "stmt", "src": _plain_guarded(src), "label": src}
    leaves: list[dict[str, Any]] = []
    tree = _logic(body[0].test, leaves, trusted)
    return {"kind": "assert", "tree": tree, "leaves": leaves, "label": src.strip()}


def _logic(node: ast.expr, leaves: list[dict[str, Any]], trusted: frozenset[str] | set[str]) -> dict[str, Any]:
    if isinstance(node, ast.Compare):
        operands = [_logic_leaf(n, leaves, trusted) for n in [node.left, *node.comparators]]
        return {"cmp": operands, "ops": [type(op).__name__ for op in node.ops]}
    if isinstance(node, ast.BoolOp):
        return {"and" if isinstance(node.op, ast.And) else "or": [_logic(v, leaves, trusted) for v in node.values]}
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return {"not": _logic(node.operand, leaves, trusted)}
    # A bare operand is used for its truth value only: take bool() in the sandbox so any object
    # (a re.Match, a generator) can cross; a custom __bool__ can only claim what `return True` could.
    return _logic_leaf(ast.Call(func=ast.Name(id="bool", ctx=ast.Load()), args=[node], keywords=[]), leaves, trusted)


def _logic_leaf(node: ast.expr, leaves: list[dict[str, Any]], trusted: frozenset[str] | set[str]) -> dict[str, Any]:
    src = ast.unparse(node)
    leaf: dict[str, Any] = {"src": src}
    try:
        leaf["literal"] = plain.encode(ast.literal_eval(node))
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError, plain.NotPlain):
        names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
        leaf["phase"] = "before" if names <= trusted and not _has_lambda_or_walrus(node) else "after"
    leaves.append(leaf)
    return {"leaf": len(leaves) - 1}


def _has_lambda_or_walrus(node: ast.expr) -> bool:
    return any(isinstance(n, (ast.Lambda, ast.NamedExpr)) for n in ast.walk(node))


class _PlainGuard(ast.NodeTransformer):
    """Force every comparison operand and every bare assert test through plain data."""

    def visit_Compare(self, node: ast.Compare) -> ast.expr:
        self.generic_visit(node)
        node.left = _call("__judge_plain__", node.left)
        node.comparators = [_call("__judge_plain__", c) for c in node.comparators]
        return node

    def visit_Assert(self, node: ast.Assert) -> ast.stmt:
        self.generic_visit(node)
        if not isinstance(node.test, ast.Compare):
            node.test = _call("__judge_plain__", node.test)
        return node


def _call(name: str, arg: ast.expr) -> ast.Call:
    return ast.Call(func=ast.Name(id=name, ctx=ast.Load()), args=[arg], keywords=[])


def _plain_guarded(src: str) -> str:
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return src
    return ast.unparse(ast.fix_missing_locations(_PlainGuard().visit(tree)))


def stdio_plan(problem: Problem, *, compare: str, tol: float) -> tuple[dict[str, Any], dict[str, Any]]:
    public = {"inputs": [t.input for t in problem.stdio_tests]}
    secret = {"outputs": [t.output for t in problem.stdio_tests], "checker": problem.checker,
              "compare": compare, "tol": tol}
    return public, secret
