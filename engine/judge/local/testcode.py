"""The tests' own code, in the runner: their namespace (the program's names as handles, then their
setup), each test's operands and statements, and what they report. Every operand, comparison and
helper of a test runs here, never in the program's process, whatever the setup binds or how (star
imports, nested imports, definitions under `if`/`try`/`with`, lambdas, defaults, decorators): the
program only answers each use of one of its objects (`engine.judge.local.program`).
"""

from __future__ import annotations

import builtins
import sys
import types

from engine.judge import plain
from engine.judge.local.crossing import exc_report

BUILTIN_NAMES = frozenset(dir(builtins))  # taken before any untrusted code runs
# A test naming `math` without importing it means the module (the program's `import math`): a
# program that bound the name to its own object (a class whose `isclose` says True) would decide
# the test's helper. Such a name reaches the tests only as that very module.
STDLIB_MODULES = frozenset(getattr(sys, "stdlib_module_names", ()))


def compiled(source, filename: str, mode: str):
    """The worker compiles the tests' own sources once per plan; what it could not compile (a broken
    test) is compiled here, so the error is reported as that test's, from inside the sandbox."""
    return source if isinstance(source, types.CodeType) else compile(source, filename, mode, dont_inherit=True)


def evaluate(src, ns: dict) -> dict:
    try:
        value = eval(compiled(src, "<assert operand>", "eval"), ns)
        return {"v": plain.encode(value)}
    except plain.NotPlain as exc:
        return {"notplain": str(exc)} if not isinstance(exc, plain.TooLarge) else exc_report(exc)
    except BaseException as exc:  # noqa: BLE001
        return exc_report(exc)


def tests_view(names: dict, plan: dict) -> dict:
    """The program's names as its tests see them. A builtin's name means the builtin (a program that
    binds `set` or `sorted` must not decide both sides of an assert), unless the plan says the tests
    mean the program's (MBPP 126 asks for a function named `sum`). The candidate alias is the
    entry point."""
    meant = plan["meant"]
    view = {k: v for k, v in names.items() if (k not in BUILTIN_NAMES or k in meant)
            and (k not in STDLIB_MODULES or v is sys.modules.get(k) or k == plan["entry"])}
    if plan["candidate"] and plan["entry"] in view:
        view[plan["candidate"]] = view[plan["entry"]]
    return view


def before_values(plan: dict) -> dict:
    """Operands that name only builtins and the test's imports, evaluated from those alone: what the
    tests compute without the program (their failure is the judge's)."""
    ns = {"__builtins__": builtins}
    values: dict[str, object] = {}
    try:
        exec(compiled(plan["imports"], "<test imports>", "exec"), ns)
    except BaseException as exc:  # noqa: BLE001
        return {"error": f"test imports failed: {type(exc).__name__}: {exc}"}
    for u, unit in enumerate(plan["units"]):
        for n, leaf in enumerate(unit.get("leaves", ())):
            if leaf.get("phase") == "before":
                values[f"{u}.{n}"] = evaluate(leaf["src"], ns)
    return values


def namespace(names: dict, plan: dict) -> dict:
    """The tests' namespace: the program's names, then the tests' setup over them (raises what the
    setup raises: the module's failure)."""
    ns = {"__name__": "solution", "__builtins__": builtins, **tests_view(names, plan)}
    if plan["setup"]:
        exec(compiled(plan["setup"], "<test setup>", "exec"), ns)
    ns["__judge_plain__"] = lambda v: plain.decode(plain.encode(v))
    return ns


def run_unit(ns: dict, unit: dict, i: int, entry: str) -> dict:
    """One test's report: an assert's operands by leaf (the worker compares them with what it holds),
    or, for a statement or a check function, whether it finished."""
    if unit["kind"] == "assert":
        values = {str(n): evaluate(leaf["src"], ns) for n, leaf in enumerate(unit["leaves"])
                  if leaf.get("phase") == "after"}
        return {"t": "result", "i": i, "values": values}
    try:
        exec(compiled(unit["src"], "<test>", "exec"), ns)
        if unit["kind"] == "check":
            ns["check"](ns[entry])
        return {"t": "result", "i": i, "ok": True}
    except BaseException as exc:  # noqa: BLE001
        return {"t": "result", "i": i, **exc_report(exc)}
