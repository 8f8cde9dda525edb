"""`runs/<spec>/report/`: the result pages, regenerated from lineage and run outputs alone.

Each page is a Jinja template in `templates/report/` filled with tables (already Markdown)
and figure paths; pages and figures are written next to each other, atomically, so a reader
never sees half a page. A page whose data is missing says so instead of failing the rest.
"""

from __future__ import annotations

import functools
import json
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
from engine.report import plots
from engine.report.ablation import ablation_tables, versus_parent
from engine.report.failures import cases
from engine.report.flywheel import errors_section, flywheel_units, harvest_table, shift_table
from engine.price.forecast import Forecast
from engine.report.forecast import COMMAND, forecast_tables, study_forecast, study_versus, versus_tables
from engine.report.main_table import (
    Column,
    column,
    datasets,
    detail_table,
    headline_table,
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
from engine.report.study import Study, load_study
from engine.report.tables import Table
from engine.resources import TEMPLATES
from engine.runs.completion import unchanged_runs
from engine.runs.lineage import LINEAGE_FILE, open_lineage

REPORT_DIR = "report"
PAGES = ("index", "results", "ablations", "matched-cost", "errors", "cost", "curves", "repair", "failures")
CURVES = ("reward_mean", "reward_std", "kl", "entropy", "response_length", "timeout_rate", "loss",
          "select/accepted@1")
RULES = ("1. test sets never train, build pairs, select or stop early",
         "2. valid sets never train or build pairs",
         "3. no problem on both sides of the train/eval line (id and content)",
         "4. regression and evaluation sets are frozen id lists, hashes recorded",
         "5. compared runs share the evaluation protocol exactly")


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
    builders: dict[str, Callable[[], dict[str, Any]]] = {
        "index": lambda: {**_index(study), **priced.forecast()},
        "results": lambda: {"headline": report.headline, "unchanged": unchanged_table(study),
                            "versus_parent": versus_parent(study, columns).markdown(),
                            "details": [(c.dataset, detail_table(study, c).markdown()) for c in columns if c.cells]},
        "ablations": lambda: _ablations(study, columns),
        "matched-cost": lambda: _matched(study, columns, out, report),
        "errors": lambda: _errors(study, columns, out, report),
        "cost": lambda: {"eval": [(c.dataset, cost_table(study, c).markdown()) for c in columns if c.cells],
                         "training": training_cost_table(study).markdown(), **priced.versus()},
        "curves": lambda: _curves(study, out, report),
        "repair": lambda: _repair(study, columns),
        "failures": lambda: _failures(study, columns) if failures else {"columns": [], "skipped": True},
    }
    env = _environment(TEMPLATES / "report")
    for page, build in builders.items():
        try:
            context, error = build(), None
        except Exception as exc:  # partial data must not take the other pages down (the caller says it failed)
            context, error = {}, f"{type(exc).__name__}: {exc}"
            report.failed[page] = error
        text = (env.get_template(f"{page}.md.j2").render(study=study.name, pages=PAGES, **context) if error is None
                else f"# {page}\n\nThis page could not be built from the data there is: {error}\n")
        report.pages.append(_write(out / f"{page}.md", text))
    report.seconds = time.perf_counter() - began
    return report


def _write(path: Path, text: str) -> Path:
    return atomic_write(path, text)


def _index(study: Study) -> dict[str, Any]:
    counts = Counter(r.state.value for r in study.runs)
    failed = Table(headers=["run", "phase", "seed", "kind", "state", "reason"],
                   rows=[[r.id, study.unit(r), str(r.seed if r.seed is not None else "—"), str(r.kind.value), r.state.value,
                          r.reason or ""] for r in study.runs if r.state.value in ("failed", "blocked", "cancelled")])
    waivers = Table(headers=["rule", "what", "reason", "spec line"],
                    rows=[[str(w.rule), w.what, w.reason, str(w.spec_line or "—")] for w in study.waivers])
    leaks = Table(headers=["training", "evaluation", "kind", "scores", "test run", "outcome"],
                  rows=[[f"{k.train}: {k.train_id}", f"{k.evaluation}: {k.eval_id}", k.kind, _scores(k.scores_json),
                         k.evidence or "—", k.outcome] for k in study.leaks])
    data = Table(headers=["dataset", "source", "split", "role", "problems", "id list sha256", "verified"],
                 rows=[[d.name, d.source, d.split or "—", d.role, str(d.problems or "—"),
                        (d.idlist_sha256 or "—")[:12], d.verified or "—"] for d in study.datasets])
    older = Table(headers=["run", "phase", "seed", "kind", "state", "what changed"],
                  rows=[[r.id, r.phase + (f"/{r.variant}" if r.variant else "") + (f":{r.schedule}" if r.schedule else ""),
                         str(r.seed if r.seed is not None else "—"), r.kind, r.state.value, r.changed]
                        for r in study.older])
    unsandboxed = sorted({m.judge_version for ms in study.metrics.values() for m in ms
                          if m.judge_version and judged_unsandboxed(m.judge_version)})
    return {"counts": dict(counts), "total": len(study.runs), "failed": failed.markdown(), "rules": RULES,
            "unsandboxed": unsandboxed,
            "waivers": waivers.markdown(), "datasets": data.markdown(),
            "leaks": leaks.markdown() if study.leaks else "", "older": older.markdown() if study.older else "",
            "spec_path": study.spec.path if study.spec else "", "spec_sha": (study.spec.sha256 if study.spec else "")[:12]}


def _scores(scores_json: str) -> str:
    return ", ".join(f"{name} {value:.2f}" for name, value in json.loads(scores_json or "{}").items()) or "—"


class _Priced:
    """The study's forecast, computed once for the index and the cost page."""

    def __init__(self, study: Study) -> None:
        self.study = study
        self._forecast: Optional[Forecast] = None
        self._error = ""
        try:
            self._forecast = study_forecast(study)
        except UserError as exc:  # an uncalibrated or unknown profile: the rest of the pages stand
            self._error = f"No forecast: {exc}"
        except Exception as exc:  # partial data must not take the other pages down
            self._error = f"No forecast: {type(exc).__name__}: {exc}"

    def forecast(self) -> dict[str, Any]:
        if self._forecast is None:
            return {"forecast": "", "forecast_lines": [self._error]}
        table, lines = forecast_tables(self._forecast)
        return {"forecast": table.markdown(), "forecast_lines": lines}

    def versus(self) -> dict[str, Any]:
        if self._forecast is None:
            return {"versus_kinds": "", "versus_runs": "", "versus_whole": self._error, "versus_command": COMMAND}
        kinds, runs, whole = versus_tables(study_versus(self.study, self._forecast))
        return {"versus_kinds": kinds.markdown(), "versus_runs": runs.markdown(), "versus_whole": whole,
                "versus_command": COMMAND}


def _matched(study: Study, columns: list[Column], out: Path, report: Report) -> dict[str, Any]:
    panels, curves = [], []
    for col in columns:
        if not col.cells:
            continue
        table, points = matched_cost(study, col)
        image = plots.cost_scatter(out / "img" / f"cost-{col.dataset}.png", points, f"{col.dataset}: accepted vs tokens")
        report.images.append(image)
        panels.append((col.dataset, table.markdown(), image.relative_to(out).as_posix()))
        by_unit = {u: [[mean_pass_at_k(_firsts(c), k) for k in range(1, _n(c) + 1)] for c in cells]
                   for u, cells in col.cells.items() if _n(cells[0]) > 1}
        if by_unit:
            image = plots.pass_at_k(out / "img" / f"passk-{col.dataset}.png", by_unit, f"{col.dataset}: pass@k")
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
                                     list(shares.values()))
        report.images.append(image)
        panels.append((col.dataset, error_table(study, col).markdown(), image.relative_to(out).as_posix()))
    return {"panels": panels, "flywheel": _flywheel(study, columns)}


def _curves(study: Study, out: Path, report: Report) -> dict[str, Any]:
    figures = []
    for metric in CURVES:
        units: dict[str, dict[int, dict[int, float]]] = {}
        for run in study.trained():
            series = study.series(run.id)
            values = series.get(metric) or next((v for k, v in series.items() if k.endswith("/" + metric)), None)
            if values:
                units.setdefault(study.unit(run), {})[run.seed or 0] = values
        if units:
            name = metric.replace("/", "-").replace("@", "at")
            image = plots.curve(out / "img" / f"curve-{name}.png", metric, units)
            report.images.append(image)
            figures.append((metric, image.relative_to(out).as_posix()))
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


def _failures(study: Study, columns: list[Column]) -> dict[str, Any]:
    out = []
    for col in columns:
        if col.cells:
            failed, repaired = cases(study, col)
            out.append((col.dataset, failed, repaired))
    return {"columns": out, "skipped": False}
