"""Turn a problem's tests into the plan the sandbox worker executes.

Function tests: each assert becomes a *logic tree* (compare / and / or / not)
over *leaves* (the operands). A leaf that is a literal is decoded here, in the
judge; a leaf that names only builtins and the test's imports is evaluated in
the sandbox before the program runs (so the program cannot influence it); any
other leaf is evaluated after the program loaded, per test, by the tests' own
process (the runner, never the program's: its calls answer plain data), and
crosses back as strict plain data (`engine.judge.plain`). The judge then applies the
comparison itself, on objects it built, so an always-equal object or a
patched builtin cannot make an assert pass. Statements that are not a single
assert (and HumanEval `check` functions that could not be split) run whole in
the sandbox with every comparison operand forced through the same plain-data
round trip; they pass on the positive "unit finished" frame.
"""

from __future__ import annotations

import ast
import bisect
import builtins
import functools
import itertools
from typing import Any, NamedTuple

from engine.judge import plain
from engine.judge.cache import PerObject
from engine.problem import Problem

_BUILTINS = frozenset(dir(builtins))


class CasePlan(NamedTuple):
    public: dict[str, Any]  # what the sandbox sees
    secret: dict[str, Any]  # only the worker: expected literals/outputs and labels
    id: int  # never reused in this process: a worker holding a plan by this id holds this very plan


_PLAN_IDS = itertools.count()


def function_plan(problem: Problem) -> CasePlan:
    """The plan of a function problem's tests.

    In the tests, a builtin's name means the builtin, whatever the program binds to it (a program
    defining its own `set` or `sorted` must not decide both sides of an assert), except the
    problem's own function (`meant`): MBPP 126 asks for a function named `sum`, and operands
    calling it are evaluated after the program ran. Plans are cached by the tests' content, so the
    n samples of one problem parse its tests once; the returned dicts are shared and must not be
    mutated.
    """
    tests = problem.function_tests
    if tests is None:
        raise ValueError(f"problem {problem.id} has no function tests")
    setup = _with_prompt_helpers(problem.prompt, problem.entry_point, tests.setup)
    key = (problem.entry_point, tests.candidate, setup, tuple(tests.asserts), tuple(tests.challenge), tests.check)
    return _plan(key, _meant(problem))


def _with_prompt_helpers(prompt: str, entry: str, setup: str) -> str:
    """The tests' setup, after the helpers the problem's own prompt defines beside the entry point.

    HumanEval's tests call the prompt's helpers (32's `poly`, 38's `encode_cyclic`, 50's
    `encode_shift`) by name, and a name the tests do not bind is the program's: a program that
    redefined `poly` to answer 0 decided its own test. The prompt is the problem's, so the tests
    define them themselves, over the program's names; a function the prompt leaves for the program
    to write (a body of only a docstring, `pass` or `...`) and the entry point stay the program's.
    """
    if not prompt.strip():
        return setup
    try:
        tree = ast.parse(prompt)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return setup  # prose, not code
    defs = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    kept = [n for n in tree.body if not (isinstance(n, defs) and (n.name == entry or _stub(n)))]
    if not any(isinstance(n, defs) for n in kept):
        return setup
    helpers = ast.unparse(ast.Module(body=kept, type_ignores=[]))
    return f"{helpers}\n{setup}" if setup.strip() else helpers


def _stub(node: ast.stmt) -> bool:
    if isinstance(node, ast.ClassDef):  # a class with a method left to write is the program's
        return any(_stub(n) for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))
    body = [n for n in node.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]  # type: ignore[attr-defined]
    return all(isinstance(n, ast.Pass) for n in body)


def clear_plan_cache() -> None:
    """Forget cached plans (the throughput bench times the cold path with it)."""
    _plan.cache_clear()
    _STDIO_PLANS.clear()
    _DEMANDING.clear()


def _meant(problem: Problem) -> frozenset[str]:
    """The builtin name the tests mean as the problem's own function: its entry point, if it is
    one (the MBPP converter names a builtin only when the reference defines it)."""
    return frozenset({problem.entry_point}) & _BUILTINS


@functools.lru_cache(maxsize=4096)
def _plan(key: tuple, meant: frozenset[str]) -> CasePlan:
    entry_point, candidate, setup, asserts, challenge, check = key
    imports = _imports(setup)
    trusted = (_BUILTINS - meant) | _bound_names(imports)
    units = _assert_units([*asserts, *challenge], trusted)
    if not units and check:
        units.append({"kind": "check", "src": _plain_guarded(check), "label": f"check({entry_point})"})
    public = {
        "setup": setup,
        "imports": imports,
        "entry": entry_point,
        "candidate": candidate,
        "meant": sorted(meant),  # builtin names the tests mean as the program's (see `function_plan`)
        "units": [_public_unit(u) for u in units],
    }
    secret = {"units": [{"label": u["label"], "tree": u.get("tree"),
                         "literals": {str(n): leaf["literal"] for n, leaf in enumerate(u.get("leaves", ()))
                                      if "literal" in leaf},
                         "sources": [leaf["src"] for leaf in u.get("leaves", ())]} for u in units]}
    return CasePlan(public, secret, next(_PLAN_IDS))


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


def _bound_names(imports: str) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(imports).body:
        for alias in node.names:  # type: ignore[attr-defined]
            names.add(alias.asname or alias.name.split(".")[0])
    return names


def _assert_units(srcs: list[str], trusted: frozenset[str] | set[str]) -> list[dict[str, Any]]:
    """A problem's asserts parsed together, one `ast.parse` instead of one each (parsing was most
    of what a cold plan cost); one that does not parse, or does not sit alone on its own lines
    once joined, is parsed on its own."""
    texts = [src.strip() for src in srcs]
    source = _Source("\n".join(texts))
    try:
        body = ast.parse(source.text).body
    except SyntaxError:
        return [_assert_unit(src, trusted) for src in srcs]
    heights = [t.count("\n") + 1 for t in texts]
    starts = list(itertools.accumulate([1] + heights[:-1]))
    owned: list[list[ast.stmt]] = [[] for _ in texts]
    for stmt in body:
        owned[bisect.bisect_right(starts, stmt.lineno) - 1].append(stmt)
    units = []
    for src, text, start, height, stmts in zip(srcs, texts, starts, heights, owned):
        alone = len(stmts) == 1 and stmts[0].end_lineno < start + height
        if alone and isinstance(stmts[0], ast.Assert):
            units.append(_assert_from(stmts[0], source, text, trusted))
        else:
            units.append(_assert_unit(src, trusted))
    return units


def _assert_unit(src: str, trusted: frozenset[str] | set[str]) -> dict[str, Any]:
    try:
        body = ast.parse(src.strip()).body
    except SyntaxError:
        return {"kind": "stmt", "src": src, "label": src}  # the sandbox reports the syntax error
    if len(body) != 1 or not isinstance(body[0], ast.Assert):
        return {"kind": "stmt", "src": _plain_guarded(src), "label": src}
    return _assert_from(body[0], _Source(src.strip()), src.strip(), trusted)


def _assert_from(node: ast.Assert, source: _Source, label: str, trusted: frozenset[str] | set[str]) -> dict[str, Any]:
    leaves: list[dict[str, Any]] = []
    tree = _Logic(source, leaves, trusted).tree(node.test)
    return {"kind": "assert", "tree": tree, "leaves": leaves, "label": label}


class _Source:
    """Text that nodes were parsed from; a node's own source is cut from it (`ast.unparse` of
    every operand was the other big part of a cold plan)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.lines = text.encode().split(b"\n")  # ast column offsets count UTF-8 bytes

    def of(self, node: ast.expr) -> str:
        """On one line, the node's own text; else (its lines may only join inside brackets that are
        not its own), or for `:=` (whose parentheses are not its own), `ast.unparse`."""
        if node.lineno == node.end_lineno and not isinstance(node, ast.NamedExpr):
            return self.lines[node.lineno - 1][node.col_offset:node.end_col_offset].decode()
        return ast.unparse(node)


class _Logic:
    """An assert's test as a logic tree (compare / and / or / not) over leaves."""

    def __init__(self, source: _Source, leaves: list[dict[str, Any]], trusted: frozenset[str] | set[str]) -> None:
        self.source, self.leaves, self.trusted = source, leaves, trusted

    def tree(self, node: ast.expr) -> dict[str, Any]:
        if isinstance(node, ast.Compare):
            return {"cmp": [self.leaf(n, self.source.of(n)) for n in [node.left, *node.comparators]],
                    "ops": [type(op).__name__ for op in node.ops]}
        if isinstance(node, ast.BoolOp):
            return {"and" if isinstance(node.op, ast.And) else "or": [self.tree(v) for v in node.values]}
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return {"not": self.tree(node.operand)}
        # A bare operand is used for its truth value only: take bool() in the sandbox so any object
        # (a re.Match, a generator) can cross; a custom __bool__ can only claim what `return True` could.
        call = ast.Call(func=ast.Name(id="bool", ctx=ast.Load()), args=[node], keywords=[])
        return self.leaf(call, f"bool({self.source.of(node)})")

    def leaf(self, node: ast.expr, src: str) -> dict[str, Any]:
        leaf: dict[str, Any] = {"src": src}
        try:
            leaf["literal"] = plain.encode(ast.literal_eval(node))
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError, plain.NotPlain):
            names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
            leaf["phase"] = "before" if names <= self.trusted and not _has_lambda_or_walrus(node) else "after"
        self.leaves.append(leaf)
        return {"leaf": len(self.leaves) - 1}


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


def stdio_plan(problem: Problem, *, compare: str, tol: float) -> CasePlan:
    """The same plan for the same problem object: a worker that holds a plan is not sent it
    again (inputs can be megabytes). The returned dicts are shared and must not be mutated."""
    return _STDIO_PLANS.get(problem, (compare, tol), lambda: CasePlan(
        {"inputs": [t.input for t in problem.stdio_tests]},
        {"outputs": [t.output for t in problem.stdio_tests], "checker": problem.checker, "compare": compare, "tol": tol},
        next(_PLAN_IDS)))


_STDIO_PLANS = PerObject(256)


def most_demanding(problem: Problem, n: int) -> Problem:
    """The problem with only its `n` most demanding tests (a protocol's `tests: {most_demanding: n}`):
    those with the largest input — the bytes of a stdio test's input, of the arguments a function
    test passes the problem's function (the whole test where it calls it nowhere visible) —
    ties going to the earlier test, run in their own order. Deterministic: the same tests on every
    machine. The problem itself when it has `n` tests or fewer (an unsplit HumanEval `check` is one
    test); else one copy per problem object, so the samples of a problem share its plan and cache key."""
    return _DEMANDING.get(problem, n, lambda: _most_demanding(problem, n))


def _largest(sizes: list[int], n: int) -> list[int]:
    """Indices of the `n` largest sizes (ties: the earlier index), in index order."""
    return sorted(sorted(range(len(sizes)), key=lambda i: (-sizes[i], i))[:n])


def _most_demanding(problem: Problem, n: int) -> Problem:
    if problem.kind == "stdio":
        if len(problem.stdio_tests) <= n:
            return problem
        keep = _largest([len(t.input.encode()) for t in problem.stdio_tests], n)
        return problem.model_copy(update={"stdio_tests": [problem.stdio_tests[i] for i in keep]})
    tests = problem.function_tests
    if tests is None or len(tests.asserts) + len(tests.challenge) <= n:
        return problem
    every = [*tests.asserts, *tests.challenge]
    names = {problem.entry_point, tests.candidate} - {None}
    keep = _largest([_input_bytes(a, names) for a in every], n)
    # the judge runs asserts and challenge tests alike: the kept ones become the asserts
    return problem.model_copy(update={"function_tests": tests.model_copy(update={
        "asserts": [every[i] for i in keep], "challenge": []})})


def _input_bytes(src: str, names: set[str]) -> int:
    """The size of a function test's input: the source of the arguments it passes the problem's
    function (`f(xs) == 3`: `xs`; the expected value is output, not input), all of them where it
    calls it more than once; the whole test where it calls it nowhere we can see."""
    try:
        tree = ast.parse(src.strip())
    except SyntaxError:
        return len(src.encode())
    text = src.strip()
    calls = [node for node in ast.walk(tree)
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in names]
    if not calls:
        return len(src.encode())
    return sum(len((ast.get_source_segment(text, a) or "").encode()) for c in calls for a in [*c.args, *c.keywords])


_DEMANDING = PerObject(1024)
