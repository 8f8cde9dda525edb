"""Function tests on a remote runner: the harness program and the decision on its output.

A remote sandbox (SandboxFusion) only returns exit status, stdout and stderr, and
reports `os._exit(0)` as success. So each assert unit is sent as one program:
the sample's code, the test's setup, and a trusted harness that

1. reads a nonce from stdin (never from the program text), then points stdin at
   /dev/null and the sample's stdout at stderr, keeping a private copy of stdout;
2. runs the sample, the setup, then evaluates the assertion's operands;
3. encodes the operand values with the local judge's strict plain-data
   encoding (`engine.judge.plain`: exact builtin types only) and writes them after the nonce on the private stdout.

`decide` then compares the rebuilt values in the judge's process. No marker
means the program ended before the test ran: never a pass. The harness shares
the sample's process, so this is weaker than the local backend (a program that
walks the harness's frames can find the nonce, and a test's own computation runs
beside the program); the local backend is the hardened path, this one keeps the
remote verdicts honest against the common reward hacks (early exit, always-equal
objects, patched builtins, a program's own `set` or `sorted`).
"""

from __future__ import annotations

import ast
import inspect
import operator
from dataclasses import dataclass
from typing import Any, Literal, Optional

from engine.judge import plain
from engine.judge.cases import function_plan
from engine.judge.verdict import Verdict
from engine.problem import Problem

_OPS: dict[type, tuple[str, Any]] = {
    ast.Eq: ("==", operator.eq),
    ast.NotEq: ("!=", operator.ne),
    ast.Lt: ("<", operator.lt),
    ast.LtE: ("<=", operator.le),
    ast.Gt: (">", operator.gt),
    ast.GtE: (">=", operator.ge),
    ast.Is: ("is", operator.is_),
    ast.IsNot: ("is not", operator.is_not),
    ast.In: ("in", lambda a, b: a in b),
    ast.NotIn: ("not in", lambda a, b: a not in b),
}
_OP_BY_NAME = {name: fn for name, fn in _OPS.values()}
_SYNTAX = ("SyntaxError", "IndentationError", "TabError")
# The local judge's strict plain-data encoding, run inside the sample's process
# before the sample's code (stdlib only, so it travels as source).
_PLAIN_SOURCE = inspect.getsource(plain)


@dataclass(frozen=True, kw_only=True)
class Unit:
    """One independently judged test: an assertion split into operands, or statements run whole."""

    source: str  # the test as written, for feedback
    setup: str = ""  # trusted test code run after the sample, before the unit
    mode: Literal["compare", "truth", "exec"]
    operands: tuple[str, ...] = ()  # expressions evaluated in the sample's process
    ops: tuple[str, ...] = ()  # compare mode: operators between consecutive operands
    negate: bool = False  # truth mode: `assert not x`
    statement: str = ""  # exec mode: run whole; passes when it completes


def split_assert(source: str, setup: str = "") -> Unit:
    """A unit for one test statement: decomposed when it is a single `assert`."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return Unit(source=source, setup=setup, mode="exec", statement=source)
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Assert):
        return Unit(source=source, setup=setup, mode="exec", statement=source)
    test = tree.body[0].test
    if isinstance(test, ast.Compare) and all(type(op) in _OPS for op in test.ops):
        operands = tuple(ast.unparse(e) for e in [test.left, *test.comparators])
        ops = tuple(_OPS[type(op)][0] for op in test.ops)
        return Unit(source=source, setup=setup, mode="compare", operands=operands, ops=ops)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return Unit(source=source, setup=setup, mode="truth", operands=(ast.unparse(test.operand),), negate=True)
    return Unit(source=source, setup=setup, mode="truth", operands=(ast.unparse(test),))


def units_of(problem: Problem) -> list[Unit]:
    """The problem's function-test units, in order (asserts, then challenge asserts)."""
    tests = problem.function_tests
    if tests is None:
        return []
    if tests.check is not None:
        setup = f"{tests.setup}\n{tests.check}"
        return [Unit(source=tests.check, setup=setup, mode="exec", statement=f"check({problem.entry_point})")]
    return [split_assert(a, tests.setup) for a in [*tests.asserts, *tests.challenge]]


def program(code: str, problem: Problem, unit: Unit) -> str:
    """The program sent to the remote runner for one unit."""
    spec = {
        "setup": unit.setup,
        "mode": unit.mode,
        "operands": list(unit.operands),
        "statement": unit.statement,
        "entry_point": problem.entry_point or "",
        # builtin names the tests mean as the program's; every other one means the builtin
        "meant": sorted(function_plan(problem).public["meant"]),
        # the name HumanEval's split asserts call the function by (`check(candidate)`'s parameter)
        "candidate": getattr(problem.function_tests, "candidate", None) or "candidate",
    }
    return f"{_HARNESS}\n__rlvr_harness({code!r}, {spec!r}, {_PLAIN_SOURCE!r})\n"


# The harness runs inside the sample's process: it captures every builtin it needs
# before the sample runs, and writes only through a private duplicate of stdout.
_HARNESS = r'''
def __rlvr_harness(__src, __spec, __plain_src):
    import builtins, os, sys
    _w, _type, _ascii, _len, _str, _exec, _eval, _compile = (
        os.write, type, ascii, len, str, exec, eval, compile)
    _builtin_names = frozenset(dir(builtins))
    nonce = sys.stdin.readline().strip()
    _null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(_null, 0)
    os.close(_null)
    out = os.dup(1)
    os.dup2(2, 1)

    def emit(rec):
        line = nonce + " " + _ascii(rec) + "\n"
        if _len(line) > 4_000_000:
            line = nonce + " " + _ascii(("bad", "value too large to report")) + "\n"
        _w(out, line.encode())

    plain = {"__name__": "__rlvr_plain__"}
    _exec(__plain_src, plain)
    _encode, _NotPlain = plain["encode"], plain["NotPlain"]

    def fail(phase, exc):
        try:
            msg = _str(exc)
            msg = msg[:300] if _type(msg) is str else ""
        except BaseException:
            msg = ""
        name = getattr(_type(exc), "__name__", "?")
        emit(("err", phase, name if _type(name) is str else "?", msg))

    ns = {"__name__": "__rlvr_candidate__"}
    try:
        code = _compile(__src, "<candidate>", "exec")
    except BaseException as exc:
        return fail("compile", exc)
    try:
        _exec(code, ns)
    except BaseException as exc:
        return fail("program", exc)
    try:
        # The tests see builtins, not the program's bindings of their names (a program's own `set`
        # must not decide both sides of an assert), except the problem's own function.
        ns = {k: v for k, v in ns.items() if k not in _builtin_names or k in __spec["meant"] or k[:2] == "__"}
        _exec(_compile(__spec["setup"], "<setup>", "exec"), ns)
        if __spec["entry_point"] and __spec["entry_point"] in ns:
            ns[__spec["candidate"]] = ns[__spec["entry_point"]]
        if __spec["mode"] == "exec":
            _exec(_compile(__spec["statement"], "<test>", "exec"), ns)
            return emit(("ok", "exec"))
        values = [_eval(_compile(e, "<test>", "eval"), ns) for e in __spec["operands"]]
        try:
            packed = [_encode(v) for v in values]
        except _NotPlain as exc:
            return emit(("bad", _str(exc.args[0])[:300]))
        emit(("ok", __spec["mode"], packed))
    except BaseException as exc:
        fail("test", exc)
'''


def _record(nonce: str, stdout: str) -> Optional[tuple]:
    prefix = nonce + " "
    for line in reversed(stdout.splitlines()):
        if line.startswith(prefix):
            try:
                rec = ast.literal_eval(line[len(prefix):])
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                return None
            return rec if isinstance(rec, tuple) and rec else None
    return None


def _from_error(unit: Unit, phase: str, name: str, msg: str) -> tuple[Verdict, str]:
    text = f"{name}: {msg}" if msg else name
    if phase == "compile" and name in _SYNTAX:
        return Verdict.SYNTAX_ERROR, text
    if name == "MemoryError":
        return Verdict.MEMORY_LIMIT, text
    if name == "AssertionError" and phase == "test" and unit.mode == "exec":
        return Verdict.WRONG_ANSWER, text
    return Verdict.RUNTIME_ERROR, text


def _holds(unit: Unit, values: list[Any]) -> bool:
    if unit.mode == "truth":
        return bool(values[0]) != unit.negate
    for (a, b), op in zip(zip(values, values[1:]), unit.ops):
        if not _OP_BY_NAME[op](a, b):
            return False
    return True


def decide(unit: Unit, nonce: str, stdout: str, stderr: str) -> tuple[Verdict, Optional[str]]:
    """The unit's verdict from the harness's record on stdout (compared here, on plain values)."""
    rec = _record(nonce, stdout)
    if rec is None:
        last = stderr.strip().splitlines()[-1:] or ["no error output"]
        return Verdict.RUNTIME_ERROR, f"the program ended before the test finished ({last[0][:200]})"
    if rec[0] == "err":
        return _from_error(unit, *rec[1:4])
    if rec[0] == "bad":
        return Verdict.WRONG_ANSWER, str(rec[1])
    if rec[1] == "exec":
        return Verdict.ACCEPTED, None
    try:
        values = [plain.decode(v) for v in rec[2]]
        ok = _holds(unit, values)
    except (TypeError, ValueError, IndexError, RecursionError) as exc:
        return Verdict.WRONG_ANSWER, f"comparison failed: {type(exc).__name__}: {exc}"[:300]
    if ok:
        return Verdict.ACCEPTED, None
    shown = " ".join(f"{plain.short_repr(v, 200)} {op}" for v, op in zip(values, unit.ops)) if unit.ops else ""
    return Verdict.WRONG_ANSWER, (shown + " " + plain.short_repr(values[-1], 200)).strip()
