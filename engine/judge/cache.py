"""Content-hash cache: identical (program, tests, limits) are judged once per process."""

from __future__ import annotations

import collections
import hashlib
import json
import threading
from typing import Callable, TypeVar

from engine.judge.config import JudgeConfig, JudgeJob
from engine.judge.verdict import SampleResult
from engine.problem import Problem

T = TypeVar("T")


def job_key(job: JudgeJob, config: JudgeConfig) -> str:
    """Hash of everything that can change a verdict; the problem id is deliberately not part of it."""
    limits = [config.timeout_s, config.wall_s, config.memory_mb, config.max_output_bytes, config.compare,
              config.float_tol, config.max_failures_reported, config.max_processes, config.max_open_files,
              job.problem.time_limit_s, job.problem.memory_limit_mb, job.stop_on_first_failure, config.backend]
    blob = json.dumps([job.program, _tests_digest(job.problem), limits], default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def _tests_digest(problem: Problem) -> str:
    """Once per problem object (the n samples of a problem share it), not once per sample."""
    return _DIGESTS.get(problem, None, lambda: _digest(
        problem.model_dump(include={"kind", "entry_point", "function_tests", "stdio_tests", "checker"})))


def _digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


class PerObject:
    """Values derived from an object (and a key), computed once per object: the object is held,
    so its id stays its own while the entry lives; past `size` objects all are forgotten."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._held: dict[int, tuple[object, object, object]] = {}

    def get(self, obj: object, key: object, make: Callable[[], T]) -> T:
        held = self._held.get(id(obj))
        if held is not None and held[0] is obj and held[1] == key:
            return held[2]  # type: ignore[return-value]
        value = make()
        if len(self._held) >= self.size:
            self._held.clear()
        self._held[id(obj)] = (obj, key, value)
        return value

    def clear(self) -> None:
        self._held.clear()


_DIGESTS = PerObject(1024)


class ResultCache:
    """At most `size` results, the least recently used forgotten first: a GRPO run judges millions
    of distinct programs, and only repeats of recent ones (a group's identical answers, a re-judged
    sample) are worth keeping."""

    def __init__(self, *, enabled: bool, size: int) -> None:
        self.enabled, self.size = enabled and size > 0, size
        self._results: collections.OrderedDict[str, SampleResult] = collections.OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: str) -> SampleResult | None:
        if not self.enabled:
            return None
        with self._lock:
            found = self._results.get(key)
            if found is None:
                self.misses += 1
            else:
                self.hits += 1
                self._results.move_to_end(key)
            return found

    def put(self, key: str, result: SampleResult) -> None:
        if self.enabled:
            with self._lock:
                self._results[key] = result.model_copy()  # the caller gets `result` itself
                self._results.move_to_end(key)
                while len(self._results) > self.size:
                    self._results.popitem(last=False)

    def stats(self) -> dict[str, object]:
        lookups = self.hits + self.misses
        return {"cache_hits": self.hits, "cache_misses": self.misses, "cache_entries": len(self._results),
                "cache_hit_rate": (self.hits / lookups) if lookups else 0.0}
