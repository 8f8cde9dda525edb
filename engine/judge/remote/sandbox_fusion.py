"""`sandbox_fusion` backend: judge through SandboxFusion's `POST /run_code` over HTTP.

Same verdict model as the local backend. The remote service only runs code; every
decision stays in this process:

- stdio tests: one request per test (the program, the test's stdin); the stdout
  is compared here with the local judge's comparator.
- function tests: one request per unit of the local judge's plan. The program
  is wrapped in a trusted harness (`engine.judge.remote.program`) that runs the
  unit's tests apart from the program, which runs in a forked child and answers
  their calls, and writes the operand values as plain data, tagged with
  a nonce that arrives on stdin, to a private copy of stdout. The comparison runs
  here with the local worker's rules on rebuilt builtin values and the expected
  literals, which never leave this process; exit code 0 alone never is a pass
  (SandboxFusion reports `os._exit(0)` as `Success`), nor is a report the
  program could have written itself.

A server that is down, keeps failing, answers `SandboxError` or too slowly gives
INTERNAL_ERROR with the reason, never a model-side verdict (the client and its retries:
`engine.judge.remote.client`).
"""

from __future__ import annotations

import secrets
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Optional

from engine.errors import UserError
from engine.judge.checkers import get_checker
from engine.judge.compare import outputs_match
from engine.judge.config import REMOTE_LEVEL, JudgeConfig, JudgeJob, test_count
from engine.judge.remote import harness
from engine.judge.remote.client import RunCodeRequest, RunCodeResponse, SandboxFusionClient, SandboxFusionSettings
from engine.judge.verdict import SampleResult, TestResult, Verdict
from engine.problem import Problem

_TAIL = 2000  # characters of stdout/stderr kept for repair feedback


# ---------------------------------------------------------------- verdicts from one run


def _failure_verdict(response: RunCodeResponse) -> Optional[Verdict]:
    """The verdict of a run that did not finish cleanly; None when it did."""
    rr = response.run_result or response.compile_result
    if rr is None:
        return Verdict.INTERNAL_ERROR
    stderr = rr.stderr or ""
    if rr.status == "TimeLimitExceeded":
        return Verdict.TIMEOUT
    if "MemoryError" in stderr:
        return Verdict.MEMORY_LIMIT
    if rr.status == "Finished" and rr.return_code == 0:
        return None
    last = stderr.strip().splitlines()[-1:] or [""]
    if last[0].startswith(("SyntaxError", "IndentationError", "TabError")):
        return Verdict.SYNTAX_ERROR
    return Verdict.RUNTIME_ERROR


def _tail(text: Optional[str]) -> str:
    return (text or "")[-_TAIL:]


@dataclass(kw_only=True)
class TestRun:
    """One test's outcome plus what repair feedback needs from its run."""

    result: TestResult
    stdout: str = ""
    stderr: str = ""


@dataclass(kw_only=True)
class RemoteLimits:
    timeout_s: float
    memory_mb: int
    max_output_bytes: int


def _internal(index: int, reason: str) -> TestRun:
    return TestRun(result=TestResult(index=index, verdict=Verdict.INTERNAL_ERROR, message=reason))


class SandboxFusionRunner:
    """Runs a sample's tests on SandboxFusion, one request per test unit, concurrently."""

    def __init__(self, settings: SandboxFusionSettings, *, compare: Callable[[Problem, str, str, str], bool]):
        self.client = SandboxFusionClient(settings)
        self._pool = ThreadPoolExecutor(max_workers=max(1, settings.max_concurrent), thread_name_prefix="sfusion")
        self._compare = compare  # (problem, input, expected, got) -> bool: the local judge's comparison

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.client.close()

    def run_tests(self, problem: Problem, code: str, limits: RemoteLimits, *, stop_on_first_failure: bool) -> list[TestRun]:
        """Every test unit's outcome, in test order (fewer when stopping at a failure)."""
        return self.collect(self.submit(problem, code, limits), stop_on_first_failure=stop_on_first_failure)

    def submit(self, problem: Problem, code: str, limits: RemoteLimits) -> list[Future[TestRun]]:
        return [self._pool.submit(job) for job in self._jobs(problem, code, limits)]

    @staticmethod
    def collect(futures: list[Future[TestRun]], *, stop_on_first_failure: bool) -> list[TestRun]:
        runs: list[TestRun] = []
        for index, fut in enumerate(futures):
            try:
                run = fut.result()
            except Exception as exc:  # a fault in this module: the judge's, never the model's
                run = _internal(index, f"sandbox_fusion backend fault: {type(exc).__name__}: {exc}")
            runs.append(run)
            if stop_on_first_failure and run.result.verdict != Verdict.ACCEPTED:
                for rest in futures:
                    rest.cancel()
                break
        return runs

    def _jobs(self, problem: Problem, code: str, limits: RemoteLimits) -> list[Callable[[], TestRun]]:
        if problem.kind == "stdio":
            return [
                (lambda i=i, t=t: self._run_stdio(i, code, problem, t.input, t.output, limits))
                for i, t in enumerate(problem.stdio_tests)
            ]
        if problem.function_tests is None:
            return []
        units = harness.labels(problem)
        program = harness.program(code, problem)  # every unit's request runs the same program
        return [(lambda i=i, label=label: self._run_unit(i, program, problem, label, limits))
                for i, label in enumerate(units)]

    def _request(self, code: str, stdin: str, limits: RemoteLimits) -> RunCodeRequest:
        return RunCodeRequest(
            code=code,
            stdin=stdin,
            compile_timeout=limits.timeout_s,
            run_timeout=limits.timeout_s,
            memory_limit_MB=limits.memory_mb,
        )

    def _run_stdio(self, index: int, code: str, problem: Problem, stdin: str, expected: str, limits: RemoteLimits) -> TestRun:
        outcome = self.client.run_code(self._request(code, stdin, limits))
        if outcome.response is None:
            return _internal(index, outcome.error or "no response")
        rr = outcome.response.run_result
        got = (rr.stdout if rr else None) or ""
        verdict = _failure_verdict(outcome.response)
        if verdict is None:
            if len(got.encode("utf-8", "replace")) > limits.max_output_bytes:
                verdict = Verdict.OUTPUT_LIMIT
            else:
                verdict = Verdict.ACCEPTED if self._compare(problem, stdin, expected, got) else Verdict.WRONG_ANSWER
        result = TestResult(
            index=index,
            verdict=verdict,
            wall_s=float((rr.execution_time if rr else None) or 0.0),
            input=stdin[:500],
            expected=expected[:500],
            got=got[:500],
            message=_message(outcome.response, verdict),
        )
        return TestRun(result=result, stdout=_tail(got), stderr=_tail(rr.stderr if rr else ""))

    def _run_unit(self, index: int, program: str, problem: Problem, label: str, limits: RemoteLimits) -> TestRun:
        nonce = secrets.token_hex(16)
        outcome = self.client.run_code(self._request(program, harness.stdin(problem, index, nonce), limits))
        if outcome.response is None:
            return _internal(index, outcome.error or "no response")
        rr = outcome.response.run_result
        stdout, stderr = (rr.stdout or "", rr.stderr or "") if rr else ("", "")
        verdict, extra = harness.decide(problem, index, nonce, stdout, stderr)
        failed = _failure_verdict(outcome.response)
        if failed in (Verdict.TIMEOUT, Verdict.MEMORY_LIMIT) and verdict != Verdict.ACCEPTED:
            verdict, extra = failed, {"message": _message(outcome.response, failed)}
        result = TestResult(
            index=index,
            verdict=verdict,
            wall_s=float((rr.execution_time if rr else None) or 0.0),
            **{"input": label[:500], **extra},
        )
        own = "\n".join(line for line in stdout.splitlines() if not line.startswith(nonce))
        return TestRun(result=result, stdout=_tail(own), stderr=_tail(stderr))


def _decided(futures: list[Future[TestRun]], stop_on_first_failure: bool) -> bool:
    """Whether `collect` would return without waiting: every test done, or (sparse) every test
    before the first failing one."""
    for fut in futures:
        if not fut.done():
            return False
        if stop_on_first_failure and (fut.exception() is not None or fut.result().result.verdict != Verdict.ACCEPTED):
            return True
    return True


def _message(response: RunCodeResponse, verdict: Verdict) -> Optional[str]:
    if verdict in (Verdict.ACCEPTED, Verdict.WRONG_ANSWER):
        return None
    rr = response.run_result or response.compile_result
    if rr is None:
        return f"sandbox_fusion returned no run_result (status {response.status}: {response.message[:200]})"
    lines = (rr.stderr or "").strip().splitlines()
    return lines[-1][:300] if lines else f"{rr.status}, exit code {rr.return_code}"


# ---------------------------------------------------------------- the backend


ISOLATION = "remote (SandboxFusion; isolation is the server's)"


class SandboxFusionBackend:
    """`JudgeBackend` over SandboxFusion: every test of every job in one bounded pool."""

    def __init__(self, config: JudgeConfig, *, settings: Optional[SandboxFusionSettings] = None) -> None:
        if settings is None:
            if not config.url:
                raise UserError("judge backend sandbox_fusion needs a url (e.g. --url http://host:8080/run_code)")
            settings = SandboxFusionSettings(url=config.url, max_concurrent=max(1, config.workers))
        self.config = config
        self.runner = SandboxFusionRunner(settings, compare=self._compare)

    def isolation(self) -> str:
        return ISOLATION

    def isolation_level(self) -> str:
        return REMOTE_LEVEL

    def close(self) -> None:
        self.runner.close()

    def _compare(self, problem: Problem, stdin: str, expected: str, got: str) -> bool:
        if problem.checker:
            return get_checker(problem.checker)(stdin, expected, got)
        return outputs_match(expected, got, mode=self.config.compare, tol=self.config.float_tol)

    def _limits(self, problem: Problem) -> RemoteLimits:
        return RemoteLimits(
            timeout_s=problem.time_limit_s or self.config.timeout_s,
            memory_mb=problem.memory_limit_mb or self.config.memory_mb,
            max_output_bytes=self.config.max_output_bytes,
        )

    def run_stream(self, jobs: Iterable[JudgeJob], *, read_ahead: bool = True) -> Iterator[tuple[int, SampleResult]]:
        """Every test of every job submitted at once (the pool bounds what is in flight), so `jobs`
        is read whole first, whatever `read_ahead` says; a job's result as soon as its verdict is
        decided, whatever the order of the jobs."""
        started: dict[int, tuple[JudgeJob, float, list[Future[TestRun]]]] = {}
        for i, job in enumerate(jobs):
            started[i] = (job, time.monotonic(), self.runner.submit(job.problem, job.program, self._limits(job.problem)))
        while started:
            decided = [i for i, (job, _, futures) in started.items()
                       if _decided(futures, job.stop_on_first_failure)]
            if not decided:
                wait([f for _, _, futures in started.values() for f in futures if not f.done()],
                     return_when=FIRST_COMPLETED)
                continue
            for i in decided:
                job, t0, futures = started.pop(i)
                runs = self.runner.collect(futures, stop_on_first_failure=job.stop_on_first_failure)
                yield i, self._sample(job.problem, runs, time.monotonic() - t0)

    def _sample(self, problem: Problem, runs: list[TestRun], wall_s: float) -> SampleResult:

        total = test_count(problem)
        passed = sum(r.result.verdict is Verdict.ACCEPTED for r in runs)
        failing = [r for r in runs if r.result.verdict is not Verdict.ACCEPTED]
        internal = [r for r in failing if r.result.verdict is Verdict.INTERNAL_ERROR]
        verdict = Verdict.INTERNAL_ERROR if internal else (failing[0].result.verdict if failing else Verdict.ACCEPTED)
        if total == 0:
            verdict, internal = Verdict.INTERNAL_ERROR, []
        shown = failing[0] if failing else (runs[-1] if runs else None)
        return SampleResult(
            problem_id=problem.id,
            verdict=verdict,
            accepted=verdict is Verdict.ACCEPTED,
            passed=passed,
            total=total,
            pass_ratio=passed / total if total else 0.0,
            wall_s=wall_s,
            cpu_s=sum(r.result.wall_s for r in runs),
            stdout_tail=shown.stdout if shown else "",
            stderr_tail=shown.stderr if shown else "",
            failures=[r.result for r in failing[: self.config.max_failures_reported]],
            isolation=ISOLATION,
            message=(internal[0].result.message if internal else None) if total else "the problem has no tests",
        )
