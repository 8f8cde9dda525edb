"""The judge's configuration, its unit of work, and the protocol every backend implements.

A leaf of the judge package: backends, the cache and `Judge` import it, never the reverse.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Literal, Mapping, Optional, Protocol

from engine.errors import UserError

if TYPE_CHECKING:  # annotations only: the CLI starts its judge's workers before it imports pydantic
    from engine.judge.verdict import SampleResult
    from engine.problem import Problem
    from engine.spec.model import JudgeSpec

# Bumped whenever a verdict can change for the same program and tests: numbers judged by
# different versions are never put side by side.
JUDGE_VERSION = "1"

CompareMode = Literal["tokens", "exact", "float"]


# The CPUs the executor gave the run (local and Ray executors export it to every launch script).
CPUS_ENV = "RLVR_CPUS"


def given_cpus() -> int | None:
    """The executor's CPU count for this run, or None outside a run (or when unreadable)."""
    try:
        n = int(os.environ.get(CPUS_ENV, ""))
    except ValueError:
        return None
    return n if n > 0 else None


def usable_cpus() -> int:
    """The CPUs this process may use: the run's share (`RLVR_CPUS`) within the ones it may run on.
    `os.cpu_count()` counts the machine's, so under a taskset, a container's cpuset or beside
    other runs it would start more workers than CPUs."""
    allowed = len(os.sched_getaffinity(0))
    given = given_cpus()
    return min(allowed, given) if given else allowed


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
    # one core's caches and TLB. None: pin when the judge owns the CPUs — not inside a run that the
    # executor gave a share of the machine (RLVR_CPUS), where concurrent runs would all pin their
    # worker i to the same CPU i — and the workers are at least this process's CPUs, so pinning
    # never takes a free CPU away from them.
    pin_workers: Optional[bool] = None
    compare: CompareMode = "tokens"
    float_tol: float = 1e-6  # absolute-or-relative, used by compare="float"
    max_failures_reported: int = 3  # K failing tests kept for repair feedback
    stop_on_first_failure: bool = False  # sparse reward: only `accepted` matters
    cache: bool = True
    max_processes: int = 64  # RLIMIT_NPROC of the sandbox uid (threads count)
    max_open_files: int = 128
    tail_bytes: int = 2048  # stdout/stderr tails kept per sample
    cache_size: int = 65536  # results kept (least recently used go first)
    # Judge even where the network and the filesystem cannot be isolated (see `require_isolation`).
    allow_unsandboxed: bool = False
    python: Optional[str] = None  # the workers' interpreter (stdlib only is needed); default: this one
    # Run only each problem's N most demanding tests (a protocol's `tests: {most_demanding: N}`,
    # `cases.most_demanding`); None: all of them.
    most_demanding: Optional[int] = None

    @property
    def version(self) -> str:
        """The judge version and the limits that can move a verdict (recorded with every number)."""
        return (f"rlvr-judge-{JUDGE_VERSION}/{self.backend}/cpu{self.timeout_s:g}s/mem{self.memory_mb}MB/"
                f"{self.compare}" + (f"{self.float_tol:g}" if self.compare == "float" else "")
                + (f"/top{self.most_demanding}" if self.most_demanding else ""))

    @property
    def wall_s(self) -> float:
        return self.wall_timeout_s or max(2 * self.timeout_s, self.timeout_s + 1.0)

    @classmethod
    def from_spec(cls, spec: JudgeSpec, **overrides) -> "JudgeConfig":
        fields = dict(
            backend=spec.backend,
            url=spec.url,
            timeout_s=spec.timeout_s,
            wall_timeout_s=spec.wall_timeout_s,
            memory_mb=spec.memory_mb,
            compare=spec.compare,
            float_tol=spec.float_tol,
            allow_unsandboxed=bool(spec.allow_unsandboxed),
        )
        if spec.concurrency:
            fields["workers"] = spec.concurrency
        fields.update(overrides)
        return cls(**fields)


# What a judge must isolate before it may judge untrusted code (unless allowed not to).
REQUIRED_ISOLATION = {"netns": "the network", "mountns": "the filesystem"}
REMOTE_LEVEL = "remote"
LEVEL_PARTS = {"userns", "sandbox-uid", "netns", "ipcns", "mountns", "pidns"}  # `Isolation.level()`  # sandbox_fusion: isolation is the server's, which this process cannot see


class IsolationChanged(UserError):
    """A backend's isolation level changed under a judge (a replacement worker obtained another): the
    version already recorded with its numbers would name a level some were not judged at."""


def missing_isolation(level: str) -> list[str]:
    """What of the required isolation a level lacks (empty: sandboxed, or remote)."""
    if level == REMOTE_LEVEL:
        return []
    parts = set(level.split("+"))
    missing = [what for name, what in REQUIRED_ISOLATION.items() if name not in parts]
    # Without a PID namespace, only a sandbox uid of its own (root) keeps a program from signalling
    # or tracing every process of the user running the judge: the trainer, vLLM, the judge itself.
    if "pidns" not in parts and "sandbox-uid" not in parts:
        missing.append(PROCESSES)
    return missing


PROCESSES = "the user's processes"


def judged_unsandboxed(version: str) -> bool:
    """Whether numbers recorded with this judge version were judged without network and filesystem
    isolation (a version ends with the level, `.../<level>`; older versions have none)."""
    level = version.rsplit("/", 1)[-1]
    known = level == "none" or set(level.split("+")) <= LEVEL_PARTS
    return "/" in version and known and bool(missing_isolation(level))


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

    def isolation(self) -> str:
        """What isolation is active, in detail (recorded with every result)."""
        ...

    def isolation_level(self) -> str:
        """The isolation obtained in stable words (`none`, `userns+netns+...`, `remote`)."""
        ...

    def run_stream(self, jobs: Iterable[JudgeJob], *, read_ahead: bool = True) -> Iterator[tuple[int, SampleResult]]:
        """(index in `jobs`, result) for every job, as each ends. `jobs` is read lazily; without
        `read_ahead` only when the next job can start at once (reading may block)."""
        ...

    def close(self) -> None: ...


def protocol_tests(protocol: Optional[Mapping[str, Any]]) -> Optional[int]:
    """A frozen protocol's `tests: {most_demanding: N}` (None: every test is judged)."""
    return ((protocol or {}).get("tests") or {}).get("most_demanding")


def test_count(problem: Problem) -> int:
    if problem.kind == "stdio":
        return len(problem.stdio_tests)
    tests = problem.function_tests
    if tests is None:
        return 0
    return (len(tests.asserts) + len(tests.challenge)) if tests.asserts else int(tests.check is not None)
