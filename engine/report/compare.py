"""Two studies side by side: for each phase (or variant) and dataset both have, the two
accepted@1 cells and, where they may stand side by side, Δ (B − A) with its paired bootstrap
interval; where they may not, why.

Isolation rules 4 and 5 decide: two numbers compare only when they were judged on the same frozen
id list (its sha256) under the same evaluation protocol (its sha256), by the same judge version.
Paired as every Δ of the pages is (`engine.report.pairing`: by seed id and problem id).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from engine.errors import UserError
from engine.report.main_table import PRIMARY_METRIC, Column, cell_estimate, column, datasets, problem_values
from engine.report.pairing import pair
from engine.report.stats import Delta, Estimate, paired_delta
from engine.report.study import Study, load_study
from engine.report.tables import Table, cell_text
from engine.runs.lineage import LINEAGE_FILE, open_lineage


@dataclass(frozen=True)
class Side:
    runs_dir: Path
    spec: str  # the study's name in that lineage


@dataclass(frozen=True)
class Shared:
    """One cell both studies have."""

    unit: str
    dataset: str
    a: Optional[Estimate]
    b: Optional[Estimate]
    delta: Optional[Delta] = None
    why: str = ""  # why there is no Δ
    left_out: str = ""  # seeds or problems of one side the pairing left out: Δ is not B − A of the two cells


def load(side: Side) -> Study:
    path = Path(side.runs_dir) / LINEAGE_FILE
    if not path.is_file():
        raise UserError(f"{side.runs_dir}: no {LINEAGE_FILE}\n  fix: pass a runs folder a study ran in "
                        "(`--runs-dir`, or a folder holding lineage.sqlite)")
    with open_lineage(path, readonly=True) as lineage:
        names = lineage.spec_names()
        spec = side.spec or (names[0] if len(names) == 1 else "")
        if spec not in names:
            raise UserError(f"{path}: no study {spec!r}; it holds {', '.join(names) or 'none'}\n"
                            "  fix: name one of them (SPEC file or name)")
        return load_study(lineage, spec)


def _why_not(a: Column, b: Column) -> str:
    if a.context is None or b.context is None:
        return "one side has no number"
    if a.context.idlist_sha256 != b.context.idlist_sha256:
        return (f"id list differs (sha256 {a.context.idlist_sha256[:12]} vs {b.context.idlist_sha256[:12]}): "
                "other problems (rule 4)")
    if a.context.protocol_sha256 != b.context.protocol_sha256:
        return (f"protocol differs (sha256 {a.context.protocol_sha256[:12]} vs {b.context.protocol_sha256[:12]}): "
                "other decoding (rule 5)")
    if a.context.judge_version != b.context.judge_version:
        return f"judge version differs ({a.context.judge_version} vs {b.context.judge_version})"
    return ""


def compare(a: Study, b: Study) -> list[Shared]:
    """Every (unit, dataset) both studies have a cell of, in A's order."""
    columns_b = {d: column(b, d) for d in datasets(b)}
    out = []
    for dataset in datasets(a):
        if dataset not in columns_b:
            continue
        col_a, col_b = column(a, dataset), columns_b[dataset]
        why = _why_not(col_a, col_b)
        for unit in a.units():
            cells_a, cells_b = col_a.cells.get(unit), col_b.cells.get(unit)
            if not cells_a or not cells_b:
                continue
            est_a, est_b = cell_estimate(cells_a, PRIMARY_METRIC), cell_estimate(cells_b, PRIMARY_METRIC)
            if why:
                out.append(Shared(unit, dataset, est_a, est_b, why=why))
                continue
            p = pair(cells_b, cells_a, problem_values)
            if isinstance(p, str):
                out.append(Shared(unit, dataset, est_a, est_b, why=p))
                continue
            out.append(Shared(unit, dataset, est_a, est_b, paired_delta(p.ours, p.theirs), left_out=p.note("B", "A")))
    return out


def table(a: Study, b: Study, shared: list[Shared]) -> Table:
    rows = [[s.unit, s.dataset, cell_text(s.a) if s.a else "—", cell_text(s.b) if s.b else "—",
             (f"{s.delta.delta:+.3f} [{s.delta.low:+.2f}, {s.delta.high:+.2f}] (seeds = {s.delta.seeds}"
              + (f"; {s.left_out}" if s.left_out else "") + ")"
              if s.delta else f"— ({s.why})")] for s in shared]
    return Table(headers=["phase", "dataset", f"A: {a.name}", f"B: {b.name}", f"Δ {PRIMARY_METRIC} (B − A) [95 %]"],
                 rows=rows, footer=[
                     "_A and B: each cell as its results page prints it. Δ: paired by seed and problem, its 95 % "
                     "paired percentile-bootstrap interval; shown only where both sides share the id list, the "
                     "evaluation protocol and the judge version (isolation rules 4 and 5)._"])
