"""The judge's public API: configuration, the backend protocol and `Judge`.

`Judge` extracts code from completions, consults the content-hash cache and
hands (problem, program) jobs to a backend: `local` (pre-warmed sandbox
workers on this machine, `engine.judge.local`) or `sandbox_fusion` (HTTP,
`engine.judge.sandbox_fusion`). Both return the same `SampleResult`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Literal, Optional, Protocol, Sequence

from engine.judge.cache import ResultCache, job_key
from engine.judge.extract import extract_code
from engine.judge.verdict import SampleResult, Verdict
from engine.problem import Problem

if TYPE_CHECKING:
    from engine.spec import JudgeSpec

CompareMode = Literal["tokens", "exact", "float"]


def usable_cpus() -> int:
    """The CPUs this process may run on: `os.cpu_count()` counts the machine's, so under a taskset or
    a container's cpuset it would start more workers than CPUs and pin several to each."""
    return len(os.sched_getaffinity(0))


@dataclass(kw_only=True)
class JudgeConfig:
    backend: Literal["local", "sandbox_fusion"] = "local"
    url: Optional[str] = None  # sandbox_fusion endpoint
    timeout_s: float = 6.0  # CPU seconds per test
    wall_timeout_s: Optional[float] = None  # per test; default max(2 × timeout_s, timeout_s + 1)
    memory_mb: int = 1024  # address space per sample
    max_output_bytes: int = 16 * 1024 * 1024  # per test; beyond it → OUTPUT_LIMIT
    workers: int = field(default_factory=usable_cpus)
    # One CPU per worker (its nursery and sandboxes inherit it): a sample's processes then share
    # one core's caches and TLB. None: pin when the workers are at least this process's CPUs, so
    # pinning never takes a free CPU away from them.
    pin_workers: Optional[bool] = None
    compare: CompareMode = "tokens"
    float_tol: float = 1e-6  # absolute-or-relative, used by compare="float"
    max_failures_reported: int = 3  # K failing tests kept for repair feedback
    stop_on_first_failure: bool = False  # sparse reward: only `accepted` matters
    cache: bool = True
    max_processes: int = 64  # RLIMIT_NPROC of the sandbox uid (threads count)
    max_open_files: int = 128
    tail_bytes: int = 2048  # stdout/stderr tails kept per sample

    @property
    def wall_s(self) -> float:
        return self.wall_timeout_s or max(2 * self.timeout_s, self.timeout_s + 1.0)

    @classmethod
    def from_spec(cls, spec: "JudgeSpec", **overrides) -> "JudgeConfig":
        fields = dict(
            backend=spec.backend,
            url=spec.url,
            timeout_s=spec.timeout_s,
            wall_timeout_s=spec.wall_timeout_s,
            memory_mb=spec.memory_mb,
            compare=spec.compare,
            float_tol=spec.float_tol,
        )
        if spec.concurrency:
            fields["workers"] = spec.concurrency
        fields.update(overrides)
        return cls(**fields)


@dataclass(kw_only=True, frozen=True)
class JudgeJob:
    """One program to run against one problem's tests (code already extracted)."""

    problem: Problem
    program: str
    stop_on_first_failure: bool


class JudgeBackend(Protocol):
    """What `Judge` needs from an executor; `local` and `sandbox_fusion` implement it.

    A backend never raises for a program's behaviour; its own faults become
    INTERNAL_ERROR results with the reason in `message`.
    """

    def isolation(self) -> str: ...

    def run_many(self, jobs: Sequence[JudgeJob], progress: Callable[[int], None] | None = None) -> list[SampleResult]: ...

    def close(self) -> None: ...


def make_backend(config: JudgeConfig) -> JudgeBackend:
    if config.backend == "sandbox_fusion":
        from engine.judge.sandbox_fusion import SandboxFusionBackend

        return SandboxFusionBackend(config)
    from engine.judge.local import LocalBackend

    return LocalBackend(config)


def test_count(problem: Problem) -> int:
    if problem.kind == "stdio":
        return len(problem.stdio_tests)
    tests = problem.function_tests
    if tests is None:
        return 0
    return (len(tests.asserts) + len(tests.challenge)) if tests.asserts else int(tests.check is not None)


class Judge:
    """Judges completions; a context manager owning the backend's workers."""

    def __init__(self, config: JudgeConfig | None = None, *, backend: JudgeBackend | None = None) -> None:
        self.config = config or JudgeConfig()
        self.backend = backend or make_backend(self.config)
        self._cache = ResultCache(enabled=self.config.cache)

    def __enter__(self) -> "Judge":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.backend.close()

    def judge(
        self, problem: Problem, completion: str, *, stop_on_first_failure: bool | None = None, code_is_program: bool = False
    ) -> SampleResult:
        return self.judge_many(
            [(problem, completion)], stop_on_first_failure=stop_on_first_failure, code_is_program=code_is_program
        )[0]

    def judge_many(
        self,
        items: Sequence[tuple[Problem, str]],
        *,
        stop_on_first_failure: bool | None = None,
        code_is_program: bool = False,
        progress: Callable[[int], None] | None = None,
    ) -> list[SampleResult]:
        """Judge every (problem, completion); results in input order. `progress(n)` reports n more done.

        What is derived from a problem's tests (plans, cache keys) is kept per problem object:
        treat a Problem as immutable once judged (build a new one for other tests)."""
        sparse = self.config.stop_on_first_failure if stop_on_first_failure is None else stop_on_first_failure
        results: list[SampleResult | None] = [None] * len(items)
        pending: dict[str, list[int]] = {}  # cache key → indices waiting for it
        jobs: list[JudgeJob] = []
        formats: list[bool] = []
        for i, (problem, completion) in enumerate(items):
            program, format_ok = self._program(problem, completion, code_is_program)
            formats.append(format_ok)
            if not program:
                results[i] = _no_code(problem)
                continue
            job = JudgeJob(problem=problem, program=program, stop_on_first_failure=sparse)
            key = job_key(job, self.config)
            hit = self._cache.get(key)
            if hit is not None:
                results[i] = hit.model_copy(update={"problem_id": problem.id, "cached": True})
            elif key in pending:
                pending[key].append(i)
            else:
                pending[key] = [i]
                jobs.append(job)
        if progress and len(items) - sum(len(v) for v in pending.values()):
            progress(len(items) - sum(len(v) for v in pending.values()))
        fresh = self.backend.run_many(jobs, progress=None) if jobs else []
        for (key, indices), result in zip(pending.items(), fresh, strict=True):
            if result.verdict is not Verdict.INTERNAL_ERROR:
                self._cache.put(key, result)
            for n, i in enumerate(indices):
                results[i] = result if n == 0 else result.model_copy(update={"problem_id": items[i][0].id, "cached": True})
            if progress:
                progress(len(indices))
        return [r if r.format_ok == formats[i] else r.model_copy(update={"format_ok": formats[i]})  # type: ignore[union-attr]
                for i, r in enumerate(results)]

    def _program(self, problem: Problem, completion: str, code_is_program: bool) -> tuple[str, bool]:
        if code_is_program:
            return (completion if completion.strip() else ""), True
        found = extract_code(completion, prompt=problem.prompt, entry_point=problem.entry_point)
        return found.code, found.format_ok

    def stats(self) -> dict[str, object]:
        return {**self._cache.stats(), "isolation": self.backend.isolation(), "backend": self.config.backend}


def _no_code(problem: Problem) -> SampleResult:
    return SampleResult(
        problem_id=problem.id,
        verdict=Verdict.NO_CODE,
        accepted=False,
        passed=0,
        total=test_count(problem),
        pass_ratio=0.0,
        format_ok=False,
        message="no code found in the completion",
    )
