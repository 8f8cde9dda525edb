"""`runs/<spec>/report/`: the result pages, regenerated from lineage and run outputs alone.

Each page is a Jinja template in `templates/report/` filled with tables (already Markdown)
and figure paths; pages and figures are written next to each other, atomically, so a reader
never sees half a page. A page whose data is missing says so instead of failing the rest.
"""

from __future__ import annotations

import functools
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import jinja2

from engine.errors import UserError
from engine.evaluate.metrics import mean_pass_at_k
from engine.files import atomic_write
from engine.judge.config import judged_unsandboxed
from engine.report import isolation_record, plots
from engine.report.ablation import Ablation, ablation_tables, ablations, delta_text, finding, versus_parent
from engine.report.curves import constant_lines, curve_figures
from engine.report.failures import PER_CLASS, REPAIRED, cases
from engine.report.flywheel import errors_section, flywheel_units, harvest_table, shift_table
from engine.price.forecast import Forecast
from engine.price.study import Versus
from engine.report.forecast import (
    COMMAND,
    actual_line,
    forecast_line,
    forecast_tables,
    study_forecast,
    study_versus,
    versus_tables,
)
from engine.report.main_table import (
    Column,
    column,
    datasets,
    detail_table,
    headline_table,
    protocol_label,
)
from engine.report.panels import (
    VERDICTS,
    cost_table,
    error_shares,
    error_table,
    matched_cost,
    repair_table,
    training_cost_table,
    unchanged_table,
)
from engine.report.portable import PathReplacer
from engine.report.study import Study, load_study
from engine.report.tables import Table, fmt
from engine.resources import TEMPLATES
from engine.runs.completion import unchanged_runs
from engine.runs.lineage import LINEAGE_FILE, RunRecord, open_lineage
from engine.runs.track import untracked

REPORT_DIR = "report"
PAGES = ("index", "results", "ablations", "matched-cost", "errors", "cost", "curves", "repair", "failures",
         "isolation", "runs")
INDEX_FAILED = 10  # failed, blocked or cancelled runs listed on the index; the runs page lists them all
UNSETTLED = ("failed", "blocked", "cancelled")
# Pages that show answers and tests as they were: a path in them is data, never rewritten (their
# own words that may name a folder, a run's unreadable problems, are made portable where written).
VERBATIM = ("failures",)


@dataclass
class Report:
    spec: str
    dir: Path
    pages: list[Path] = field(default_factory=list)
    images: list[Path] = field(default_factory=list)
    seconds: float = 0.0
    headline: str = ""  # the main table (Markdown), for the console at the end of a study
    failed: dict[str, str] = field(default_factory=dict)  # page → why it could not be built
    headline_table: Optional[Table] = None  # the same table as data, for a terminal to draw


@functools.lru_cache(maxsize=2)
def _environment(folder: Path) -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(folder)), undefined=jinja2.StrictUndefined,
                              trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, autoescape=False)


def write_reports(runs_dir: Path, spec: Optional[str] = None, *, failures: bool = True) -> list[Report]:
    """The pages of `spec` (every spec in the lineage when None)."""
    path = Path(runs_dir) / LINEAGE_FILE
    if not path.is_file():
        return []
    with open_lineage(path, readonly=True) as lineage:
        names = [spec] if spec else lineage.spec_names()
        studies = [load_study(lineage, name) for name in names if lineage.runs(spec_name=name)]
    return [write_report(study, Path(runs_dir) / study.name / REPORT_DIR, failures=failures) for study in studies]


def write_report(study: Study, out: Path, *, failures: bool = True) -> Report:
    began = time.perf_counter()
    report = Report(spec=study.name, dir=out)
    columns = [column(study, d) for d in datasets(study)]
    columns = [c for c in columns if c.cells or c.why]
    report.headline_table = headline_table(study, columns)
    report.headline = report.headline_table.markdown()
    priced = _Priced(study)
    places = Places(study, out)
    builders: dict[str, Callable[[], dict[str, Any]]] = {
        "index": lambda: _index(study, columns, report.headline, priced, places),
        "results": lambda: {"headline": report.headline, "unchanged": unchanged_table(study),
                            "versus_parent": versus_parent(study, columns).markdown(),
                            "details": [(c.dataset, detail_table(study, c).markdown()) for c in columns if c.cells]},
        "ablations": lambda: _ablations(study, columns),
        "matched-cost": lambda: _matched(study, columns, out, report),
        "errors": lambda: _errors(study, columns, out, report),
        "cost": lambda: {"eval": [(c.dataset, cost_table(study, c).markdown()) for c in columns if c.cells],
                         "training": training_cost_table(study).markdown(), **priced.forecast(), **priced.versus()},
        "curves": lambda: _curves(study, out, report),
        "repair": lambda: _repair(study, columns),
        "failures": lambda: _failures(study, columns, places) if failures else {"columns": [], "skipped": True,
                                                                         "per_class": PER_CLASS, "repaired_max": REPAIRED},
        "isolation": lambda: isolation_record.page(study),
        "runs": lambda: _runs(study, places),
    }
    env = _environment(TEMPLATES / "report")
    for page, build in builders.items():
        try:
            context, error = build(), None
        except Exception as exc:  # partial data must not take the other pages down (the caller says it failed)
            context, error = {}, f"{type(exc).__name__}: {exc}"
            report.failed[page] = error
        text = (env.get_template(f"{page}.md.j2").render(study=study.name, pages=PAGES, **context) if error is None
                else f"# {page}\n\n[index](index.md)\n\nThis page could not be built from the data there is; "
                     "`rlvr-run report` names what it could not read.\n")
        report.pages.append(_write(out / f"{page}.md", text if page in VERBATIM and error is None
                                   else places.portable(text)))
    report.seconds = time.perf_counter() - began
    return report


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else "no reason given"


def _write(path: Path, text: str) -> Path:
    return atomic_write(path, text)


class Places:
    """Where a study's files are, as its pages link them: relative to the report folder, so that
    pages copied with their runs folder still resolve, and no page names a machine's folders."""

    def __init__(self, study: Study, out: Path) -> None:
        self.out = Path(out).resolve()
        # a run's folder is `runs/<spec>/<run id>` (materialize); lineage records where it was
        # made, which a copied study no longer is: the run id finds it
        self.moved: dict[str, str] = {str(run.run_dir): self.relative(self.out.parent / run.id)
                                      for run in study.runs if run.run_dir}
        for root in {self.out.parent.parent, Path(os.path.abspath(out)).parent.parent}:  # resolved or as given
            self.moved[str(root)] = self.relative(root)
        if study.spec and study.spec.path:
            self.moved[study.spec.path] = spec_name(study)
        self.moved[str(Path.home())] = "~"
        self._replacer = PathReplacer(self.moved)  # longest first, and only whole paths

    def relative(self, path: Path) -> str:
        return Path(os.path.relpath(Path(path).resolve(), self.out)).as_posix()

    def folder(self, run: RunRecord) -> Optional[Path]:
        found = self.out.parent / run.id
        return found if found.is_dir() else None

    def run(self, run: RunRecord) -> str:
        folder = self.folder(run)
        return f"[{run.id}]({self.relative(folder)}/)" if folder else run.id

    def log(self, run: RunRecord) -> str:
        """The run's latest attempt's log, linked, or — when it has none."""
        folder = self.folder(run)
        logs = sorted((folder / "logs").glob("attempt-*.log"), key=_attempt) if folder else []
        return f"[{logs[-1].name}]({self.relative(logs[-1])})" if logs else "—"

    def portable(self, text: str) -> str:
        """`text` with every folder of this machine the study knows replaced by its relative path
        (a failed run's reason names its log; an unreadable run's error its folder)."""
        return self._replacer.sub(text)


def _attempt(path: Path) -> int:
    digits = path.stem.rpartition("-")[2]
    return int(digits) if digits.isdigit() else 0


def spec_name(study: Study) -> str:
    return Path(study.spec.path).name if study.spec and study.spec.path else study.name


def _run_rows(study: Study, runs: list[RunRecord], places: Places) -> list[list[str]]:
    return [[places.run(r), study.unit(r), str(r.seed if r.seed is not None else "—"), str(r.kind.value),
             r.state.value, places.portable(r.reason or ""), places.log(r)] for r in runs]


RUN_HEADERS = ["run", "phase", "seed", "kind", "state", "reason", "log"]


def _index(study: Study, columns: list[Column], headline: str, priced: "_Priced", places: Places) -> dict[str, Any]:
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


def _untracked(study: Study, places: "Places") -> list[str]:
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


def _runs(study: Study, places: Places) -> dict[str, Any]:
    older = Table(headers=["run", "phase", "seed", "kind", "state", "what changed"],
                  rows=[[r.id, r.phase + (f"/{r.variant}" if r.variant else "") + (f":{r.schedule}" if r.schedule else ""),
                         str(r.seed if r.seed is not None else "—"), r.kind, r.state.value, r.changed]
                        for r in study.older])
    return {"runs": Table(headers=RUN_HEADERS, rows=_run_rows(study, study.runs, places)).markdown(),
            "older": older.markdown() if study.older else ""}


class _Priced:
    """The study's forecast and how it went, computed once for the index and the cost page."""

    def __init__(self, study: Study) -> None:
        self.study = study
        self._forecast: Optional[Forecast] = None
        self._versus: Optional[Versus] = None
        self._error = ""  # why there is no forecast
        self._versus_error = ""  # why a forecast there is was not set against the actual
        try:
            self._forecast = study_forecast(study)
        except UserError as exc:  # an uncalibrated or unknown profile: the rest of the pages stand
            self._error = f"No forecast: {_first_line(exc)}"
        except Exception:  # partial data must not take the other pages down; the page names no exception
            self._error = f"No forecast: the recorded runs could not be priced (`{COMMAND}` shows why)."
        if self._forecast is None:
            self._versus_error = self._error
            return
        try:
            self._versus = study_versus(study, self._forecast)
        except Exception:  # the forecast stands; only its comparison with the actual is missing
            self._versus_error = ("Actual: not set against the forecast: the recorded durations could not be read "
                                  f"(`{COMMAND}` shows why).")

    def two_lines(self) -> list[str]:
        if self._forecast is None:
            return [self._error]
        return [forecast_line(self._forecast),
                actual_line(self._versus) if self._versus is not None else self._versus_error]

    def forecast(self) -> dict[str, Any]:
        if self._forecast is None:
            return {"forecast": "", "forecast_lines": [self._error]}
        table, lines = forecast_tables(self._forecast)
        return {"forecast": table.markdown(), "forecast_lines": lines}

    def versus(self) -> dict[str, Any]:
        if self._versus is None:
            return {"versus_kinds": "", "versus_runs": "", "versus_whole": self._versus_error,
                    "versus_command": COMMAND}
        kinds, runs, whole = versus_tables(self._versus)
        return {"versus_kinds": kinds.markdown(), "versus_runs": runs.markdown(), "versus_whole": whole,
                "versus_command": COMMAND}


def _matched(study: Study, columns: list[Column], out: Path, report: Report) -> dict[str, Any]:
    panels, curves = [], []
    for col in columns:
        if not col.cells:
            continue
        table, points = matched_cost(study, col)
        image = plots.cost_scatter(out / "img" / f"cost-{col.dataset}.png", points,
                                   f"{col.dataset}, {protocol_label(study, col)}: accepted vs tokens", study.units())
        report.images.append(image)
        panels.append((col.dataset, table.markdown(), image.relative_to(out).as_posix()))
        by_unit = {u: [[mean_pass_at_k(_firsts(c), k) for k in range(1, _n(c) + 1)] for c in cells]
                   for u, cells in col.cells.items() if _n(cells[0]) > 1}
        if by_unit:
            image = plots.pass_at_k(out / "img" / f"passk-{col.dataset}.png", by_unit,
                                    f"{col.dataset}, {protocol_label(study, col)}: pass@k", study.units())
            report.images.append(image)
            curves.append((col.dataset, image.relative_to(out).as_posix()))
    return {"panels": panels, "curves": curves}


def _firsts(cell: Any) -> list:
    return [r for r in cell.samples() if r.round == 1]


def _n(cell: Any) -> int:
    problems = cell.metrics.get("problems") or 0
    return int(cell.metrics.get("samples", 0) / problems) if problems else 1


def _ablations(study: Study, columns: list[Column]) -> dict[str, Any]:
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


def _flywheel(study: Study, columns: list[Column]) -> dict[str, Any]:
    if not flywheel_units(study):
        return {}
    return {"harvest": harvest_table(study).markdown(), "shifts": errors_section(study, columns)}


def _errors(study: Study, columns: list[Column], out: Path, report: Report) -> dict[str, Any]:
    panels = []
    for col in columns:
        shares = error_shares(study, col)
        if not shares:
            continue
        image = plots.stacked_errors(out / "img" / f"errors-{col.dataset}.png", list(shares), VERDICTS,
                                     list(shares.values()), f"{col.dataset}, {protocol_label(study, col)}: "
                                     "share of first answers per verdict")
        report.images.append(image)
        panels.append((col.dataset, error_table(study, col).markdown(), image.relative_to(out).as_posix()))
    return {"panels": panels, "flywheel": _flywheel(study, columns)}


def _curves(study: Study, out: Path, report: Report) -> dict[str, Any]:
    figures = []
    for figure in curve_figures(study):
        image = plots.curve(out / "img" / figure.file, figure.metric, figure.units, figure.title,
                            order=study.units(), names=figure.names)
        report.images.append(image)
        figures.append((figure.heading, image.relative_to(out).as_posix(), constant_lines(figure)))
    return {"figures": figures}


def _repair(study: Study, columns: list[Column]) -> dict[str, Any]:
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


def _failures(study: Study, columns: list[Column], places: Places) -> dict[str, Any]:
    return {"columns": [(col.dataset, cases(study, col, places.portable)) for col in columns if col.cells],
            "skipped": False,
            "per_class": PER_CLASS, "repaired_max": REPAIRED}
