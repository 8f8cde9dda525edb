"""`runs/<spec>/report/`: the result pages, regenerated from lineage and run outputs alone.

Each page is a Jinja template in `templates/report/` filled with tables (already Markdown)
and figure paths; pages and figures are written next to each other, atomically, so a reader
never sees half a page. A page whose data is missing says so instead of failing the rest.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import jinja2

from engine.files import atomic_write
from engine.report import isolation_record
from engine.report.ablation import versus_parent
from engine.report.contexts import (
    ablations_context,
    curves_context,
    errors_context,
    failures_context,
    index_context,
    matched_cost_context,
    repair_context,
    runs_context,
)
from engine.report.failures import PER_CLASS, REPAIRED
from engine.report.forecast import Priced
from engine.report.main_table import column, datasets, detail_table, headline_table
from engine.report.panels import cost_table, training_cost_table, unchanged_table
from engine.report.places import Places
from engine.report.study import Study, load_study
from engine.report.tables import Table
from engine.resources import TEMPLATES
from engine.runs.lineage import LINEAGE_FILE, open_lineage

REPORT_DIR = "report"
PAGES = ("index", "results", "ablations", "matched-cost", "errors", "cost", "curves", "repair", "failures",
         "isolation", "runs")
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
    priced = Priced(study)
    places = Places(study, out)
    builders: dict[str, Callable[[], dict[str, Any]]] = {
        "index": lambda: index_context(study, columns, report.headline, priced, places),
        "results": lambda: {"headline": report.headline, "unchanged": unchanged_table(study),
                            "versus_parent": versus_parent(study, columns).markdown(),
                            "details": [(c.dataset, detail_table(study, c).markdown()) for c in columns if c.cells]},
        "ablations": lambda: ablations_context(study, columns),
        "matched-cost": lambda: matched_cost_context(study, columns, out, report.images),
        "errors": lambda: errors_context(study, columns, out, report.images),
        "cost": lambda: {"eval": [(c.dataset, cost_table(study, c).markdown()) for c in columns if c.cells],
                         "training": training_cost_table(study).markdown(), **priced.forecast(), **priced.versus()},
        "curves": lambda: curves_context(study, out, report.images),
        "repair": lambda: repair_context(study, columns),
        "failures": lambda: failures_context(study, columns, places) if failures else {"columns": [], "skipped": True,
                                                                         "per_class": PER_CLASS, "repaired_max": REPAIRED},
        "isolation": lambda: isolation_record.page(study),
        "runs": lambda: runs_context(study, places),
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


def _write(path: Path, text: str) -> Path:
    return atomic_write(path, text)
