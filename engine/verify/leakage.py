"""Rule 3's confirmation by execution: does one problem's solution solve the other problem?

A pair that the semantic stage (`engine.isolation.semantic`) proposes is confirmed when the
training problem's solution, adapted to the evaluation problem's form, passes every test of
the evaluation problem in the judge, and, where the evaluation problem has a solution and the
training problem has tests, the other way round as well. Adapting means: for function
problems, the solution's function is also bound to the name the tests call (MBPP's
`remove_first_last_occurrence` runs HumanEval tests that call `candidate`); for stdin/stdout
problems the program runs as it is. A function solution is never run against stdin/stdout
tests or the reverse: nothing tells how to map one onto the other.

Execution is evidence, not proof: two problems can share their tests' behaviour without
sharing a statement (a heap sort and a shell sort both sort), which is why only candidates
the model found similar in meaning are run. Verdicts are cached on disk by the judge's own
content key (program, tests, limits), so a second validation runs nothing.
"""

from __future__ import annotations

import ast
import json
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Callable, Optional, Sequence

from engine.data.cache import cache_root
from engine.isolation.semantic import PairConfirmer
from engine.judge.api import Judge
from engine.judge.cache import job_key
from engine.judge.config import JudgeConfig, JudgeJob
from engine.judge.verdict import Verdict
from engine.problem import Problem
from engine.spec.validated import Confirmation, Execution, ValidatedSpec

FORWARD, BACKWARD = "training → evaluation", "evaluation → training"


def adapted(solution_of: Problem, tests_of: Problem) -> tuple[Optional[str], str]:
    """(program, "") running `solution_of`'s first solution as `tests_of` expects it, or
    (None, why not)."""
    solutions = [code for code in solution_of.solutions if code.strip()]
    if not solutions:
        return None, f"{solution_of.id} has no solution"
    if tests_of.kind == "stdio":
        if not tests_of.stdio_tests:
            return None, f"{tests_of.id} has no tests"
        if solution_of.kind != "stdio":
            return None, f"{solution_of.id} is a function problem, {tests_of.id} reads stdin"
        return solutions[0], ""
    tests = tests_of.function_tests
    if tests is None or not (tests.asserts or tests.check):
        return None, f"{tests_of.id} has no tests"
    if solution_of.kind != "function":
        return None, f"{solution_of.id} reads stdin, {tests_of.id} calls a function"
    code = solutions[0]
    name = _defined_function(code, solution_of.entry_point)
    target = tests_of.entry_point
    if name is None or target is None:
        return None, f"no function to call in {solution_of.id}" if name is None else f"{tests_of.id} names no entry point"
    return (code if name == target else f"{code}\n\n{target} = {name}\n"), ""


def _defined_function(code: str, preferred: Optional[str]) -> Optional[str]:
    """The function a solution provides: its problem's entry point when the code defines it, else
    the last top-level function (helpers come first in MBPP and HumanEval solutions)."""
    try:
        module = ast.parse(code)
    except SyntaxError:
        return None
    names = [n.name for n in module.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if preferred in names:
        return preferred
    return names[-1] if names else None


# Verdicts that prove nothing about a pair: the pair is reported as not checked, never as clean.
UNSETTLED = {Verdict.INTERNAL_ERROR.value.lower(), Verdict.TIMEOUT.value.lower()}


def concluded(runs: tuple[Execution, ...], why: str) -> Confirmation:
    """Confirmed when the training solution ran against the evaluation tests and every run made
    passed every one of at least one test; not checked when a run was a judge fault or timed out."""
    confirmed = (bool(runs) and runs[0].solution == FORWARD
                 and all(r.verdict == "accepted" and r.total > 0 and r.passed == r.total for r in runs))
    unsettled = [f"{r.solution}: {r.verdict}" for r in runs if r.verdict in UNSETTLED]
    vacuous = [f"{r.solution}: accepted with no test run" for r in runs if r.verdict == "accepted" and r.total == 0]
    unchecked = "" if confirmed else "; ".join(unsettled + vacuous)
    return Confirmation(confirmed=confirmed, runs=runs, why=why, unchecked=unchecked)


class VerdictStore:
    """Judge verdicts of confirmation runs on disk (SQLite), keyed by `engine.judge.cache.job_key`."""

    def __init__(self, root: Optional[Path] = None) -> None:
        self.path = (root or cache_root()) / "leakage" / "confirmations.sqlite"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with closing(self._connect()) as db, db:
            db.execute("CREATE TABLE IF NOT EXISTS verdicts (key TEXT PRIMARY KEY, json TEXT NOT NULL)")

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=30)

    def get(self, keys: Sequence[str]) -> dict[str, dict]:
        out: dict[str, dict] = {}
        with closing(self._connect()) as db:
            for start in range(0, len(keys), 500):
                chunk = list(keys[start : start + 500])
                marks = ",".join("?" * len(chunk))
                rows = ((k, json.loads(v)) for k, v in
                        db.execute(f"SELECT key, json FROM verdicts WHERE key IN ({marks})", chunk))
                out.update((k, v) for k, v in rows if v["verdict"] not in UNSETTLED)  # run again, never trusted
        return out

    def put(self, rows: dict[str, dict]) -> None:
        with closing(self._connect()) as db, db:
            db.executemany("INSERT OR REPLACE INTO verdicts VALUES (?, ?)",
                           [(k, json.dumps(v, sort_keys=True)) for k, v in rows.items()])


def confirm_by_execution(validated: ValidatedSpec, pairs: Sequence[tuple[Problem, Problem]]) -> list[Confirmation]:
    """The `Confirmer` validation passes to rule 3: the spec's judge settings, the default cache."""
    return judge_confirmer(JudgeConfig.from_spec(validated.spec.judge))(pairs)


def judge_confirmer(config: JudgeConfig, *, store: Optional[VerdictStore] = None,
                    on_progress: Optional[Callable[[int], None]] = None) -> PairConfirmer:
    """Runs pairs in the judge with `config`, verdicts cached in `store` (default: the cache folder)."""

    def confirm(pairs: Sequence[tuple[Problem, Problem]]) -> list[Confirmation]:
        planned: list[tuple[list[tuple[str, Problem, str]], str]] = []
        for train, evaluation in pairs:
            forward, why = adapted(train, evaluation)
            runs = [] if forward is None else [(FORWARD, evaluation, forward)]
            backward, _ = adapted(evaluation, train) if forward is not None else (None, "")
            if backward is not None:
                runs.append((BACKWARD, train, backward))
            planned.append((runs, why))
        jobs = {job_key(JudgeJob(problem=p, program=code, stop_on_first_failure=True), config): (p, code)
                for runs, _ in planned for _, p, code in runs}
        cache = store or VerdictStore()
        known = cache.get(list(jobs))
        missing = [key for key in jobs if key not in known]
        if missing:
            with Judge(config) as judge:
                results = judge.judge_many([jobs[key] for key in missing], code_is_program=True,
                                           stop_on_first_failure=True, progress=on_progress)
            fresh = {key: {"verdict": r.verdict.value.lower(), "passed": r.passed, "total": r.total}
                     for key, r in zip(missing, results)}
            # A judge fault or a timeout says nothing about the pair (and a loaded machine may
            # time out what an idle one finishes): kept for this report, never cached.
            cache.put({k: v for k, v in fresh.items() if v["verdict"] not in UNSETTLED})
            known.update(fresh)
        out = []
        for runs, why in planned:
            done = tuple(Execution(solution=label, **known[job_key(JudgeJob(problem=problem, program=code,
                                                                            stop_on_first_failure=True), config)])
                         for label, problem, code in runs)
            out.append(concluded(done, why))
        return out

    return confirm
