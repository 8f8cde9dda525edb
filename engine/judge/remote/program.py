"""What a remote runner (SandboxFusion) runs for one function-test unit: the trusted side.

This file travels as source, after `engine.judge.remote.program_process`'s (the child
below) and `engine.judge.plain`'s, at the head of every request
(`remote_harness.program`); stdlib only. SandboxFusion returns only the exit
status, stdout and stderr, so the unit's report is the last stdout line that
starts with a nonce, which arrives on stdin (never in the request's code),
followed by the unit's part of the plan (the tests). The judge decides from it
with the local worker's rules (`outcome.assert_verdict`); expected literals
never leave the judge.

As in the local worker, the tests run here and the program's code never does: this
process forks a child that loads the program and answers each use of one of its objects
(a call, an attribute read or set) with strict plain data, or a handle for an object that is
not plain data (MBPP's `Pair`), which the tests can pass back; no operand, comparison or
helper of a test runs in the child. The nonce and the tests are read only after the fork
(the child never holds them: a program that found the tests' code could run it against a
probe and answer each call with the expected value), this process is made non-dumpable (so
the child cannot read its memory through /proc), its module path loses the work directory
(where the child can write), and every module the tests import is imported before the child
exists. A callable argument does not cross here: the judge's fault (`cannot pass`), said so.
"""

import builtins
import json
import os
import sys

_BUILTIN_NAMES = frozenset(dir(builtins))
_PR_SET_DUMPABLE = 4

# `_Program`, `_error` and `MAX_LINE` are `engine.judge.remote.program_process`'s: the request carries
# its source ahead of this file's (`remote_harness.program`), as the remote runner has no package to import.


def main(src, preload, plain):
    """Judge one unit: `preload` the modules the tests import, `plain` the plain-data codec."""
    try:
        code = compile(src, "<solution>", "exec", dont_inherit=True)
    except BaseException as exc:  # noqa: BLE001 — the sample's own failure
        _Report().send(["syntax", f"{type(exc).__name__}: {exc}"[:500]])
        return
    _run(code, preload, plain)


class _Report:
    """The private copy of stdout the unit's report goes to, tagged with the nonce. Made when the
    nonce and the unit's `spec` are read: the program's own prints then go to stderr, and stdin is empty."""

    def __init__(self):
        self.nonce = sys.stdin.readline().strip()
        self.spec = json.loads(sys.stdin.readline())
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        self.out = os.dup(1)
        os.dup2(2, 1)

    def send(self, record):
        line = self.nonce + " " + json.dumps(record) + "\n"
        if len(line) > MAX_LINE:
            line = self.nonce + " " + json.dumps(["module", {"error": "runtime", "msg": "report too large"}]) + "\n"
        data = line.encode()
        while data:
            data = data[os.write(self.out, data):]


def _evaluate(src, ns, plain):
    try:
        return {"v": plain["encode"](eval(compile(src, "<assert operand>", "eval", dont_inherit=True), ns))}
    except plain["TooLarge"] as exc:
        return _error(exc, plain)
    except plain["NotPlain"] as exc:
        return {"notplain": str(exc)[:300]}
    except BaseException as exc:  # noqa: BLE001
        return _error(exc, plain)


def _tests_view(ns, spec):
    """As the local worker's: a builtin's name means the builtin unless the tests mean the
    program's; the candidate alias is the entry point."""
    view = {k: v for k, v in ns.items() if k not in _BUILTIN_NAMES or k in spec["meant"] or k.startswith("__")}
    if spec["candidate"] and spec["entry"] in view:
        view[spec["candidate"]] = view[spec["entry"]]
    return view


# ---------------------------------------------------------------- the tests here, the program in a child


def _run(code, preload, plain):
    _undumpable()
    _close_module_path(preload)
    program = _Program(code, plain)
    report = _Report()  # only now: the child never holds the nonce or the tests
    spec = report.spec
    try:
        loaded = program.load()
        before = _before_values(spec, plain)
        if loaded is None:
            report.send(["module", program.failure])
            return
        ns = {"__name__": "solution", "__builtins__": builtins, **_tests_view(loaded, spec)}
        try:
            exec(compile(spec["setup"], "<test setup>", "exec", dont_inherit=True), ns)
        except BaseException as exc:  # noqa: BLE001 — the tests' own setup
            report.send(["module", _error(exc, plain)])
            return
        ns["__judge_plain__"] = lambda v: plain["decode"](plain["encode"](v))
        report.send(_run_unit(spec, ns, before, plain))
    finally:
        program.close()


def _leaves(spec, phase):
    return [(n, leaf) for n, leaf in enumerate(spec["unit"].get("leaves", ())) if leaf.get("phase") == phase]


def _before_values(spec, plain):
    """Operands computed from the tests alone, here and after the fork: the program's process
    never holds these expected values."""
    leaves = _leaves(spec, "before")
    if not leaves:
        return {}
    ns = {"__builtins__": builtins}
    try:
        exec(compile(spec["imports"], "<test imports>", "exec", dont_inherit=True), ns)
    except BaseException as exc:  # noqa: BLE001 — the tests' own imports: a judge fault
        return {str(n): {"error": "runtime", "msg": f"test imports failed: {_error(exc, plain)['msg']}"} for n, _ in leaves}
    return {str(n): _evaluate(leaf["src"], ns, plain) for n, leaf in leaves}


def _run_unit(spec, ns, before, plain):
    unit = spec["unit"]
    if unit["kind"] == "assert":
        after = {str(n): _evaluate(leaf["src"], ns, plain) for n, leaf in _leaves(spec, "after")}
        return ["values", after, before]
    try:
        exec(compile(unit["src"], "<test>", "exec", dont_inherit=True), ns)
        if unit["kind"] == "check":
            ns["check"](ns[spec["entry"]])
        return ["ok"]
    except BaseException as exc:  # noqa: BLE001
        return ["error", _error(exc, plain)]


def _undumpable():
    """Keep the program's process out of this one's memory and fds (/proc/<pid>/mem needs ptrace
    rights over a non-dumpable process, which a sandbox without CAP_SYS_PTRACE lacks)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (ImportError, OSError, AttributeError):
        pass  # then only the sandbox's own ptrace policy stands between the two


def _close_module_path(preload):
    """The work directory is the script's, and the program's process can write files there (a
    `random.py` would be imported by a test's `import random`): off the path, and the tests'
    modules imported now."""
    here = {os.path.realpath(p) for p in (os.getcwd(), os.path.dirname(os.path.abspath(sys.argv[0] or ".")))}
    sys.path[:] = [p for p in sys.path if p and os.path.realpath(p) not in here]
    sys.path_importer_cache.clear()
    for name in preload:
        try:
            __import__(name)
        except BaseException:  # noqa: BLE001 — the test that imports it reports the failure
            pass
