"""`rlvr-run export SPEC --format csv|json`: the study's numbers as tidy rows (one value per row:
the headline table, every declared comparison, every run's metrics), on stdout or into a file."""

from __future__ import annotations

import argparse
from pathlib import Path

from engine.errors import UserError
from engine.files import atomic_write
from engine.report.export import FORMATS, export_rows, render
from engine.report.study import load_study
from engine.runs.lineage import LINEAGE_FILE, open_lineage
from engine.runs.status import spec_name_of


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", help="a spec file or name that ran")
    p.add_argument("--format", choices=FORMATS, default="csv", help="csv (default) or json")
    p.add_argument("--out", default=None, help="write here instead of stdout")
    p.add_argument("--runs-dir", default="runs", help="output root (default: runs/)")
    p.set_defaults(func=command)


def command(args: argparse.Namespace) -> int:
    name = spec_name_of(args.spec)
    path = Path(args.runs_dir) / LINEAGE_FILE
    if not path.is_file():
        raise UserError(f"nothing to export: no {path}\n  fix: run the spec first (`rlvr-run SPEC`), or pass --runs-dir")
    with open_lineage(path, readonly=True) as lineage:
        if not lineage.runs(spec_name=name):
            raise UserError(f"nothing to export: no runs of {name!r} in {path}\n"
                            "  fix: run the spec first (`rlvr-run SPEC`), or pass --runs-dir")
        study = load_study(lineage, name)
    text = render(export_rows(study), args.format)
    if args.out:
        atomic_write(Path(args.out), text)
    else:
        print(text, end="")
    return 0
