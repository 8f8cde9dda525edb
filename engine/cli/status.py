"""`rlvr-run status [SPEC]`: with a spec, each running run's progress and ETA and the study's
remaining wall time first; then the counts per state; then each run's state, start, duration and
headline metric (queued and planned runs as a count unless --all). `--watch` refreshes it, fitted
to the terminal's height."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from engine.cli.status_view import render_eta, render_status
from engine.cli.views import console
from engine.errors import UserError
from engine.runs.status import collect_status, edited_since_run


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", nargs="?", help="limit to this spec (and show its progress and time left)")
    p.add_argument("--runs-dir", default="runs", help="output root (default: runs/)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--all", action="store_true", dest="every_run",
                   help="also list the queued and planned runs (by default a count)")
    p.add_argument("--watch", action="store_true", help="refresh live until every run of the current plan has finished (Ctrl-C stops)")
    p.add_argument("--every", type=float, default=5.0, help="with --watch: seconds between refreshes (default 5)")
    p.add_argument("--gpus", type=int, default=None, help="GPUs the executor has, for the time left (default: one node)")
    p.add_argument("--cpus", type=int, default=None, help="CPU slots the executor has (default: this machine's cores)")
    p.set_defaults(func=command)


ACTIVE = ("running", "queued", "planned")


def _eta(args: argparse.Namespace, report):
    """The time left, only while some run of one spec is still to finish: a finished study has none,
    and forecasting it would parse the registry for a line that says 0s."""
    specs = {r.spec_name for r in report.runs}
    if len(specs) != 1 or not any(r.state.value in ACTIVE for r in report.runs):
        return None
    from engine.price.progress import study_eta
    from engine.runs.lineage import LINEAGE_FILE, open_lineage

    with open_lineage(Path(args.runs_dir) / LINEAGE_FILE, readonly=True) as lineage:
        try:
            return study_eta(lineage, specs.pop(), gpus=args.gpus, cpus=args.cpus)
        except UserError:  # no calibrated profile: the states still show
            return None


def _view(args: argparse.Namespace):
    report = collect_status(args.runs_dir, args.spec)
    eta = _eta(args, report)
    return report, eta


def command(args: argparse.Namespace) -> int:
    if args.every <= 0:
        raise UserError("--every must be a positive number of seconds")
    report, eta = _view(args)
    # a spec file edited since its study last ran: what follows is the plan it ran with
    edited = edited_since_run(args.runs_dir, args.spec) if args.spec else ""
    if args.json:
        extra = {**({"eta": eta.model_dump(mode="json")} if eta else {}), **({"edited": edited} if edited else {})}
        print(json.dumps({**report.model_dump(mode="json"), **extra}, indent=2) if extra else
              report.model_dump_json(indent=2))
        return 0
    if edited:
        from rich.text import Text

        console.print(Text(f"note: {edited}", style="yellow"))
    if not args.watch:
        console.print(render_status(report, render_eta(eta) if eta else None, every_run=args.every_run))
        return 0
    from rich.live import Live

    def view(report, eta):
        if not report.runs:
            from rich.text import Text

            return Text(f"{report.note}\nwaiting for its first run (Ctrl-C stops)")
        return render_status(report, render_eta(eta) if eta else None, fit=console, every_run=args.every_run)

    with Live(view(report, eta), console=console, refresh_per_second=1, transient=False) as live:
        # `runs` is each spec's current plan: a run an edit no longer plans, left queued by a
        # killed runner, is listed apart and never waited for. A study whose runner has not
        # recorded its first run yet (it validates and plans first) is waited for.
        while not report.runs or any(r.state.value in ACTIVE for r in report.runs):
            time.sleep(args.every)
            try:
                report, eta = _view(args)
            except UserError:  # a runner creating or upgrading the lineage before its first run
                if report.runs:
                    raise
                continue
            live.update(view(report, eta))
    return 0
