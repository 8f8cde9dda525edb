"""The metrics of an evaluation, as pure functions of its sample records.

Every function takes records of one dataset and returns plain numbers. `summarize`
gathers the study's quality, reliability and cost panel into one flat name → value map.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from typing import Iterable, Optional, Sequence

import numpy as np

from engine.errors import UserError
from engine.evaluate.records import FAULTS, GEN_ERROR, INTERNAL_ERROR, SampleRecord
from engine.judge.verdict import Verdict

RAN = frozenset({Verdict.ACCEPTED.value, Verdict.WRONG_ANSWER.value})  # the program ran to the end
ERROR_CLASSES = ("SYNTAX_ERROR", "RUNTIME_ERROR", "TIMEOUT", "MEMORY_LIMIT", "OUTPUT_LIMIT", "WRONG_ANSWER",
                 "NO_CODE", GEN_ERROR, "INTERNAL_ERROR")


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimator of Chen et al. (2021): 1 - C(n-c, k) / C(n, k). k > n is an error."""
    if not 0 < k <= n:
        raise ValueError(f"pass@{k} needs 1 <= k <= n samples per problem; this problem has n = {n}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def by_problem(records: Iterable[SampleRecord]) -> dict[str, list[SampleRecord]]:
    groups: dict[str, list[SampleRecord]] = defaultdict(list)
    for record in records:
        groups[record.problem_id].append(record)
    return dict(groups)


def mean_pass_at_k(records: Sequence[SampleRecord], k: int) -> float:
    """pass@k averaged over problems; every problem must have at least k samples."""
    groups = by_problem(records)
    return statistics.fmean(pass_at_k(len(g), sum(r.accepted for r in g), k) for g in groups.values())


def accepted_at_1(records: Sequence[SampleRecord]) -> float:
    """Share of problems whose first sample is accepted (the greedy headline)."""
    groups = by_problem(records)
    return statistics.fmean(min(g, key=lambda r: r.sample).accepted for g in groups.values())


def mean_at_n(records: Sequence[SampleRecord]) -> float:
    """Mean accepted share per problem over its n samples (= unbiased pass@1)."""
    return statistics.fmean(statistics.fmean(r.accepted for r in g) for g in by_problem(records).values())


def quantile(values: Sequence[float], q: float) -> float:
    return float(np.quantile(np.asarray(values, dtype=float), q)) if values else 0.0


def error_breakdown(records: Sequence[SampleRecord]) -> dict[str, int]:
    """Samples per failure class, plus `truncated` (cut at max_tokens, whatever its verdict)."""
    counts = Counter(r.verdict for r in records if not r.accepted)
    out = {name: counts.get(name, 0) for name in ERROR_CLASSES}
    out["truncated"] = sum(r.finish_reason == "length" for r in records)
    return out


def summarize(records: Sequence[SampleRecord], *, ks: Sequence[int] = (), wall_generate_s: float = 0.0,
              wall_judge_s: float = 0.0, wall_s: Optional[float] = None,
              work: Optional[tuple[int, int, int]] = None) -> dict[str, float]:
    """The panel for one dataset: quality, reliability and cost (empty records give {}).

    The throughputs divide the work done in the walls given, `work` = (problems, samples, tests):
    after a resume that is the last attempt's share, not every record (default: all of them)."""
    if not records:
        return {}
    n = len(records)
    problems = by_problem(records)
    solved = sum(any(r.accepted for r in g) for g in problems.values())
    ratios = [r.pass_ratio for r in records]
    judge = [r.judge_s for r in records]
    tokens = sum(r.prompt_tokens + r.completion_tokens for r in records)
    tests = sum(r.total for r in records)
    out = {
        "accepted@1": accepted_at_1(records), "mean@n": mean_at_n(records),
        "pass_ratio_mean": statistics.fmean(ratios), "pass_ratio_p50": quantile(ratios, 0.5),
        "pass_ratio_p90": quantile(ratios, 0.9),
        "exec_success": sum(r.verdict in RAN for r in records) / n,
        "format_compliance": sum(r.format_ok for r in records) / n,
        "zero_reward": sum(r.pass_ratio == 0 for r in records) / n,
        "truncated_rate": sum(r.finish_reason == "length" for r in records) / n,
        "timeout_rate": sum(r.verdict == Verdict.TIMEOUT.value for r in records) / n,
        # Faults are counted as unaccepted in every accuracy above (a lower bound, never inflated)
        # and reported here on their own; the completion check refuses more than a few.
        "fault_rate": sum(r.verdict in FAULTS for r in records) / n,
        "gen_error_rate": sum(r.verdict == GEN_ERROR for r in records) / n,
        "judge_fault_rate": sum(r.verdict == INTERNAL_ERROR for r in records) / n,
        "prompt_tokens_mean": statistics.fmean(r.prompt_tokens for r in records),
        "output_tokens_mean": statistics.fmean(r.completion_tokens for r in records),
        "judge_s_mean": statistics.fmean(judge), "judge_s_p50": quantile(judge, 0.5),
        "judge_s_p95": quantile(judge, 0.95),
        "cache_hit_rate": sum(r.cached for r in records) / n,
        "problems": float(len(problems)), "samples": float(n), "solved": float(solved),
        "total_tokens": float(tokens),
    }
    if solved:  # cost per solved problem; with nothing solved it has no value (not infinity)
        out.update({"tokens_per_solved": tokens / solved, "judge_s_per_solved": sum(judge) / solved})
    out.update({f"errors/{name}": float(count) for name, count in error_breakdown(records).items()})
    if ks:
        short = min(problems.items(), key=lambda item: len(item[1]))
        if len(short[1]) < max(ks):
            raise UserError(f"pass@{max(ks)} needs {max(ks)} samples of every problem; problem `{short[0]}` of "
                            f"dataset `{records[0].dataset}` has {len(short[1])}\n"
                            "  fix: re-run the evaluation (it generates the missing samples)")
    out.update({f"pass@{k}": mean_pass_at_k(records, k) for k in ks})
    done_problems, done_samples, done_tests = work if work is not None else (len(problems), n, tests)
    if wall_generate_s + wall_judge_s > 0 and done_samples:
        wall = wall_s or wall_generate_s + wall_judge_s  # judging overlaps generation: their wall is not the sum
        out.update({"problems_per_s": done_problems / wall, "samples_per_s": done_samples / wall,
                    "tests_per_s": done_tests / wall_judge_s if wall_judge_s else 0.0,
                    "generate_s": wall_generate_s, "judge_s": wall_judge_s, "wall_s": wall})
    return out


def reported_ks(n: int) -> list[int]:
    """The pass@k a protocol with n samples per problem reports."""
    return [k for k in (1, 2, 5, 10, 20, 50, 100) if k <= n]


def repair_summary(records: Sequence[SampleRecord]) -> dict[str, float]:
    """Multi-round repair: accepted@1 vs accepted@multi, recovery per round, Δpass_ratio, rounds
    used, tokens and judge time per round, cost per solved, and the verdict transitions from the
    first answer to the last."""
    chains: dict[tuple[str, int], list[SampleRecord]] = defaultdict(list)
    for r in records:
        chains[(r.problem_id, r.sample)].append(r)
    if not chains:
        return {}
    for chain in chains.values():
        chain.sort(key=lambda r: r.round)
    firsts = [c[0] for c in chains.values()]
    lasts = [c[-1] for c in chains.values()]
    deltas = [last.pass_ratio - first.pass_ratio for first, last in zip(firsts, lasts)]
    out = {"accepted@1": accepted_at_1(firsts), "accepted@multi": accepted_at_1(lasts),
           "delta_pass_ratio_mean": statistics.fmean(deltas), "delta_pass_ratio_p50": quantile(deltas, 0.5),
           "delta_pass_ratio_p90": quantile(deltas, 0.9),
           "rounds_mean": statistics.fmean(len(c) for c in chains.values())}
    for n in range(1, max(r.round for r in records) + 1):
        at = [r for r in records if r.round == n]
        out[f"round{n}/tokens"] = float(sum(r.prompt_tokens + r.completion_tokens for r in at))
        out[f"round{n}/judge_s"] = float(sum(r.judge_s for r in at))
        if n > 1:
            out[f"round{n}/recovery"] = sum(r.accepted for r in at) / len(at) if at else 0.0
    out["total/tokens"] = float(sum(r.prompt_tokens + r.completion_tokens for r in records))
    out["total/judge_s"] = float(sum(r.judge_s for r in records))
    solved_1, solved_m = sum(r.accepted for r in firsts), sum(r.accepted for r in lasts)
    if solved_1:
        out["tokens_per_solved/single"] = out["round1/tokens"] / solved_1
    if solved_m:
        out["tokens_per_solved/multi"] = out["total/tokens"] / solved_m
    for (a, b), count in Counter((f.verdict, e.verdict) for f, e in zip(firsts, lasts)).items():
        out[f"transition/{a}->{b}"] = float(count)
    return out
