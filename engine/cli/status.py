"""`rlvr-run status [SPEC]`: each run's state, start, duration and headline metric."""

from __future__ import annotations

import argparse

from engine.cli.views import console, render_status
from engine.runs.status import collect_status


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", nargs="?", help="limit to this spec")
    p.add_argument("--runs-dir", default="runs", help="output root (default: runs/)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=command)


def command(args: argparse.Namespace) -> int:
    report = collect_status(args.runs_dir, args.spec)
    if args.json:
        print(report.model_dump_json(indent=2))
    else:
        console.print(render_status(report))
    return 0
