"""The judge's public API: `Judge` over a backend chosen by name.

`Judge` extracts code from completions, consults the content-hash cache and
hands (problem, program) jobs to a backend: `local` (pre-warmed sandbox
workers on this machine, `engine.judge.local.pool`) or `sandbox_fusion` (HTTP,
`engine.judge.remote.sandbox_fusion`). Both return the same `SampleResult`.
"""

from __future__ import annotations

import collections
from typing import Callable, Iterable, Iterator, Sequence

from engine.judge.cache import ResultCache, job_key
from engine.judge.cases import most_demanding
from engine.errors import UserError
from engine.judge.config import PROCESSES, JudgeBackend, JudgeConfig, JudgeJob, missing_isolation, test_count
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


class UnsandboxedJudge(UserError):
    """The judge cannot isolate untrusted code and was not allowed to judge without."""


class Judge:
    """Judges completions; a context manager owning the backend's workers.

    It refuses to judge (`UnsandboxedJudge`, on first use) where the backend could not isolate
    the network and the filesystem, unless `config.allow_unsandboxed`."""

    def __init__(self, config: JudgeConfig | None = None, *, backend: JudgeBackend | None = None) -> None:
        self.config = config or JudgeConfig()
        self.backend = backend or make_backend(self.config)
        self._cache = ResultCache(enabled=self.config.cache, size=self.config.cache_size)
        self._checked = False

    def __enter__(self) -> "Judge":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.backend.close()

    @property
    def version(self) -> str:
        """The version recorded with every number: the config's (limits) and the isolation obtained.
        Numbers judged at different isolation levels are never put side by side."""
        return f"{self.config.version}/{self.backend.isolation_level()}"

    def require_isolation(self) -> None:
        """Raise `UnsandboxedJudge` unless the network, the filesystem and the user's processes are
        isolated (or allowed not to be)."""
        if self._checked or self.config.allow_unsandboxed:
            return
        missing = missing_isolation(self.backend.isolation_level())
        if missing:
            reach = [what for name, what in (("the network", "the network"), ("the filesystem", "the run's files, "
                     "tests included"), (PROCESSES, "every process of this user (no PID namespace: kill, trace)"))
                     if name in missing]
            raise UnsandboxedJudge(
                f"the {self.config.backend} judge cannot isolate {' and '.join(missing)} on this machine "
                f"(obtained: {self.backend.isolation()}); the policy's programs would reach {' and '.join(reach)}\n"
                "  fix: allow unprivileged user namespaces (sysctl user.max_user_namespaces > 0; on Ubuntu "
                "24.04 also kernel.apparmor_restrict_unprivileged_userns=0) and PID namespaces "
                "(user.max_pid_namespaces > 0), or use `judge: {backend: sandbox_fusion, url: ...}`, or accept "
                "unsandboxed numbers with `judge: {allow_unsandboxed: true}` in the spec (`--allow-unsandboxed` "
                "for `rlvr-run judge`)")
        self._checked = True

    def judge(
        self, problem: Problem, completion: str, *, stop_on_first_failure: bool | None = None, code_is_program: bool = False,
        shown: bool = False,
    ) -> SampleResult:
        return self.judge_many(
            [(problem, completion)], stop_on_first_failure=stop_on_first_failure, code_is_program=code_is_program,
            shown=shown,
        )[0]

    def judge_many(
        self,
        items: Sequence[tuple[Problem, str]],
        *,
        stop_on_first_failure: bool | None = None,
        code_is_program: bool = False,
        progress: Callable[[int], None] | None = None,
        shown: bool = False,
    ) -> list[SampleResult]:
        """Judge every (problem, completion); results in input order. `progress(n)` reports n more done."""
        results: list[SampleResult | None] = [None] * len(items)
        for i, result in self.judge_stream(items, stop_on_first_failure=stop_on_first_failure,
                                           code_is_program=code_is_program, shown=shown):
            results[i] = result
            if progress:
                progress(1)
        return results  # type: ignore[return-value]

    def judge_stream(
        self,
        items: Iterable[tuple[Problem, str]],
        *,
        stop_on_first_failure: bool | None = None,
        code_is_program: bool = False,
        shown: bool = False,
    ) -> Iterator[tuple[int, SampleResult]]:
        """Yield `(index, result)` for every (problem, completion) of `items` as its verdict is known.

        The order is completion order, not input order: results without a program (NO_CODE) and
        cache hits come at once, fresh verdicts as workers finish them, so one slow sample never
        holds back the others. Every index of `items` is yielded exactly once.

        `items` may be any iterable. A sequence (list, tuple) is read a few items ahead of the
        workers; any other iterable only when a worker is free to start the next item, so a
        generator that blocks until the next completion is generated lets judging overlap
        generation (verdicts that finish while it blocks come out when it yields). The local
        backend reads lazily; `sandbox_fusion` reads the whole iterable first. Closing the iterator
        early (break, `.close()`) stops judging the rest; workers busy with abandoned jobs are
        replaced.

        What is derived from a problem's tests (plans, cache keys) is kept per problem object:
        treat a Problem as immutable once judged (build a new one for other tests).

        `shown`: the problems are public views (`engine.isolation.public.public_view`), the tests
        the model was shown, for repair feedback or a best-of-n choice: all of them are judged,
        never cut to the protocol's most demanding ones (`config.most_demanding` chooses the tests
        that score an answer, not which of the shown examples count)."""
        self.require_isolation()
        sparse = self.config.stop_on_first_failure if stop_on_first_failure is None else stop_on_first_failure
        ready: collections.deque[tuple[int, SampleResult]] = collections.deque()  # known without a backend
        waiting: dict[str, list[int]] = {}  # cache key → indices of this stream waiting for its job
        known: dict[str, SampleResult] = {}  # this stream's fresh results (the cache may be off or full)
        keys: list[str] = []  # the key of each job handed to the backend, by job index
        problems: dict[int, Problem] = {}
        formats: dict[int, bool] = {}

        def jobs() -> Iterator[JudgeJob]:
            for i, (problem, completion) in enumerate(items):
                if self.config.most_demanding and not shown:
                    problem = most_demanding(problem, self.config.most_demanding)
                program, formats[i] = self._program(problem, completion, code_is_program)
                if not program:
                    ready.append((i, _fit(_no_code(problem), formats.pop(i))))
                    continue
                job = JudgeJob(problem=problem, program=program, stop_on_first_failure=sparse)
                key = job_key(job, self.config)
                hit = known.get(key) or self._cache.get(key)
                if hit is not None:
                    ready.append((i, _fit(hit.model_copy(update={"problem_id": problem.id, "cached": True}),
                                          formats.pop(i))))
                elif key in waiting:
                    waiting[key].append(i)
                    problems[i] = problem
                else:
                    waiting[key] = [i]
                    problems[i] = problem
                    keys.append(key)
                    yield job

        for j, result in self.backend.run_stream(jobs(), read_ahead=isinstance(items, Sequence)):
            while ready:
                yield ready.popleft()
            key = keys[j]
            if result.verdict is not Verdict.INTERNAL_ERROR:
                self._cache.put(key, result)
                known[key] = result
            for n, i in enumerate(waiting.pop(key)):
                problem = problems.pop(i)
                same = result if n == 0 else result.model_copy(update={"problem_id": problem.id, "cached": True})
                yield i, _fit(same, formats.pop(i))
        while ready:
            yield ready.popleft()

    def _program(self, problem: Problem, completion: str, code_is_program: bool) -> tuple[str, bool]:
        if code_is_program:
            return (completion if completion.strip() else ""), True
        found = extract_code(completion, prompt=problem.prompt, entry_point=problem.entry_point)
        return found.code, found.format_ok

    def stats(self) -> dict[str, object]:
        return {**self._cache.stats(), "isolation": self.backend.isolation(),
                "isolation_level": self.backend.isolation_level(), "backend": self.config.backend,
                "judge_faults": getattr(self.backend, "faults", 0)}


def _fit(result: SampleResult, format_ok: bool) -> SampleResult:
    """The result with this completion's own format flag (a cached result carries another's)."""
    return result if result.format_ok == format_ok else result.model_copy(update={"format_ok": format_ok})


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
