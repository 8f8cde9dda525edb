"""The judge's public API: `Judge` over a backend chosen by name.

`Judge` extracts code from completions, consults the content-hash cache and
hands (problem, program) jobs to a backend: `local` (pre-warmed sandbox
workers on this machine, `engine.judge.local.pool`) or `sandbox_fusion` (HTTP,
`engine.judge.remote.sandbox_fusion`). Both return the same `SampleResult`.
"""

from __future__ import annotations

from typing import Callable, Sequence

from engine.judge.cache import ResultCache, job_key
from engine.judge.config import JudgeBackend, JudgeConfig, JudgeJob, test_count
from engine.judge.verdict import SampleResult, Verdict
from engine.problem import Problem
from engine.prompts.extract import extract_code
from engine.resources import load_object

# Backends by name, imported on first use (each pulls in its own machinery).
BACKENDS = {
    "local": "engine.judge.local.pool:LocalBackend",
    "sandbox_fusion": "engine.judge.remote.sandbox_fusion:SandboxFusionBackend",
}


def make_backend(config: JudgeConfig) -> JudgeBackend:
    return load_object(BACKENDS[config.backend])(config)


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
