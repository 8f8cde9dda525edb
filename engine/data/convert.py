"""Raw dataset rows (the shared files' forms) → the normalized `Problem`.

These are the only functions that read HumanEval / MBPP / CodeContests-derived
rows; the judge and everything downstream take `Problem`.
"""

from __future__ import annotations

import ast
import builtins
import re
from typing import Any, Callable, Mapping, Optional

from engine.problem import FunctionTests, Problem, StdioTest

# Statements that may sit between a `check` function's asserts without making
# the split unsafe: they neither bind names nor have side effects.
_HARMLESS = (ast.Pass,)
_BUILTIN_NAMES = frozenset(dir(builtins))


def problem_from_humaneval(row: Mapping[str, Any]) -> Problem:
    """A HumanEval row; `check` is split into its asserts when its body is flat."""
    entry = row["entry_point"]
    return Problem(
        id=row["task_id"],
        source="humaneval",
        split="test",
        kind="function",
        statement=row["prompt"],
        prompt=row["prompt"],
        entry_point=entry,
        function_tests=split_check(row["test"]),
        solutions=[row["prompt"] + row["canonical_solution"]],
        license="MIT",
    )


def split_check(test_src: str) -> FunctionTests:
    """Split HumanEval's test module into setup + one assert per unit.

    The split is taken only when `check`'s body is a flat list of asserts
    (docstrings, comments and `pass` allowed): any loop, assignment or import
    inside `check` could feed later asserts, so such a `check` stays one unit.
    """
    module = ast.parse(test_src)
    segment = _segmenter(test_src)
    checks = [n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == "check"]
    if len(checks) != 1 or len(checks[0].args.args) != 1:
        return FunctionTests(check=test_src)
    check = checks[0]
    asserts: list[str] = []
    for stmt in check.body:
        if isinstance(stmt, ast.Assert):
            if _is_trivially_true(stmt.test):
                continue  # `assert True, "..."` lines carry no test
            asserts.append(segment(stmt) or ast.unparse(stmt))
        elif isinstance(stmt, _HARMLESS) or _is_docstring(stmt):
            continue
        else:
            return FunctionTests(check=test_src)
    if not asserts:
        return FunctionTests(check=test_src)
    setup_nodes = [n for n in module.body if n is not check]
    setup = "\n".join(segment(n) or ast.unparse(n) for n in setup_nodes)
    return FunctionTests(setup=setup, asserts=asserts, candidate=check.args.args[0].arg)


# Lines as `ast.get_source_segment` splits them (on \r\n, \r and \n only, ends kept).
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def _segmenter(source: str) -> Callable[[ast.AST], Optional[str]]:
    """`ast.get_source_segment(source, node)` with the source split into lines once, not once
    per node: a HumanEval `check` holds up to a hundred asserts (a quadratic cost otherwise)."""
    lines = _LINE.findall(source)
    encoded: dict[int, bytes] = {}

    def line(number: int) -> bytes:  # ast's offsets count UTF-8 bytes
        if number not in encoded:
            encoded[number] = lines[number].encode()
        return encoded[number]

    def segment(node: ast.AST) -> Optional[str]:
        end_lineno, end_col = getattr(node, "end_lineno", None), getattr(node, "end_col_offset", None)
        if end_lineno is None or end_col is None:
            return None
        first, last, col = node.lineno - 1, end_lineno - 1, node.col_offset
        if first == last:
            return line(first)[col:end_col].decode()
        return "".join([line(first)[col:].decode(), *lines[first + 1 : last], line(last)[:end_col].decode()])

    return segment


def _is_trivially_true(test: ast.expr) -> bool:
    return isinstance(test, ast.Constant) and test.value is True


def _is_docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)


def problem_from_mbpp(row: Mapping[str, Any], sanitized: bool) -> Problem:
    """An MBPP row: full (`text`, `test_setup_code`) or sanitized (`prompt`, `test_imports`)."""
    if sanitized:
        statement, setup, challenge = row["prompt"], "\n".join(row.get("test_imports") or []), []
    else:
        statement, setup = row["text"], row.get("test_setup_code") or ""
        challenge = list(row.get("challenge_test_list") or [])
    return Problem(
        id=f"{'mbpp_sanitized' if sanitized else 'mbpp'}/{row['task_id']}",
        source="mbpp_sanitized" if sanitized else "mbpp",
        split=_mbpp_split(int(row["task_id"])),
        kind="function",
        statement=statement,
        entry_point=_first_function_name(row["test_list"], row["code"]),
        function_tests=FunctionTests(setup=setup, asserts=list(row["test_list"]), challenge=challenge),
        solutions=[row["code"]],
        license="CC-BY-4.0",
    )


def _mbpp_split(task_id: int) -> str:
    """google-research's split: 1-10 prompt, 11-510 test, 511-600 validation, rest train."""
    if task_id <= 10:
        return "prompt"
    if task_id <= 510:
        return "test"
    if task_id <= 600:
        return "valid"
    return "train"


def _first_function_name(asserts: list[str], reference: str) -> str | None:
    """The function the asserts call first: MBPP's de-facto entry point. A builtin's name counts
    only when the reference defines it (MBPP 126 asks for its own `sum`); the judge then lets the
    tests call the program's function of that name, and the builtin everywhere else."""
    own = set(_TOP_LEVEL_DEF.findall(reference))
    for src in asserts:
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                if node.func.id not in _BUILTIN_NAMES or node.func.id in own:
                    return node.func.id
    return None


_TOP_LEVEL_DEF = re.compile(r"^(?:async[ \t]+)?def[ \t]+([A-Za-z_][A-Za-z0-9_]*)", re.MULTILINE)


def problem_from_codecontests_derived(row: Mapping[str, Any]) -> Problem:
    """A row of the derived CodeContests train sample (stdin/stdout tests, one PYTHON3 solution)."""
    tests = row["tests"]
    solutions = [s for lang, s in zip(row["solutions"]["language"], row["solutions"]["solution"]) if lang == 3]
    return Problem(
        id=f"codecontests/{row['id']}",
        source="codecontests",
        split="train",
        kind="stdio",
        statement=row["description"],
        stdio_tests=[StdioTest(input=i, output=o) for i, o in zip(tests["input"], tests["output"], strict=True)],
        solutions=solutions,
        difficulty=int(row["difficulty"]) if row.get("difficulty") is not None else None,
        tags=list(row.get("cf_tags") or []),
        license="CC-BY-4.0",
    )
