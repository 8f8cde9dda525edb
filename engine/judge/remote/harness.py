"""Function tests on a remote runner: the request for one test unit and the decision on its output.

A remote sandbox (SandboxFusion) only returns exit status, stdout and stderr,
and reports `os._exit(0)` as success. Each unit of the problem's plan (the
local judge's, `cases.function_plan`) is sent as one program: the trusted
`program_process` and `remote_program` (which runs the tests apart from the program, in
the former's child), the strict plain-data codec, then a call with the sample's code and
the unit's public part. The expected literals stay here. `decide` reads the
unit's report (the last stdout line tagged with the nonce sent on stdin) and
decides with the local worker's own rules (`outcome.assert_verdict`), on values
rebuilt here: no report means the program ended before the test ran, never a
pass.
"""

from __future__ import annotations

import ast
import inspect
import json
from typing import Any, Optional

from engine.judge import plain
from engine.judge.cases import CasePlan, function_plan
from engine.judge.outcome import CUT, TestFailed, assert_verdict, error_verdict
from engine.judge.remote import program as remote_program
from engine.judge.remote import program_process
from engine.judge.verdict import Verdict
from engine.problem import Problem

_PROGRAM_SOURCE = f"{inspect.getsource(program_process)}\n\n{inspect.getsource(remote_program)}"
_PLAIN_SOURCE = inspect.getsource(plain)
MAX_REPORT = program_process.MAX_LINE


def labels(problem: Problem) -> list[str]:
    """The problem's test units, as the failures name them, in order."""
    return [unit["label"] for unit in function_plan(problem).secret["units"]]


def program(code: str, problem: Problem) -> str:
    """The program sent to the remote runner: the same for every unit, which comes on stdin."""
    public = function_plan(problem).public
    preload = _imported(public)
    return (f"{_PROGRAM_SOURCE}\n\n__rlvr_plain = {{'__name__': 'rlvr_plain'}}\n"
            f"exec({_PLAIN_SOURCE!r}, __rlvr_plain)\n"
            f"main({code!r}, {preload!r}, __rlvr_plain)\n")


def stdin(problem: Problem, index: int, nonce: str) -> str:
    """The request's stdin for unit `index`: the nonce, then the unit's tests (read after the fork,
    see `remote_program`)."""
    public = function_plan(problem).public
    spec = {key: public[key] for key in ("setup", "imports", "entry", "candidate", "meant")}
    spec["unit"] = public["units"][index]
    return f"{nonce}\n{json.dumps(spec)}\n"


def _imported(public: dict[str, Any]) -> list[str]:
    """Every module the tests import, by name: the tests' process imports them before the
    program's process exists (see `remote_program._close_module_path`)."""
    sources = [public["setup"], *(u.get("src", "") for u in public["units"]),
               *(leaf.get("src", "") for u in public["units"] for leaf in u.get("leaves", ()))]
    names: set[str] = set()
    for source in sources:
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module)
    return sorted(names)


def decide(problem: Problem, index: int, nonce: str, stdout: str, stderr: str) -> tuple[Verdict, dict[str, Any]]:
    """Unit `index`'s verdict and its failure's fields (`message`, or `input`/`got`/`expected`)."""
    record = _record(nonce, stdout)
    if record is None:
        last = stderr.strip().splitlines()[-1:] or ["no error output"]
        return Verdict.RUNTIME_ERROR, {"message": f"the program ended before the test finished ({last[0][:200]})"}
    try:
        verdict, extra = _decided(function_plan(problem), index, record)
    except TestFailed as exc:
        verdict, extra = exc.verdict, {"message": exc.message[:CUT]}
    except Exception as exc:  # noqa: BLE001 — comparing plain values can still raise (e.g. TypeError)
        verdict, extra = "RUNTIME_ERROR", {"message": f"comparison failed: {type(exc).__name__}: {exc}"[:CUT]}
    return Verdict(verdict), extra


def _record(nonce: str, stdout: str) -> Optional[list]:
    prefix = nonce + " "
    for line in reversed(stdout.splitlines()):
        if line.startswith(prefix):
            if len(line) > MAX_REPORT:
                return None
            try:
                record = json.loads(line[len(prefix):])
            except (ValueError, RecursionError):
                return None
            return record if isinstance(record, list) and record else None
    return None


def _decided(plan: CasePlan, index: int, record: list) -> tuple[str, dict[str, Any]]:
    kind = record[0]
    if kind == "syntax":
        raise TestFailed("SYNTAX_ERROR", str(record[1]))
    if kind == "module":
        raise TestFailed(error_verdict(record[1]), f"while loading the program: {record[1].get('msg', '')}")
    if kind == "ok":
        return "ACCEPTED", {}
    if kind == "error":
        report = record[1]
        raise TestFailed("INTERNAL_ERROR" if report.get("error") == "judge" else error_verdict(report),
                         str(report.get("msg", "")))
    if kind != "values":
        raise TestFailed("RUNTIME_ERROR", "garbled report")
    unit = plan.secret["units"][index]
    after, before = record[1], (record[2] if len(record) > 2 else {})
    leaves = range(len(unit["sources"]))
    reports = {n: before[str(n)] if str(n) in before else after.get(str(n)) for n in leaves}
    return assert_verdict(unit, reports, {n for n in leaves if str(n) in before})
