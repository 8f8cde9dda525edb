"""What each page's template is filled with, from the study: its tables (already Markdown), its
sentences and its figures (drawn into `img/` next to the pages, their paths appended to
`images`). `engine.report.generate` puts each into its template and writes the pages."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from engine.evaluate.metrics import mean_pass_at_k
from engine.judge.config import judged_unsandboxed
from engine.report import isolation_record, plots
from engine.report.ablation import Ablation, ablation_tables, ablations, delta_text, finding
from engine.report.curves import constant_lines, curve_figures
from engine.report.failures import PER_CLASS, REPAIRED, cases
from engine.report.flywheel import errors_section, flywheel_units, harvest_table, shift_table
from engine.report.forecast import Priced
from engine.report.main_table import Column, protocol_label
from engine.report.panels import VERDICTS, error_shares, error_table, matched_cost, repair_table
from engine.report.places import Places, spec_name
from engine.report.study import Study
from engine.report.tables import Table, fmt
from engine.runs.completion import unchanged_runs
from engine.runs.lineage import RunRecord
from engine.runs.track import untracked

INDEX_FAILED = 10  # failed, blocked or cancelled runs listed on the index; the runs page lists them all
UNSETTLED = ("failed", "blocked", "cancelled")


def _run_rows(study: Study, runs: list[RunRecord], places: Places) -> list[list[str]]:
    return [[places.run(r), study.unit(r), str(r.seed if r.seed is not None else "—"), str(r.kind.value),
             r.state.value, places.portable(r.reason or ""), places.log(r)] for r in runs]


RUN_HEADERS = ["run", "phase", "seed", "kind", "state", "reason", "log"]


def index_context(study: Study, columns: list[Column], headline: str, priced: Priced,
                  places: Places) -> dict[str, Any]:
    counts = Counter(r.state.value for r in study.runs)
    unsettled = [r for r in study.runs if r.state.value in UNSETTLED]
    failed = Table(headers=RUN_HEADERS, rows=_run_rows(study, unsettled[:INDEX_FAILED], places))
    unsandboxed = sorted({m.judge_version for ms in study.metrics.values() for m in ms
                          if m.judge_version and judged_unsandboxed(m.judge_version)})
    compared = ablations(study, columns)
    return {"counts": dict(counts), "total": len(study.runs), "unsandboxed": unsandboxed,
            "headline": headline, "comparisons": _comparisons(compared), "found": [finding(r) for a in compared for r in a.rows],
            "forecast_two": priced.two_lines(),
            "failed": failed.markdown() if unsettled else "", "failed_more": max(0, len(unsettled) - INDEX_FAILED),
            "untracked": _untracked(study, places),
            "older": len(study.older), "spec_name": spec_name(study),
            "spec_sha": (study.spec.sha256 if study.spec else "")[:12], **isolation_record.summary(study)}


def _untracked(study: Study, places: Places) -> list[str]:
    """Runs whose numbers a tracker of the spec refused (`engine.runs.track.track_quietly`): said on
    the index, since a user reading the tracker's compare view would otherwise miss them silently."""
    out = []
    for run in study.runs:
        folder = places.folder(run)
        why = untracked(folder) if folder else None
        if why:
            out.append(f"{places.run(run)} ({study.unit(run)}): {places.portable(why.splitlines()[0])}")
    return out


def _comparisons(compared: list[Ablation]) -> str:
    """Each declared variant against its phase, per dataset: Δ, its interval, and whether |Δ|
    reaches the smallest difference the comparison can detect."""
    rows, notes = [], []
    for a in compared:
        notes += a.notes  # which seeds a Δ was paired on, and a side that changed nothing
        for r in a.rows:
            if r.delta is None:
                rows.append([f"{r.variant} vs {r.control}", r.dataset, f"— ({r.why})", "—", "—"])
                continue
            reached = ("yes" if r.detectable else "no") + (", interval excludes 0" if r.delta.low > 0 or r.delta.high < 0
                                                           else ", interval holds 0")
            rows.append([f"{r.variant} vs {r.control}", r.dataset, f"{delta_text(r.delta)} (seeds = {r.delta.seeds})",
                         fmt(r.mdd), reached])
    return Table(headers=["comparison", "dataset", "Δ accepted@1 [95 %]", "detectable Δ (80 %)", "beats detectable Δ"],
                 rows=rows, footer=notes).markdown() if rows else ""


def runs_context(study: Study, places: Places) -> dict[str, Any]:
    older = Table(headers=["run", "phase", "seed", "kind", "state", "what changed"],
                  rows=[[r.id, r.phase + (f"/{r.variant}" if r.variant else "") + (f":{r.schedule}" if r.schedule else ""),
                         str(r.seed if r.seed is not None else "—"), r.kind, r.state.value, r.changed]
                        for r in study.older])
    return {"runs": Table(headers=RUN_HEADERS, rows=_run_rows(study, study.runs, places)).markdown(),
            "older": older.markdown() if study.older else ""}


def matched_cost_context(study: Study, columns: list[Column], out: Path, images: list[Path]) -> dict[str, Any]:
    panels, curves = [], []
    for col in columns:
        if not col.cells:
            continue
        table, points = matched_cost(study, col)
        image = plots.cost_scatter(out / "img" / f"cost-{col.dataset}.png", points,
                                   f"{col.dataset}, {protocol_label(study, col)}: accepted vs tokens", study.units())
        images.append(image)
        panels.append((col.dataset, table.markdown(), image.relative_to(out).as_posix()))
        by_unit = {u: [[mean_pass_at_k(_firsts(c), k) for k in range(1, _n(c) + 1)] for c in cells]
                   for u, cells in col.cells.items() if _n(cells[0]) > 1}
        if by_unit:
            image = plots.pass_at_k(out / "img" / f"passk-{col.dataset}.png", by_unit,
                                    f"{col.dataset}, {protocol_label(study, col)}: pass@k", study.units())
            images.append(image)
            curves.append((col.dataset, image.relative_to(out).as_posix()))
    return {"panels": panels, "curves": curves}


def _firsts(cell: Any) -> list:
    return [r for r in cell.samples() if r.round == 1]


def _n(cell: Any) -> int:
    problems = cell.metrics.get("problems") or 0
    return int(cell.metrics.get("samples", 0) / problems) if problems else 1


def ablations_context(study: Study, columns: list[Column]) -> dict[str, Any]:
    """Each variant against its control; a flywheel variant also with the shift of its failure classes."""
    wheels = flywheel_units(study)
    out = []
    for title, table, warnings in ablation_tables(study, columns):
        variant, _, phase = title.partition(" vs ")
        unit = f"{phase}/{variant}"
        shift = (shift_table(columns, unit, phase, list(wheels[unit]["classes"]),
                             unchanged_runs(study.runs, study.configs)).markdown()
                 if unit in wheels else "")
        out.append((title, table.markdown(), warnings, shift))
    return {"ablations": out}


def flywheel_context(study: Study, columns: list[Column]) -> dict[str, Any]:
    if not flywheel_units(study):
        return {}
    return {"harvest": harvest_table(study).markdown(), "shifts": errors_section(study, columns)}


def errors_context(study: Study, columns: list[Column], out: Path, images: list[Path]) -> dict[str, Any]:
    panels = []
    for col in columns:
        shares = error_shares(study, col)
        if not shares:
            continue
        image = plots.stacked_errors(out / "img" / f"errors-{col.dataset}.png", list(shares), VERDICTS,
                                     list(shares.values()), f"{col.dataset}, {protocol_label(study, col)}: "
                                     "share of first answers per verdict")
        images.append(image)
        panels.append((col.dataset, error_table(study, col).markdown(), image.relative_to(out).as_posix()))
    return {"panels": panels, "flywheel": flywheel_context(study, columns)}


def curves_context(study: Study, out: Path, images: list[Path]) -> dict[str, Any]:
    figures = []
    for figure in curve_figures(study):
        image = plots.curve(out / "img" / figure.file, figure.metric, figure.units, figure.title,
                            order=study.units(), names=figure.names)
        images.append(image)
        figures.append((figure.heading, image.relative_to(out).as_posix(), constant_lines(figure)))
    return {"figures": figures}


def repair_context(study: Study, columns: list[Column]) -> dict[str, Any]:
    panels = []
    for col in columns:
        table = repair_table(study, col)
        if table.rows:
            transitions = Counter()
            for cells in col.cells.values():
                for c in cells:
                    for key, value in c.metrics.items():
                        if key.startswith("repair/transition/"):
                            transitions[key.split("/", 2)[2]] += int(value)
            moves = Table(headers=["first → last verdict", "chains"],
                          rows=[[k.replace("->", " → "), str(v)] for k, v in transitions.most_common()])
            panels.append((col.dataset, table.markdown(), moves.markdown()))
    training = [(study.unit(r), r.seed) for r in study.trained() if r.kind == "repair"]
    return {"panels": panels, "training": training}


def failures_context(study: Study, columns: list[Column], places: Places) -> dict[str, Any]:
    return {"columns": [(col.dataset, cases(study, col, places.portable)) for col in columns if col.cells],
            "skipped": False,
            "per_class": PER_CLASS, "repaired_max": REPAIRED}
