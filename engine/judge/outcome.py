"""The worker's trusted side: read a runner's reports, guard the clock, decide verdicts.

Runs in the sandbox worker (stdlib only), never in the sandbox. Every value it
compares was decoded by `engine.judge.plain` into objects it built itself.
A test without a report fails; a sample is accepted only when every test
reported and passed.
"""

from __future__ import annotations

import operator
import signal
import time
from typing import Any

from engine.judge import plain
from engine.judge.checkers import get_checker
from engine.judge.compare import outputs_match

_OPS = {
    "Eq": operator.eq, "NotEq": operator.ne, "Lt": operator.lt, "LtE": operator.le, "Gt": operator.gt,
    "GtE": operator.ge, "Is": operator.is_, "IsNot": operator.is_not,
    "In": lambda a, b: operator.contains(b, a), "NotIn": lambda a, b: not operator.contains(b, a),
}
SLACK_S = 2.0  # stdio: the runner guards each test first; ours only catches a runner that stopped reporting
CUT = 300


class TestFailed(Exception):
    """A test's verdict other than ACCEPTED, with its message."""

    def __init__(self, verdict: str, message: str) -> None:
        super().__init__(message)
        self.verdict, self.message = verdict, message


class Collector:
    def __init__(self, job: dict, secret: dict) -> None:
        self.job, self.secret, self.limits = job, secret, job["limits"]
        self.order: list[int] = job["order"]
        self._known = frozenset(self.order)
        self.verdicts: dict[int, dict[str, Any]] = {}
        self.results: dict[int, dict] = {}
        self.before: dict[int, dict[int, dict]] = {}  # test → leaf → report, computed by the tests alone
        self.first = True
        self.stopped: str | None = None  # why the run ended before every test reported
        self.tails = ("", "")
        self.ready = False  # the current runner loaded the program and is running tests
        self.restart = False  # the current runner ended itself for a fresh one to go on
        self.hard_deadline: float | None = None

    def follow(self, frames, guard_s: float) -> str:
        """Feed one runner's frames until the sample is decided or that runner stops reporting.

        Returns why it returned: "decided", "eof" (the runner's pipe closed; the worker turns it
        into "cpu" when the exit status says the CPU limit ended it), "wall" (no frame
        for `guard_s`), "hard" (the whole sample's wall budget is spent), "orphaned", "bad".
        """
        if self.hard_deadline is None:
            self.hard_deadline = time.monotonic() + (len(self.order) + 1) * (self.limits["wall_s"] + SLACK_S) + 5
        self.ready = self.restart = False
        deadline = time.monotonic() + guard_s
        while self.stopped is None:
            now = time.monotonic()
            if now >= min(deadline, self.hard_deadline):
                return "wall" if deadline < self.hard_deadline else "hard"
            batch = frames.pump(min(deadline, self.hard_deadline) - now)
            if batch:
                deadline = time.monotonic() + guard_s
            for frame in batch:
                self._frame(frame)
                if self.stopped:
                    break
            if self.stopped is None and (frames.orphaned or frames.bad):
                return "orphaned" if frames.orphaned else "bad"
            if self.stopped is None and frames.eof:
                return "eof"
        return "decided"

    def give_up(self, why: str) -> None:
        """The runner stopped for a reason no single test explains: every unjudged test fails."""
        if self.stopped is not None:
            return
        if why in ("wall", "hard"):
            self._fail_rest("TIMEOUT", "wall-clock guard: the runner stopped reporting")
        elif why == "cpu":
            self._fail_rest("TIMEOUT", "CPU time limit while loading the program")
        elif why == "orphaned":
            self._fail_rest("INTERNAL_ERROR", "the judge closed the worker's control pipe mid-job")
        elif why == "bad":
            self._fail_rest("RUNTIME_ERROR", "garbled report stream")
        else:
            self._fail_rest("RUNTIME_ERROR", "the program ended its runner before every test reported")

    def first_unjudged(self, position: int) -> int | None:
        """The first position in the test order, from `position` on, without a verdict."""
        for k in range(position, len(self.order)):
            if self.order[k] not in self.verdicts:
                return k
        return None

    def crashed(self, done: dict) -> None:
        """The runner died on test `done["i"]` (its exit status, CPU and wall come from outside)."""
        self._done(done)

    # ---- frames
    def _frame(self, frame: dict) -> None:
        kind = frame.get("t")
        if self.first:
            self.first = False
            if kind == "before":
                self.before = _by_test(frame.get("values") or {})
                return
            if self.job["mode"] == "function" and kind not in ("syntax", "fault"):
                self._fail_rest("RUNTIME_ERROR", "report stream did not start with the judge's own frame")
                return
        if kind == "syntax":
            self._fail_rest("SYNTAX_ERROR", frame.get("msg", ""))
        elif kind == "module":
            self._fail_rest(error_verdict(frame), f"while loading the program: {frame.get('msg', '')}")
        elif kind == "result":
            i = int(frame["i"])
            self.results.setdefault(i, frame)
            self._done({"i": i, "cpu": frame.get("cpu", 0.0), "wall": frame.get("wall", 0.0)})
        elif kind == "tails":
            if not any(self.tails):
                self.tails = (str(frame.get("stdout_tail", "")), str(frame.get("stderr_tail", "")))
        elif kind == "done":
            self._done(frame)
        elif kind == "ready":
            self.ready = True
        elif kind == "restart":
            self.restart = True
        elif kind == "end":
            self._fail_rest("RUNTIME_ERROR", "the runner ended before every test reported")
        elif kind == "fault":  # only the runner writes frames: the program's processes cannot reach the pipe
            self._fail_rest("INTERNAL_ERROR", f"judge fault in the runner: {frame.get('msg', '')}")

    def _done(self, done: dict) -> None:
        i = int(done["i"])
        if i in self.verdicts or i not in self._known:
            return
        try:
            verdict, extra = self._decide(i, done)
        except TestFailed as exc:
            verdict, extra = exc.verdict, {"message": exc.message}
        except Exception as exc:  # noqa: BLE001 — comparing plain values can still raise (e.g. TypeError)
            verdict, extra = "RUNTIME_ERROR", {"message": f"comparison failed: {type(exc).__name__}: {exc}"[:CUT]}
        self.verdicts[i] = {"index": i, "verdict": verdict, "cpu_s": float(done.get("cpu", 0.0)),
                            "wall_s": float(done.get("wall", 0.0)), **extra}
        if self.job["mode"] == "stdio" and (verdict != "ACCEPTED" or not any(self.tails)):
            self.tails = (str(done.get("stdout_tail", done.get("out", "")))[-self.limits["tail_bytes"]:],
                          str(done.get("stderr_tail", ""))[-self.limits["tail_bytes"]:])
        # A judge fault on one test decides nothing about the program: the tests after it still run,
        # so a real failure anywhere decides the sample (`summary`).
        if verdict not in ("ACCEPTED", "INTERNAL_ERROR") and self.job["stop_first"]:
            self.stopped = "stop_on_first_failure"
        elif len(self.verdicts) == len(self.order):
            self.stopped = "complete"

    def _decide(self, i: int, done: dict) -> tuple[str, dict]:
        self._check_limits(done)
        if self.job["mode"] == "stdio":
            return self._decide_stdio(i, done)
        result = self.results.get(i)
        if result is None:
            raise TestFailed("RUNTIME_ERROR", f"the test process exited without reporting (exit {done.get('code')})")
        # The tests report from the runner, a process the program never ran in (`engine.judge.local.testcode`).
        if "error" in result:
            judge_fault = result["error"] == "judge"  # a call the judge's side could not make
            raise TestFailed("INTERNAL_ERROR" if judge_fault else error_verdict(result), result.get("msg", ""))
        unit = self.secret["units"][i]
        if "ok" in result:
            return "ACCEPTED", {}
        before = self.before.get(i, {})
        after = result.get("values") or {}
        reports = {n: before[n] if n in before else after.get(str(n)) for n in range(len(unit["sources"]))}
        return assert_verdict(unit, reports, set(before), _literals(unit))

    def _check_limits(self, done: dict) -> None:
        sig, cpu = done.get("sig"), float(done.get("cpu", 0.0))
        if sig == signal.SIGXCPU or cpu > self.limits["cpu_s"] or (sig == signal.SIGKILL and done.get("wall_killed")):
            raise TestFailed("TIMEOUT", f"{cpu:.2f} s CPU, {float(done.get('wall', 0)):.2f} s wall")
        if sig == signal.SIGXFSZ or done.get("out_truncated"):
            raise TestFailed("OUTPUT_LIMIT", f"output over {self.limits['output_bytes']} bytes")
        if sig is not None:
            raise TestFailed("RUNTIME_ERROR", f"killed by signal {sig} ({_signame(sig)})")

    def _decide_stdio(self, i: int, done: dict) -> tuple[str, dict]:
        stderr = str(done.get("stderr_tail", ""))
        if done.get("code"):
            verdict = "MEMORY_LIMIT" if "MemoryError" in stderr else "RUNTIME_ERROR"
            raise TestFailed(verdict, (stderr.strip().splitlines() or [f"exit status {done['code']}"])[-1][:CUT])
        expected, got = self.secret["outputs"][i], str(done.get("out", ""))
        name = self.secret.get("checker")
        if name:
            ok = get_checker(name)(self.job["plan"]["inputs"][i], expected, got)
        else:
            ok = outputs_match(expected, got, mode=self.secret["compare"], tol=self.secret["tol"])
        if ok:
            return "ACCEPTED", {}
        return "WRONG_ANSWER", {"input": self.job["plan"]["inputs"][i][:CUT], "expected": expected[:CUT],
                                "got": got[:CUT]}

    def _fail_rest(self, verdict: str, message: str) -> None:
        for i in self.order:
            if i not in self.verdicts:
                self.verdicts[i] = {"index": i, "verdict": verdict, "message": message[:CUT]}
                if self.job["stop_first"]:
                    break
        self.stopped = message or verdict

    # ---- summary
    def summary(self) -> dict:
        ordered = [self.verdicts[i] for i in self.order if i in self.verdicts]
        failures = [v for v in ordered if v["verdict"] != "ACCEPTED"]
        passed = len(ordered) - len(failures)
        judged_faults = [f for f in failures if f["verdict"] == "INTERNAL_ERROR"]
        # A real failure on any test decides the sample; a judge fault only when no test failed.
        real = [f for f in failures if f["verdict"] != "INTERNAL_ERROR"]
        first = real[0]["verdict"] if real else ("INTERNAL_ERROR" if judged_faults else
                                                 "ACCEPTED" if passed == len(self.order) else "RUNTIME_ERROR")
        if real:
            failures = real + judged_faults
        return {
            "verdict": first,
            "passed": passed,
            "total": len(self.order),
            "failures": failures[: self.job["max_failures"]],
            "stdout_tail": self.tails[0],
            "stderr_tail": self.tails[1],
            "stopped": self.stopped,
        }


def _by_test(values: dict) -> dict[int, dict[int, dict]]:
    """The "before" frame's reports ("test.leaf" → report) by test, then leaf."""
    tests: dict[int, dict[int, dict]] = {}
    for key, report in values.items():
        test, _, leaf = str(key).partition(".")
        if test.isdigit() and leaf.isdigit():
            tests.setdefault(int(test), {})[int(leaf)] = report
    return tests


def assert_verdict(unit: dict, reports: dict[int, dict | None], trusted: set[int],
                   literals: dict[int, object] | None = None) -> tuple[str, dict]:
    """An assert's verdict from its plan (secret side: the logic tree and the expected literals)
    and the reports of its other operands, by leaf. `trusted` leaves were computed by the tests
    alone (their failure is the judge's); literals never come from a report. Shared by the local
    worker and the `sandbox_fusion` backend, so both decide alike; `unit` is not changed (the
    judge's plans are shared and sent to workers as they are). Raises `TestFailed`."""
    if literals is None:
        literals = _decoded(unit)
    values = _leaf_values(unit, reports, trusted, literals)
    if _truth(unit["tree"], values):
        return "ACCEPTED", {}
    shown = trusted | {int(n) for n in unit["literals"]}
    got = [plain.short_repr(v) for n, v in sorted(values.items()) if n not in shown]
    expected = [plain.short_repr(v) for n, v in sorted(values.items()) if n in shown]
    return "WRONG_ANSWER", {"input": unit["label"][:CUT], "got": ", ".join(got)[:CUT],
                            "expected": ", ".join(expected)[:CUT] or None}


def _leaf_values(unit: dict, reports: dict[int, dict | None], trusted: set[int],
                 literals: dict[int, object]) -> dict[int, object]:
    values: dict[int, object] = {}
    for n in range(len(unit["sources"])):
        if n in literals:
            values[n] = literals[n]
            continue
        report = reports.get(n)
        if not isinstance(report, dict):
            raise TestFailed("RUNTIME_ERROR", f"no value reported for {unit['sources'][n][:CUT]}")
        if "v" in report:
            try:
                values[n] = plain.decode(report["v"])
            except plain.TooLarge as exc:  # past the bound the trusted side decodes under: the output's
                raise TestFailed("OUTPUT_LIMIT", f"{unit['sources'][n][:120]}: {exc}") from None
        elif "notplain" in report:
            raise TestFailed("WRONG_ANSWER", f"{unit['sources'][n][:120]}: {report['notplain']}")
        elif n in trusted:
            raise TestFailed("INTERNAL_ERROR", f"the test's own operand failed: {report.get('msg', '')}")
        elif report.get("error") == "judge":  # only the runner says it: a value it could not pass
            raise TestFailed("INTERNAL_ERROR", str(report.get("msg", ""))[:CUT])
        else:
            raise TestFailed(error_verdict(report), str(report.get("msg", ""))[:CUT])
    return values


def _literals(unit: dict) -> dict[int, object]:
    """The unit's expected literals, decoded once per plan in the worker, which keeps its own copy
    of a plan's secret part for all its samples (nothing here mutates a value it compares)."""
    decoded = unit.get("decoded")
    if decoded is None:
        decoded = unit["decoded"] = _decoded(unit)
    return decoded


def _decoded(unit: dict) -> dict[int, object]:
    return {int(n): plain.decode(v) for n, v in unit["literals"].items()}


def _truth(tree: dict, values: dict[int, object]) -> bool:
    return bool(_eval_tree(tree, values))


def _eval_tree(tree: dict, values: dict[int, object]) -> object:
    if "leaf" in tree:
        return values[tree["leaf"]]
    ops = tree.get("ops")
    if ops is not None and len(ops) == 1:  # most asserts: one comparison
        left, right = tree["cmp"]
        return _OPS[ops[0]](_eval_tree(left, values), _eval_tree(right, values))
    if "not" in tree:
        return not _eval_tree(tree["not"], values)
    if "and" in tree:
        result: object = True
        for sub in tree["and"]:
            result = _eval_tree(sub, values)
            if not result:
                return result
        return result
    if "or" in tree:
        result = False
        for sub in tree["or"]:
            result = _eval_tree(sub, values)
            if result:
                return result
        return result
    operands = [_eval_tree(t, values) for t in tree["cmp"]]
    return all(_OPS[op](operands[k], operands[k + 1]) for k, op in enumerate(tree["ops"]))


def error_verdict(report: dict) -> str:
    return {"memory": "MEMORY_LIMIT", "output": "OUTPUT_LIMIT", "assert": "WRONG_ANSWER", "notplain": "WRONG_ANSWER",
            "timeout": "TIMEOUT"}.get(report.get("error", ""), "RUNTIME_ERROR")


def _signame(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return "?"
