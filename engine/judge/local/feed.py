"""One judge stream's jobs as the pool takes them: read lazily, the next ones prepared ahead of the
workers (`engine.judge.local.pool`).
"""

from __future__ import annotations

import collections
from typing import Callable, Iterable

from engine.judge.cases import CasePlan
from engine.judge.config import JudgeJob


class Feed:
    """One stream's jobs, read lazily: the next ones prepared ahead of the workers."""

    AHEAD = 4  # jobs prepared (plan looked up or built) before a worker asks for them

    def __init__(self, jobs: Iterable[JudgeJob], *, read_ahead: bool) -> None:
        self._jobs, self.read_ahead = iter(jobs), read_ahead
        self._read = 0  # jobs taken from the iterable
        self._ended = False
        self.prepared: collections.deque[tuple[int, JudgeJob, tuple[dict, CasePlan] | None]] = collections.deque()

    def _pull(self) -> bool:
        if self._ended:
            return False
        try:
            job = next(self._jobs)
        except StopIteration:
            self._ended = True
            return False
        self.prepared.append((self._read, job, None))
        self._read += 1
        return True

    @property
    def left(self) -> bool:
        return bool(self.prepared) or self._pull()

    @property
    def can_prepare(self) -> bool:
        """A job read but not prepared yet, or room to read one more."""
        if any(p is None for _, _, p in self.prepared):
            return True
        return self.read_ahead and len(self.prepared) < self.AHEAD and not self._ended

    def prepare_ahead(self, prepare: Callable[[JudgeJob], tuple[dict, CasePlan]]) -> None:
        for n, (i, job, done) in enumerate(self.prepared):
            if done is None:
                self.prepared[n] = (i, job, prepare(job))
                return
        if self._pull():
            i, job, _ = self.prepared[-1]
            self.prepared[-1] = (i, job, prepare(job))

    def next(self, prepare: Callable[[JudgeJob], tuple[dict, CasePlan]]) -> tuple[int, JudgeJob, tuple[dict, CasePlan]]:
        if not self.prepared:
            self._pull()
        i, job, done = self.prepared.popleft()
        return i, job, done if done is not None else prepare(job)
