"""The result pages made: each page's context built and its template filled (`generate` decides
whether they need making, and imports this only then: matplotlib and the templates cost a second).
A page whose data is missing says so instead of failing the rest."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Callable, Sequence

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
from engine.report.study import Study
from engine.resources import TEMPLATES

# Pages that show answers and tests as they were: a path in them is data, never rewritten (their
# own words that may name a folder, a run's unreadable problems, are made portable where written).
VERBATIM = ("failures",)


@functools.lru_cache(maxsize=2)
def _environment(folder: Path) -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(folder)), undefined=jinja2.StrictUndefined,
                              trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, autoescape=False)


def build(study: Study, out: Path, report: Any, names: Sequence[str], *, failures: bool) -> Any:
    """`report` (a `generate.Report`) filled with the pages `names` of `study`, written to `out`."""
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
    for page, make in builders.items():
        try:
            context, error = make(), None
        except Exception as exc:  # partial data must not take the other pages down (the caller says it failed)
            context, error = {}, f"{type(exc).__name__}: {exc}"
            report.failed[page] = error
        text = (env.get_template(f"{page}.md.j2").render(study=study.name, pages=names, **context) if error is None
                else f"# {page}\n\n[index](index.md)\n\nThis page could not be built from the data there is; "
                     "`rlvr-run report` names what it could not read.\n")
        report.pages.append(atomic_write(out / f"{page}.md", text if page in VERBATIM and error is None
                                         else places.portable(text)))
    return report
