"""The summary of a judged batch: accepted rate, pass_ratio, verdict breakdown, speed, cache."""

from __future__ import annotations

from collections import Counter
from typing import Sequence

from pydantic import BaseModel

from engine.judge.verdict import SampleResult, Verdict


class JudgeSummary(BaseModel):
    samples: int
    accepted: int
    accepted_rate: float
    pass_ratio_mean: float
    verdicts: dict[str, int]  # every verdict, in the enum's order (zeros included)
    internal_errors: int  # judge faults: excluded from nothing, shown always
    wall_s: float
    samples_per_s: float
    cache_hits: int
    cache_hit_rate: float
    backend: str
    isolation: str

    @classmethod
    def of(cls, results: Sequence[SampleResult], *, wall_s: float, stats: dict[str, object]) -> "JudgeSummary":
        n = len(results)
        counts = Counter(r.verdict for r in results)
        accepted = sum(r.accepted for r in results)
        return cls(
            samples=n,
            accepted=accepted,
            accepted_rate=accepted / n if n else 0.0,
            pass_ratio_mean=sum(r.pass_ratio for r in results) / n if n else 0.0,
            verdicts={v.value: counts.get(v, 0) for v in Verdict},
            internal_errors=counts.get(Verdict.INTERNAL_ERROR, 0),
            wall_s=wall_s,
            samples_per_s=n / wall_s if wall_s > 0 else 0.0,
            cache_hits=int(stats.get("cache_hits", 0)),  # type: ignore[call-overload]
            cache_hit_rate=float(stats.get("cache_hit_rate", 0.0)),  # type: ignore[arg-type]
            backend=str(stats.get("backend", "")),
            isolation=str(stats.get("isolation", "")),
        )
