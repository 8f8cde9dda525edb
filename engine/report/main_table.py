"""The main table: units (phases and variants) × datasets, mean ± std over seeds with a 95 %
stratified-bootstrap interval, the best per column in bold, and why an empty cell is empty.

Numbers are put in one column only when their protocol, id list and judge version match the
column's (the context most of its cells share); any other cell says which one differs.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from engine.judge.config import protocol_tests
from engine.evaluate.metrics import RAN, pass_at_k
from engine.evaluate.records import SampleRecord
from engine.report.pairing import pair, seed_rows
from engine.report.stats import REPS, Estimate, estimate, paired_delta
from engine.report.study import Cell, Context, Study
from engine.report.tables import Table, best_indices, cell_text
from engine.runs.completion import unchanged_runs

PRIMARY_METRIC = "accepted@1"
DETAIL = ("accepted@1", "pass_ratio_mean", "pass_ratio_p50", "pass_ratio_p90", "exec_success")


@dataclass
class Column:
    dataset: str
    cells: dict[str, list[Cell]]  # unit → one cell per seed, all in the column's context
    why: dict[str, str]  # unit → why it has no number here
    context: Optional[Context]
    reference: Optional[Cell]  # a cell of the column's context (for the footer)
    twice: dict[str, list[str]] = field(default_factory=dict)  # unit → its evaluations counted once, not twice

    @property
    def seeds(self) -> int:
        return max((len(c) for c in self.cells.values()), default=0)

    def header(self) -> str:
        seeds = self.seeds
        ref = self.reference
        problems = int(ref.metrics.get("problems", 0)) if ref else 0
        n = int(ref.metrics.get("samples", 0) / problems) if ref and problems else 1
        return f"{self.dataset} (seeds = {seeds}, N = {problems}, n = {n})"


def datasets(study: Study) -> list[str]:
    """Final-evaluation datasets first (the paper's columns), then the every-phase ones."""
    evaluate = study.spec_data.get("evaluate") or {}
    names: list[str] = []
    for schedule in ("final", "every_phase"):
        names += [d for d in (evaluate.get(schedule) or {}).get("datasets", []) if d not in names]
    for run in study.evaluations():
        names += [c.dataset for c in study.cells(run) if c.dataset not in names]
    return names


def column(study: Study, dataset: str) -> Column:
    found: dict[str, list[Cell]] = {}
    why: dict[str, str] = {}
    for run in study.evaluations():
        if dataset not in study.configs[run.id].get("datasets", {}):
            continue
        unit = study.unit(run)
        cell = next((c for c in study.cells(run) if c.dataset == dataset), None)
        if cell is not None and run.state.value == "succeeded":
            found.setdefault(unit, []).append(cell)
        else:
            why[unit] = f"seed {run.seed} " * (run.seed is not None) + {
                "failed": "failed", "blocked": "blocked", "cancelled": "cancelled",
                "running": "running"}.get(run.state.value, "pending")
    contexts = Counter(c.context for cells in found.values() for c in cells)
    context = contexts.most_common(1)[0][0] if contexts else None
    kept: dict[str, list[Cell]] = {}
    twice: dict[str, list[str]] = {}
    for unit, cells in found.items():
        same, dropped = _once_per_seed(study, [c for c in cells if c.context == context])
        if same:
            kept[unit] = same
        if dropped:
            twice[unit] = dropped
        if any(c.context != context for c in cells):
            why[unit] = _mismatch(next(c.context for c in cells if c.context != context), context)
    reference = next((c for cells in kept.values() for c in cells), None)
    return Column(dataset=dataset, cells=kept, why=why, context=context, reference=reference, twice=twice)


SCHEDULES = ("final", "every_phase", "phase")  # which evaluation of a seed counts when one ran twice


def _once_per_seed(study: Study, cells: list[Cell]) -> tuple[list[Cell], list[str]]:
    """One cell per seed: a dataset evaluated in two schedules under one protocol (a spec from
    before `validate` refused that) gives each seed twice; counting both would shrink the std and
    the interval. The first schedule of SCHEDULES counts; the others are named."""
    rank = lambda c: (SCHEDULES.index(s) if (s := study.configs[c.run.id].get("schedule")) in SCHEDULES  # noqa: E731
                      else len(SCHEDULES), c.run.id)
    kept: dict[object, Cell] = {}
    dropped: list[str] = []
    for cell in sorted(cells, key=rank):
        if cell.run.seed in kept:
            first = kept[cell.run.seed]
            dropped.append(f"seed {cell.run.seed if cell.run.seed is not None else '—'} "
                           f"({study.configs[cell.run.id].get('schedule')} {cell.run.id}, counted: "
                           f"{study.configs[first.run.id].get('schedule')} {first.run.id})")
        else:
            kept[cell.run.seed] = cell
    counted = {id(c) for c in kept.values()}
    return [c for c in cells if id(c) in counted], dropped


def _mismatch(have: Context, want: Optional[Context]) -> str:
    if want is None:
        return "not run"
    if have.protocol_sha256 != want.protocol_sha256:
        return "protocol differs"
    if have.idlist_sha256 != want.idlist_sha256:
        return "id list differs"
    return "judge version differs"


def _first(group: list[SampleRecord]) -> float:
    return float(min(group, key=lambda r: r.sample).accepted)


# Per-problem values whose mean over problems IS the metric (`engine.evaluate.metrics`): a
# cell's point estimate and its interval are both computed from these, on the same records.
PER_PROBLEM: dict[str, Callable[[list[SampleRecord]], float]] = {
    "accepted@1": _first,
    "mean@n": lambda g: statistics.fmean(r.accepted for r in g),
    "pass_ratio_mean": lambda g: statistics.fmean(r.pass_ratio for r in g),
    "exec_success": lambda g: statistics.fmean(r.verdict in RAN for r in g),
}


def _per_problem_fn(metric: str) -> Optional[Callable[[list[SampleRecord]], float]]:
    if metric.startswith("pass@") and metric[5:].isdigit():
        k = int(metric[5:])
        return lambda g: pass_at_k(len(g), sum(r.accepted for r in g), k)
    return PER_PROBLEM.get(metric)


@dataclass(frozen=True)
class ProblemMatrix:
    problems: tuple[str, ...]  # the columns, sorted
    values: np.ndarray  # seeds (in seed order) × problems


def problem_values(cell: Cell, metric: str = PRIMARY_METRIC) -> Optional[dict[str, float]]:
    """The metric's per-problem values on the cell's first-round samples; None when the metric has
    no per-problem form or a problem has too few samples for it (pass@k). Computed once per cell
    and metric (and per content of its records, `Cell.kept`); callers only read it."""
    return cell.kept(f"problem_values:{metric}", lambda c: _problem_values(c, metric))


def _problem_values(cell: Cell, metric: str) -> Optional[dict[str, float]]:
    fn = _per_problem_fn(metric)
    if fn is None:
        return None
    groups: dict[str, list[SampleRecord]] = {}
    for r in cell.samples():
        if r.round == 1:
            groups.setdefault(r.problem_id, []).append(r)
    try:
        return {p: fn(g) for p, g in groups.items()}
    except ValueError:  # pass@k of a problem with fewer than k samples
        return None


def per_problem(cells: list[Cell], metric: str = PRIMARY_METRIC) -> Optional[ProblemMatrix]:
    """seeds × problems of the metric's per-problem values on first-round samples, problems
    aligned across seeds; None when the metric has no per-problem form or the seeds' records do
    not cover the same problems (then no interval is shown, never one of other records)."""
    rows: list[dict[str, float]] = []
    for cell in seed_rows(cells):
        values = problem_values(cell, metric)
        if values is None:
            return None
        rows.append(values)
    if not rows or not rows[0] or any(set(r) != set(rows[0]) for r in rows):
        return None
    common = tuple(sorted(rows[0]))
    return ProblemMatrix(common, np.array([[row[p] for p in common] for row in rows], dtype=float))


def cell_estimate(cells: list[Cell], metric: str) -> Optional[Estimate]:
    """The cell: from the per-problem records when they exist (the point estimate is the mean of
    the very matrix the interval resamples), else the recorded per-seed values, without interval."""
    matrix = per_problem(cells, metric)
    if matrix is not None:
        return estimate(list(matrix.values.mean(axis=1)), matrix.values)
    values = [c.metrics[metric] for c in seed_rows(cells) if metric in c.metrics]
    if not values:
        return None
    return estimate(values, None)


def unchanged_seeds(cells: list[Cell], flagged: dict[str, str]) -> list[str]:
    """The seeds among `cells` whose evaluation scores a model that changed nothing in training
    (`runs.completion.unchanged`): such a cell repeats its parent's weights, and a Δ resting on it
    is 0 by construction. `flagged`: `unchanged_runs` of the study."""
    return sorted({"—" if c.run.seed is None else str(c.run.seed) for c in cells if c.run.id in flagged})


def unchanged_note(cells: list[Cell], flagged: dict[str, str]) -> str:
    seeds = unchanged_seeds(cells, flagged)
    return f"changed nothing on seed {', '.join(seeds)}: see “Runs that changed nothing”" if seeds else ""


def headline_table(study: Study, columns: list[Column]) -> Table:
    units = study.units()
    flagged = unchanged_runs(study.runs, study.configs)
    estimates = {(u, col.dataset): cell_estimate(col.cells[u], PRIMARY_METRIC) if u in col.cells else None
                 for u in units for col in columns}
    best = {col.dataset: supported_best(col, units, [estimates[(u, col.dataset)] for u in units]) for col in columns}
    rows = []
    for i, unit in enumerate(units):
        row = [unit]
        for col in columns:
            e = estimates[(unit, col.dataset)]
            text = cell_text(e, i in best[col.dataset]) if e else f"— ({col.why.get(unit, 'not run')})"
            if e and all(c.run.seed is None for c in col.cells[unit]):  # an unseeded phase (base eval)
                text += " (one run: the phase has no seed)"
            elif e and e.seeds < col.seeds:  # a seed's evaluation is missing: say so in the cell
                text += f" (seeds = {e.seeds}; {col.why.get(unit, 'one missing')})"
            if e and (note := unchanged_note(col.cells[unit], flagged)):
                text += f" ({note})"
            if e and (chosen := best_of_n_note(study, col.cells[unit])):
                text += f" ({chosen})"
            row.append(text)
        rows.append(row)
    table = Table(headers=["phase", *(c.header() for c in columns)], rows=[r for r in rows if _has_any(r)])
    table.footer = [protocol_sentence(study, c) for c in columns if c.reference] + [
        twice_sentence(c) for c in columns if c.twice] + [
        zero_sentence(c) for c in columns if all_zero([estimates[(u, c.dataset)] for u in units])] + [
        INTERVAL_SENTENCE, BOLD_SENTENCE]
    if any(best_of_n_note(study, cells) for c in columns for cells in c.cells.values()):
        table.footer.append(BEST_OF_N_SENTENCE)
    return table


def supported_best(col: Column, units: list[str], estimates: list[Optional[Estimate]]) -> set[int]:
    """The column's best cell, only when the paired comparisons support it: its Δ against every other
    cell of the column, paired by seed and problem as every comparison row is (`engine.report.pairing`,
    the same bootstrap draws), has an interval above 0. So a bold cell never stands beside a row that
    calls its phase's difference from another "no clear difference" (RAFT bold in three columns
    though every RAFT-vs-SFT row said so, when each cell's own interval decided)."""
    top = best_indices([e.mean if e else None for e in estimates])
    if len(top) != 1:
        return set()
    [i] = top
    for j, e in enumerate(estimates):
        if j == i or e is None:
            continue
        p = pair(col.cells[units[i]], col.cells[units[j]], problem_values)
        if isinstance(p, str) or paired_delta(p.ours, p.theirs).low <= 0:
            return set()  # unpaired or an interval that holds 0: the comparison does not single it out
    return top


def all_zero(estimates: list[Optional[Estimate]]) -> bool:
    present = [e for e in estimates if e is not None]
    return bool(present) and all(e.mean == 0 for e in present)


def zero_sentence(col: Column) -> str:
    return (f"_{col.dataset}: every phase scores 0. The column cannot rank the phases: a benchmark far beyond the "
            "model (a model this small solving none of it) reads this way, and so would a broken prompt or judge, "
            "which the errors and failures pages tell apart._")


BOLD_SENTENCE = ("_Bold: a column's best cell, only where its Δ against every other cell of the column, paired by "
                 "seed and problem, has a 95 % interval above 0 (the comparison rows' own test); a column without "
                 "bold has no phase the paired comparisons single out._")


def best_of_n_note(study: Study, cells: list[Cell]) -> str:
    """What a best-of-n unit's cell scores: not one answer of the column's protocol but the one its
    public tests chose among n samples of its own protocol (the column's protocol judges that
    choice). Empty for any other unit."""
    chosen = best_of_n_drawn(study, cells)
    if chosen is None:
        return ""
    n, p = chosen
    drawn = f" at temperature {p['temperature']}" if p.get("temperature") is not None else ""
    named = f", protocol `{p['name']}`" if p.get("name") else ""
    return f"best-of-{n}: one of {n} samples{drawn}{named}, chosen by the public tests"


def best_of_n_drawn(study: Study, cells: list[Cell]) -> Optional[tuple[int, dict]]:
    """(n, protocol) of the samples a best-of-n unit's choice was made among: the generate protocol
    its chooser ran with. The recorded `best_of_n/candidates` is the first problem's count, fewer
    when some of its samples failed on the server: only a fallback. None for any other unit."""
    cell = next((c for c in cells if "best_of_n/candidates" in c.metrics), None)
    if cell is None:
        return None
    chooser = (study.configs.get(cell.run.id) or {}).get("evaluates")
    p = ((study.configs.get(chooser or "") or {}).get("protocols") or {}).get("generate") or {}
    return int(p.get("n") or cell.metrics["best_of_n/candidates"]), p


BEST_OF_N_SENTENCE = ("_A best-of-n cell scores a choice, not one answer of the column's protocol: its unit drew n "
                      "samples per problem under its own protocol (named in the cell) and its public tests chose "
                      "one; the column's protocol judged the choice (and its repair rounds, if any). Its tokens "
                      "are priced on the matched-cost page._")


def twice_sentence(col: Column) -> str:
    listed = "; ".join(f"{unit}: {', '.join(seeds)}" for unit, seeds in col.twice.items())
    return (f"_{col.dataset} was evaluated twice under one protocol (in two schedules); each seed counts once — "
            f"{listed}._")


INTERVAL_SENTENCE = ("_Each cell: the mean over seeds ± the sample standard deviation over seeds (divided by "
                     "seeds − 1; none with one seed) of one metric on the judged first-round records; in brackets its "
                     f"95 % percentile-bootstrap interval ({REPS} draws), resampling seeds (each with its own decoding "
                     "draw) and, within them, problems — the same problems for every seed. A cell without brackets: a "
                     "metric without a per-problem form (a quantile) or records not all readable, its recorded "
                     "values' mean ± std over seeds._")


def _has_any(row: list[str]) -> bool:
    return any(not cell.startswith("— (not run)") for cell in row[1:])


def detail_table(study: Study, col: Column) -> Table:
    metrics = list(DETAIL) + sorted({m for cells in col.cells.values() for c in cells for m in c.metrics
                                     if m.startswith("pass@") and m != "pass@1"})
    rows = []
    for unit in study.units():
        if unit not in col.cells:
            continue
        rows.append([unit, *((cell_text(e) if (e := cell_estimate(col.cells[unit], m)) else "—") for m in metrics)])
    chosen = [f"_{unit}: {note}._" for unit in study.units() if unit in col.cells
              and (note := best_of_n_note(study, col.cells[unit]))]
    return Table(headers=["phase", *metrics], rows=rows,
                 footer=([protocol_sentence(study, col)] if col.reference else []) + chosen + [INTERVAL_SENTENCE])


def protocol_sentence(study: Study, col: Column) -> str:
    """The sentence a paper would print under the table."""
    ref = col.reference
    assert ref is not None and col.context is not None
    p = study.protocol(ref.run)
    temp = p.get("temperature") or 0
    decoding = ("greedy decoding" if not temp else
                f"sampling at temperature {temp}, top_p {p.get('top_p', 1.0)}, each training seed's evaluation "
                f"with its own decoding seed derived from the protocol's ({p.get('seed') or 0}) and the run's — "
                "independent draws, shared by a variant and its control of one seed")
    problems = int(ref.metrics.get("problems", 0))
    most = protocol_tests(p)
    tests = (f", judged on each problem's {most} most demanding tests (the largest inputs; all of a problem with "
             f"fewer)" if most else "")
    return (f"_{col.dataset}: {decoding}, n = {p.get('n') or 1} per problem, at most {p.get('max_tokens')} new tokens"
            f"{tests}, "
            f"prompt template `{p.get('prompt') or 'registry default'}`, {repair_words(p)} (protocol `{ref.protocol}`, "
            f"sha256 {col.context.protocol_sha256[:12]}); {problems} problems, id list sha256 "
            f"{col.context.idlist_sha256[:12]}; judge `{col.context.judge_version}`._")


def repair_words(protocol: dict) -> str:
    rounds = protocol.get("rounds") or 1
    if rounds == 1:
        return "no repair rounds"
    return (f"repair rounds: a failing answer gets the public tests' feedback and another try, up to {rounds} answers "
            "per problem (the cells count first answers; the repair page the last)")


def protocol_label(study: Study, col: Column) -> str:
    """The column's protocol in a few words, for a figure's title."""
    if col.reference is None:
        return "no protocol"
    p = study.protocol(col.reference.run)
    temp = p.get("temperature") or 0
    rounds = p.get("rounds") or 1
    return (f"protocol {col.reference.protocol} (" + ("greedy" if not temp else f"temperature {temp}")
            + f", n = {p.get('n') or 1}" + (f", repair: up to {rounds} answers" if rounds > 1 else "") + ")")
