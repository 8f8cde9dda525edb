"""The panels beside the main table: errors, cost, matched cost, repair. Each unit's numbers are
the mean over its seeds, per dataset column (the column's context only)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Optional

from engine.report.main_table import Column, best_of_n_drawn
from engine.report.plots import CostPoint
from engine.report.study import Study
from engine.report.tables import Table, fmt
from engine.runs.completion import unchanged_runs
from engine.runs.lineage import RunTime, run_times

VERDICTS = ("WRONG_ANSWER", "RUNTIME_ERROR", "SYNTAX_ERROR", "TIMEOUT", "MEMORY_LIMIT", "NO_CODE", "GEN_ERROR")
COST = (("prompt_tokens_mean", "prompt tok"), ("output_tokens_mean", "output tok"), ("judge_s_mean", "judge s mean"),
        ("judge_s_p50", "judge s p50"), ("judge_s_p95", "judge s p95"), ("problems_per_s", "problems/s"),
        ("tests_per_s", "tests/s"), ("timeout_rate", "timeout rate"), ("cache_hit_rate", "cache hits"))
SPENT_NOTE = ("`tokens/problem` and `tokens/solved`: every token generated for the problems, prompt (once per "
              "prompt) and output — all n candidates of a best-of-n choice, every round of a `(repair)` row — over "
              "the problems, and over the problems solved (one definition, `engine.report.panels.spent`, on the cost, "
              "matched-cost and repair pages alike)")
REPAIR = (("accepted@1", "accepted@1"), ("repair/accepted@multi", "accepted@multi"),
          ("repair/round2/recovery", "recovery r2"), ("repair/round3/recovery", "recovery r3"),
          ("repair/delta_pass_ratio_mean", "Δpass_ratio"), ("repair/rounds_mean", "rounds"))


def means_note(what: str = "") -> str:
    """The statistic of a panel: each number is the mean over a unit's seeds of one value per
    evaluation (over its problems), without spread; the results page has each cell's std and interval."""
    return ("_Each number: the mean over the unit's seeds of what each of its evaluations recorded; no spread is shown "
            f"(the results page has the std over seeds and the interval){'. ' + what if what else ''}._")


def _mean(col: Column, unit: str, metric: str) -> Optional[float]:
    values = [c.metrics[metric] for c in col.cells.get(unit, []) if metric in c.metrics]
    return statistics.fmean(values) if values else None


def error_table(study: Study, col: Column) -> Table:
    """Share of samples per verdict (and truncation), per unit: where the failures moved."""
    rows = []
    for unit in study.units():
        if unit not in col.cells:
            continue
        samples = _mean(col, unit, "samples") or 0
        shares = [(_mean(col, unit, f"errors/{v}") or 0.0) / samples if samples else 0.0 for v in VERDICTS]
        rows.append([unit, *(fmt(s) for s in shares), fmt(_mean(col, unit, "truncated_rate"))])
    return Table(headers=["phase", *VERDICTS, "truncated"], rows=rows, footer=[means_note(
        "A verdict's share: its first answers over all first answers of the evaluation (repair rounds are on the "
        "repair page); `truncated`: the share whose generation hit the token limit")])


def error_shares(study: Study, col: Column) -> dict[str, list[float]]:
    out = {}
    for unit in study.units():
        samples = _mean(col, unit, "samples")
        if unit in col.cells and samples:
            out[unit] = [(_mean(col, unit, f"errors/{v}") or 0.0) / samples for v in VERDICTS]
    return out


@dataclass(frozen=True)
class Spent:
    """What a unit's evaluations spent per problem and per solved problem: the one definition of
    both that every page showing a cost uses. Means over the unit's seeds of each evaluation's
    own figure; per solved is None when no evaluation solved anything."""

    per_problem: Optional[float]
    per_solved: Optional[float]


def _cell_spent(metrics: dict[str, float], repaired: bool) -> tuple[Optional[float], Optional[float]]:
    problems = metrics.get("problems") or 0
    if repaired:
        tokens, solved = metrics.get("repair/total/tokens"), (metrics.get("repair/accepted@multi") or 0) * problems
    elif "best_of_n/cost_tokens" in metrics:  # every candidate's tokens, not the chosen answer's alone
        tokens, solved = metrics["best_of_n/cost_tokens"], metrics.get("solved")
    else:
        tokens, solved = metrics.get("total_tokens"), metrics.get("solved")
    if tokens is None or not problems:
        return None, None
    return tokens / problems, (tokens / solved if solved else None)


def spent(col: Column, unit: str, *, repaired: bool = False) -> Spent:
    """Tokens per problem and per solved problem of `unit` in `col` (`repaired`: every repair round's
    tokens, solved after the last round)."""
    values = [_cell_spent(c.metrics, repaired) for c in col.cells.get(unit, [])]
    per_problem = [v for v, _ in values if v is not None]
    per_solved = [v for _, v in values if v is not None]
    return Spent(statistics.fmean(per_problem) if per_problem else None,
                 statistics.fmean(per_solved) if per_solved else None)


def cost_table(study: Study, col: Column) -> Table:
    rows = []
    for unit in study.units():
        if unit not in col.cells:
            continue
        cost = spent(col, unit)
        chosen = " (best-of-n)" if _mean(col, unit, "best_of_n/cost_tokens") is not None else ""
        rows.append([unit + chosen, *(fmt(_mean(col, unit, key), 3) for key, _ in COST),
                     fmt(cost.per_problem, 1), fmt(cost.per_solved, 1)])
    return Table(headers=["phase", *(label for _, label in COST), "tokens/problem", "tokens/solved"], rows=rows,
                 footer=[means_note(
                     "Over each evaluation's first answers: `prompt tok`, `output tok`: tokens per judged answer, the "
                     "prompt's being the answer's share of it (n samples of one prompt count it once, one prefill: a "
                     "best-of-n row's chosen answer holds 1/n of its prompt); `judge s`: seconds per answer, its mean, median (p50) and "
                     "95th percentile within the evaluation; rates: per answer. " + SPENT_NOTE)])


def training_cost_table(study: Study) -> Table:
    """Per training run: wall time (the sum of its attempts); where a step's time went — generating
    rollouts, judging them (the reward), updating the weights (medians over steps); the reward's
    stalls — the longest a sample waited for a judge worker and the slowest sample (maxima over
    steps), the timeouts (total); and the prompt template trained on (and where the spec says so).
    A judge that idles the accelerators shows as a large judge share or queue wait."""
    rows = []
    times = run_times(study.events, study.attempts)
    for run in study.trained():
        series = study.series(run.id)
        steps, judge, gen = series.get("step_time_s", {}), series.get("judge_s", {}), series.get("generate_s", {})
        update = series.get("update_s") or {s: max(0.0, t - judge.get(s, 0.0) - gen.get(s, 0.0))
                                            for s, t in steps.items() if s in gen or s in judge}
        share = [judge[s] / steps[s] for s in judge if steps.get(s)]
        rows.append([study.unit(run), str(run.seed), run.state.value, _wall(times.get(run.id)),
                     str(max(steps, default=0)), _median(steps), _median(gen), _median(judge), _median(update),
                     f"{statistics.median(share):.0%}" if share else "—", _max(series.get("judge_queue_wait_s")),
                     _max(series.get("slowest_sample_s")), _total(series.get("timeouts")),
                     _prompt(study.configs.get(run.id) or {})])
    return Table(headers=["phase", "seed", "state", "wall", "steps", "s/step", "generate s", "judge s", "update s",
                          "judge share", "judge queue wait (max)", "slowest sample (max)", "timeouts",
                          "trained on prompt"], rows=rows,
                 footer=["_Per step, the median over steps: `generate`, rollouts before they are scored; `judge`, "
                         "the reward (the whole batch through the judge); `update`, the rest of the step (trl logs no "
                         "update time of its own; verl's `timing_s/update_actor`). The reward's stalls: the longest a "
                         "sample waited for a judge worker and the slowest sample's own judging, each the maximum "
                         "over steps, and the timeouts over all steps._"])


def _median(values: Optional[dict]) -> str:
    return fmt(statistics.median(values.values())) if values else "—"


def _max(values: Optional[dict]) -> str:
    return fmt(max(values.values())) if values else "—"


def _total(values: Optional[dict]) -> str:
    return f"{sum(values.values()):.0f}" if values else "—"


def _prompt(config: dict) -> str:
    prompt = config.get("prompt")
    if not isinstance(prompt, dict):
        return "—"
    return f"{prompt.get('template') or 'model default'} ({prompt.get('from')})"


def _wall(time: Optional[RunTime]) -> str:
    if time is None or not time.attempts or time.current.end is None:
        return "—"
    seconds = time.seconds()
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def matched_cost(study: Study, col: Column) -> tuple[Table, list[CostPoint]]:
    """accepted vs tokens spent per problem (EVAL@budget): single-shot, best-of-n, multi-round repair.
    The table has a row per point (the repaired one first); the figure draws repair as an arrow
    from a unit's single-shot point to its repaired one."""
    rows: list[list[str]] = []
    points: list[CostPoint] = []
    for unit in study.units():
        if unit not in col.cells:
            continue
        problems = _mean(col, unit, "problems") or 0
        candidates = _mean(col, unit, "best_of_n/candidates")
        multi = _mean(col, unit, "repair/accepted@multi")
        repaired = None
        if multi is not None:
            tokens = spent(col, unit, repaired=True).per_problem or 0.0
            repaired = (tokens, multi)
            rows.append([f"{unit} (repair)", f"{tokens:.1f}", fmt(multi)])
        tokens = spent(col, unit).per_problem or 0.0
        accepted = _mean(col, unit, "accepted@1")
        blind = _mean(col, unit, "best_of_n/without_public")
        if accepted is not None:
            label = (f" (best-of-n; {blind:.0f} of {problems:.0f} problems without a public test took their "
                     "first sample)" if blind else " (best-of-n)") if candidates is not None else ""
            rows.append([unit + label, f"{tokens:.1f}", fmt(accepted)])
            drawn = best_of_n_drawn(study, col.cells[unit])
            short = f"{unit} (best-of-{drawn[0]})" if drawn is not None else unit
            points.append(CostPoint(unit=unit, label=short, tokens=tokens, accepted=accepted, repaired=repaired))
    table = Table(headers=["phase", "tokens/problem", "accepted"], rows=rows, footer=[means_note(
        "`accepted`: accepted@1 (the first answer, or the best-of-n choice); on a `(repair)` row accepted@multi, after "
        "the last repair round. " + SPENT_NOTE)])
    return table, points


def repair_table(study: Study, col: Column) -> Table:
    rows = [[unit, *(fmt(_mean(col, unit, key)) for key, _ in REPAIR), fmt(spent(col, unit).per_solved, 1),
             fmt(spent(col, unit, repaired=True).per_solved, 1)]
            for unit in study.units() if unit in col.cells and _mean(col, unit, "repair/accepted@multi") is not None]
    return Table(headers=["phase", *(label for _, label in REPAIR), "tokens/solved single", "tokens/solved multi"],
                 rows=rows, footer=[means_note(
        "accepted@1 counts first answers, accepted@multi the last answer of each chain (up to the protocol's "
        "rounds); recovery rN: the share of round N's answers (each the retry of a failing answer) that were "
        "accepted; Δpass_ratio: last answer's less first answer's, its mean over chains; rounds: answers per "
        "chain, its mean; tokens/solved single: the first answers' tokens over the problems they solved, multi: "
        "every round's over the problems solved after the last. " + SPENT_NOTE)])


def unchanged_table(study: Study) -> str:
    """The training runs that changed nothing (`runs.completion.unchanged`), with why: their cells
    score the weights they started from, and each comparison of such a seed with its parent is 0
    by construction. Empty when there are none."""
    flagged = unchanged_runs(study.runs, study.configs)
    rows = [[study.unit(run), str(run.seed if run.seed is not None else "—"), run.id, flagged[run.id],
             str(sum(1 for r in study.runs if (study.configs.get(r.id) or {}).get("evaluates") == run.id))]
            for run in study.trained() if run.id in flagged]
    if not rows:
        return ""
    return Table(headers=["phase", "seed", "run", "why it changed nothing", "evaluations resting on it"],
                 rows=rows).markdown()
