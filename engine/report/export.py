"""A study's numbers as tidy rows (one value per row, with everything that says what it is): the
headline table, every declared comparison and every run's metrics, for a data frame, a
spreadsheet or a tracker of one's own. The same computations as the pages: a headline row is the
very estimate its cell prints, a comparison row the very Δ of the ablations page."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict, dataclass, fields
from typing import Optional

from engine.report.ablation import ablations
from engine.report.main_table import PRIMARY_METRIC, Column, cell_estimate, column, datasets
from engine.report.study import Study

FORMATS = ("csv", "json")


@dataclass(frozen=True)
class Row:
    """One value. `table`: headline (a results cell), comparison (a declared variant against its
    phase) or run (what one run recorded). `stat` says which number of the cell or comparison it
    is (mean, std, low, high, seeds; delta, p_improve, detectable; value for a run's metric)."""

    table: str
    spec: str
    phase: str
    variant: str
    seed: Optional[int]
    run: str
    dataset: str
    protocol: str
    protocol_sha256: str
    idlist_sha256: str
    metric: str
    stat: str
    value: float
    step: Optional[int] = None  # a training curve's step
    against: str = ""  # a comparison's control unit
    state: str = ""  # a run row's run state: a failed or cancelled run's numbers are on no page
    judge_version: str = ""  # with the two sha256s, what rules 4 and 5 compare: rows differing in it never mix


def _unit(unit: str) -> tuple[str, str]:
    phase, _, variant = unit.partition("/")
    return phase, variant


def headline_rows(study: Study, columns: list[Column]) -> list[Row]:
    out = []
    for col in columns:
        context = col.context
        for unit in study.units():
            cells = col.cells.get(unit)
            e = cell_estimate(cells, PRIMARY_METRIC) if cells else None
            if e is None or context is None or cells is None:
                continue
            phase, variant = _unit(unit)
            for stat, value in (("mean", e.mean), ("std", e.std), ("low", e.low), ("high", e.high),
                                ("seeds", float(e.seeds))):
                if value is not None:
                    out.append(Row("headline", study.name, phase, variant, None, "", col.dataset, cells[0].protocol,
                                   context.protocol_sha256, context.idlist_sha256, PRIMARY_METRIC, stat, float(value),
                                   judge_version=context.judge_version))
    return out


def comparison_rows(study: Study, columns: list[Column]) -> list[Row]:
    by_dataset = {c.dataset: c for c in columns}
    out = []
    for a in ablations(study, columns):
        for r in a.rows:
            if r.delta is None:
                continue
            col = by_dataset[r.dataset]
            context = col.context
            phase, variant = _unit(r.variant)
            protocol = next(iter(col.cells.get(r.variant) or []), None)
            for stat, value in (("control_mean", r.control_mean), ("variant_mean", r.variant_mean),
                                ("delta", r.delta.delta), ("low", r.delta.low), ("high", r.delta.high),
                                ("p_improve", r.delta.p_improve), ("seeds", float(r.delta.seeds)),
                                ("detectable", r.mdd)):
                if value is not None:
                    out.append(Row("comparison", study.name, phase, variant, None, "", r.dataset,
                                   protocol.protocol if protocol else "", context.protocol_sha256 if context else "",
                                   context.idlist_sha256 if context else "", PRIMARY_METRIC, stat, float(value),
                                   against=r.control, judge_version=context.judge_version if context else ""))
    return out


def run_rows(study: Study) -> list[Row]:
    """Every number lineage holds of the current plan's runs: each evaluation's metrics per dataset
    and protocol, each training run's curves per step and checkpoint scores per dataset."""
    out = []
    for run in study.runs:
        for m in study.metrics.get(run.id, []):
            out.append(Row("run", study.name, run.phase, run.variant or "", run.seed, run.id, m.dataset,
                           m.protocol or "", m.protocol_sha256 or "", m.idlist_sha256 or "", m.name, "value",
                           float(m.value), step=m.step if m.step >= 0 else None, state=run.state.value,
                           judge_version=m.judge_version or ""))
    return out


def export_rows(study: Study) -> list[Row]:
    columns = [c for c in (column(study, d) for d in datasets(study)) if c.cells or c.why]
    return headline_rows(study, columns) + comparison_rows(study, columns) + run_rows(study)


HEADERS = tuple(f.name for f in fields(Row))


def render(rows: list[Row], fmt: str) -> str:
    """The rows as CSV (a header line, empty cells for what a row has not) or a JSON array."""
    if fmt == "json":
        return json.dumps([asdict(r) for r in rows], indent=1) + "\n"
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(HEADERS)
    for r in rows:
        writer.writerow(["" if v is None else v for v in (getattr(r, h) for h in HEADERS)])
    return buffer.getvalue()
