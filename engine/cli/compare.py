"""`rlvr-run compare A B`: two studies' shared cells side by side, with Δ (B − A) and its interval
where the id lists, protocols and judge versions match, and why not where they do not. A and B
are each a spec (file or name, in --runs-dir) or a runs folder holding one study's lineage.sqlite."""

from __future__ import annotations

import argparse
from pathlib import Path

from engine.cli.views import console
from engine.errors import UserError
from engine.report.compare import Side, compare, load, table
from engine.runs.lineage import LINEAGE_FILE
from engine.runs.status import spec_name_of


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("a", metavar="A", help="a spec file or name, or a runs folder")
    p.add_argument("b", metavar="B", help="a spec file or name, or a runs folder")
    p.add_argument("--runs-dir", default="runs", help="where a spec's runs are (default: runs/)")
    p.set_defaults(func=command)


def side(given: str, runs_dir: str) -> Side:
    folder = Path(given)
    if folder.is_dir() and (folder / LINEAGE_FILE).is_file():
        return Side(folder, "")
    return Side(Path(runs_dir), spec_name_of(given))


def command(args: argparse.Namespace) -> int:
    a, b = load(side(args.a, args.runs_dir)), load(side(args.b, args.runs_dir))
    shared = compare(a, b)
    if not shared:
        raise UserError(f"{a.name} and {b.name} share no cell (no phase evaluated on a dataset of the same name in "
                        "both)\n  fix: compare studies with phases and datasets in common")
    console.print(table(a, b, shared).markdown(), markup=False, highlight=False, soft_wrap=True)
    return 0
