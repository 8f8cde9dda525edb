"""`runs/<spec>/report/`: the result pages, regenerated from lineage and run outputs alone.

Each page is a Jinja template in `templates/report/` filled with tables (already Markdown)
and figure paths (`pages`); pages and figures are written next to each other, atomically, so a
reader never sees half a page. Pages nothing has changed under are kept as they are (`stamp`):
a rerun with nothing to do does not make them again.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

from engine.files import atomic_write
from engine.report import stamp
from engine.report.study import Study, load_study
from engine.report.tables import Table
from engine.runs.lineage import LINEAGE_FILE, open_lineage

REPORT_DIR = "report"
PAGES = ("index", "results", "ablations", "matched-cost", "errors", "cost", "curves", "repair", "failures",
         "isolation", "runs")
# The headline and figures of pages kept unchanged (`stamp`), for the console and the caller.
KEPT_FILE = ".headline.json"


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


def write_reports(runs_dir: Path, spec: Optional[str] = None, *, failures: bool = True,
                  settle: bool = False) -> list[Report]:
    """The pages of `spec` (every spec in the lineage when None); `settle`: see `stamp.pages_digest`."""
    path = Path(runs_dir) / LINEAGE_FILE
    if not path.is_file():
        return []
    with open_lineage(path, readonly=True) as lineage:
        names = [spec] if spec else lineage.spec_names()
        studies = [load_study(lineage, name) for name in names if lineage.runs(spec_name=name)]
    return [write_report(study, Path(runs_dir) / study.name / REPORT_DIR, failures=failures, settle=settle)
            for study in studies]


def write_report(study: Study, out: Path, *, failures: bool = True, settle: bool = False) -> Report:
    """The pages of `study` in `out`; those already there are kept when nothing they are made from
    changed since (`stamp.pages_digest`), the same bytes a regeneration would write."""
    began = time.perf_counter()
    digest = stamp.pages_digest(study, out, failures=failures, settle=settle)
    index = out / "index.md"
    kept = _kept(study, out) if digest is not None and stamp.current(index, digest) else None
    if kept is not None:
        kept.seconds = time.perf_counter() - began
        return kept
    stamp.unseal(index)
    from engine.report import pages  # matplotlib, jinja2: only when pages are made

    report = pages.build(study, out, Report(spec=study.name, dir=out), PAGES, failures=failures)
    if digest is not None and not report.failed and not _unread(out):
        table = report.headline_table
        atomic_write(out / KEPT_FILE, json.dumps({"headline": report.headline, "table": asdict(table) if table else None,
                                                  "images": [str(p.relative_to(out)) for p in report.images]}))
        stamp.seal(index, digest)
    report.seconds = time.perf_counter() - began
    return report


def _unread(out: Path) -> bool:
    """Whether the failures page says a run's problems could not be read: what it reads (a data
    cache, a mirror, the hub) is outside what the stamp covers, so such pages are made again."""
    from engine.report.failures import UNREAD

    try:
        return UNREAD in (out / "failures.md").read_text(encoding="utf-8")
    except OSError:
        return False


def _kept(study: Study, out: Path) -> Optional[Report]:
    """The report of pages kept as they are, or None when any of them is missing."""
    try:
        saved = json.loads((out / KEPT_FILE).read_text())
        report = Report(spec=study.name, dir=out, pages=[out / f"{page}.md" for page in PAGES],
                        images=[out / name for name in saved["images"]], headline=saved["headline"],
                        headline_table=Table(**saved["table"]) if saved["table"] else None)
    except (OSError, ValueError, TypeError, KeyError):
        return None
    return report if all(p.is_file() for p in (*report.pages, *report.images)) else None
