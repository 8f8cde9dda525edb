"""A job as a runner reads it: the head, then the tests compiled once per held plan."""

from __future__ import annotations

import marshal
import types
from typing import NamedTuple

from engine.judge.local.runner import HEAD
from engine.judge.local.wire import receive


class _Plan(NamedTuple):
    public: dict  # the tests as the judge sent them (stdio inputs are also the checker's)
    secret: dict  # expected outputs and literals: this process only
    runner: dict  # `public` as runners get it: the tests' code compiled


class Plans:
    """The plans this worker holds, by the judge's id. A problem's tests cross the pipe, are
    parsed and compiled once, not once per sample (an RL step sends n samples of each problem,
    and stdio inputs can be megabytes); the judge says which to forget."""

    def __init__(self) -> None:
        self.held: dict[int, _Plan] = {}

    def take(self, job: dict, control: int) -> _Plan:
        for gone in job.pop("forget", ()):
            self.held.pop(gone, None)
        if job.pop("new_plan", False):  # its public and secret parts follow, a message each
            public, secret = receive(control) or {}, receive(control) or {}
            self.held[job["plan_id"]] = _Plan(public=public, secret=secret, runner=runner_plan(job["mode"], public))
        return self.held[job["plan_id"]]


_CODE_CACHE: dict[tuple[str, str, str], types.CodeType | str] = {}


def runner_job(job: dict, plan: dict) -> bytes:
    """The job as its runner reads it: marshal (a fraction of JSON's parsing cost in every runner),
    the tests after the rest, so that a runner can fork before it reads them (`JobBuffer`)."""
    fields = {k: v for k, v in job.items() if k != "plan"}
    fields["apart"] = bool(plan.get("apart"))
    head = marshal.dumps(fields)
    return HEAD.pack(len(head)) + head + marshal.dumps(plan)


def runner_plan(mode: str, plan: dict) -> dict:
    """The tests' sources compiled here, once per source for the worker's life."""
    if mode != "function":
        return plan
    return {**plan, "setup": _test_code(plan["setup"], "<test setup>", "exec"),
            "imports": _test_code(plan["imports"], "<test imports>", "exec"),
            "units": [_unit_code(u) for u in plan["units"]]}


def _unit_code(unit: dict) -> dict:
    if unit["kind"] != "assert":
        return {**unit, "src": _test_code(unit["src"], "<test>", "exec")}
    leaves = [{**leaf, "src": _test_code(leaf["src"], "<assert operand>", "eval")} if "src" in leaf else leaf
              for leaf in unit["leaves"]]
    return {**unit, "leaves": leaves}


def _test_code(source: str, filename: str, mode: str) -> types.CodeType | str:
    key = (source, filename, mode)
    code = _CODE_CACHE.get(key)
    if code is None:
        if len(_CODE_CACHE) > 100_000:
            _CODE_CACHE.clear()
        try:
            code = compile(source, filename, mode, dont_inherit=True)
        except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
            code = source  # the runner compiles it again and reports the error as the test's
        _CODE_CACHE[key] = code
    return code
