"""`rlvr-run report [SPEC]`: regenerate the result pages under runs/<spec>/report/."""

from __future__ import annotations

import argparse

from engine.cli.views import console
from engine.errors import UserError
from engine.report.generate import write_reports
from engine.runs.status import edited_since_run, spec_name_of


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", nargs="?", help="a spec file or name (default: every spec that ran)")
    p.add_argument("--runs-dir", default="runs", help="output root (default: runs/)")
    p.set_defaults(func=command)


def command(args: argparse.Namespace) -> int:
    name = spec_name_of(args.spec) if args.spec else None
    reports = write_reports(args.runs_dir, name)
    if not reports:
        raise UserError(f"nothing to report: no runs{f' of {name!r}' if name else ''} in {args.runs_dir}/lineage.sqlite\n"
                        "  fix: run the spec first (`rlvr-run SPEC`), or pass --runs-dir")
    if args.spec and (edited := edited_since_run(args.runs_dir, args.spec)):
        console.print(f"note: {edited}", style="yellow", highlight=False, markup=False)
    for report in reports:
        console.print(f"{report.spec}: {len(report.pages)} pages, {len(report.images)} figures in "
                      f"{report.seconds:.1f} s → {report.dir / 'index.md'}", highlight=False)
    failed = [f"{r.spec}: {page}.md could not be built: {why}" for r in reports for page, why in r.failed.items()]
    if failed:
        raise UserError("\n".join(failed) + "\n  fix: the other pages are written; the error names what the "
                        "failed page could not read (a run's outputs or lineage), repair it and run `rlvr-run report` again")
    return 0
