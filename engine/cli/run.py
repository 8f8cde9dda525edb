"""`rlvr-run run SPEC` (also `rlvr-run SPEC`): validate, plan, materialize and execute."""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from rich.text import Text

from engine.cli.views import RunProgress, console, describe_plan, err_console, print_results
from engine.errors import UserError
from engine.runs.runlock import RunLock

if TYPE_CHECKING:
    from engine.plan.model import Run
    from engine.runs.pipeline import Event, Planned

UNMET_SHOWN = 8


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", help="experiment-matrix spec (YAML)")
    p.add_argument("--dry-run", action="store_true", help="print the plan; write nothing")
    p.add_argument("--runs-dir", default="runs", help="output root (default: runs/)")
    p.add_argument("--gpus", type=int, default=None,
                   help="GPUs the local executor may use (default: every GPU this machine shows, within "
                        "CUDA_VISIBLE_DEVICES when it is set; 0 on a CPU machine); with --dry-run, the GPUs "
                        "the forecast packs the study on (default: one node)")
    p.add_argument("--nodes", type=int, default=1, help="with --dry-run: nodes the --gpus are spread over")
    p.add_argument("--gpu-type", default=None,
                   help="with --dry-run: hardware profile from registry/hardware.yaml (default: h100, or cpu "
                        "when no run needs a GPU)")
    p.add_argument("--price", type=float, default=None, help="with --dry-run: cost of one GPU-hour")
    p.add_argument("--currency", default=None, help="with --dry-run: what --price is in, shown with each cost "
                                                    "(e.g. USD, EUR, $)")
    p.add_argument("--hardware", default=None, metavar="FILE",
                   help="with --dry-run: a hardware profiles file of your own (as registry/hardware.yaml), "
                        "its profiles added over the shipped ones")
    p.add_argument("--json", action="store_true", help="with --dry-run: the plan's forecast as JSON on stdout")
    p.add_argument("--detail", action="store_true",
                   help="with --dry-run: also list every run (id, parents, state) and every comparison's "
                        "detectable difference")
    p.add_argument("--cpus", type=int, default=None, help="CPU slots (default: all cores)")
    p.add_argument("--executor", choices=("local", "ray", "slurm"), default=None,
                   help="where runs execute (default: the spec's executor.kind, else local)")
    p.add_argument("--address", default=None,
                   help="the Ray cluster's dashboard address, e.g. http://head:8265 (with --executor ray)")
    p.add_argument("--markdown", action="store_true",
                   help="print the final results table as Markdown (the default when output is not a terminal)")
    p.add_argument("--skip-unmet", action="store_true",
                   help="run what fits; runs needing more GPUs than --gpus fail, their descendants are blocked")
    p.set_defaults(func=command, fix_for=fix_for)


def command(args: argparse.Namespace) -> int:
    if (args.gpus is not None and args.gpus < 0) or (args.cpus is not None and args.cpus < 1):
        raise UserError("--gpus must be >= 0 and --cpus >= 1")
    if args.json and not args.dry_run:
        raise UserError("--json goes with --dry-run (a run's progress is `rlvr-run status --json`)")
    if args.detail and not args.dry_run:
        raise UserError("--detail goes with --dry-run (a run's states are `rlvr-run status`)")
    if args.currency is not None and args.price is None:
        raise UserError("--currency names what --price is in: pass --price too (e.g. --price 2.5 --currency USD)")
    if args.price is not None and not (math.isfinite(args.price) and args.price >= 0):
        raise UserError(f"--price {args.price:g}: the cost of one GPU-hour is a finite number >= 0 (e.g. --price 2.5)")
    if args.currency is not None and not args.currency.strip():
        raise UserError("--currency is empty: name what --price is in (e.g. --currency USD) or leave it out")
    if not args.dry_run and Path(args.runs_dir).is_dir():
        # Another runner is said at once: before the validation, the plan and even the imports
        # behind them (seconds); `run_spec` takes the lock for good before writing anything.
        RunLock(Path(args.runs_dir)).acquire().release()
    from engine.report.generate import write_reports
    from engine.runs.pipeline import run_spec

    view = _View(args.runs_dir, quiet=args.json)
    try:
        outcome = run_spec(args.spec, runs_dir=args.runs_dir, dry_run=args.dry_run, gpus=args.gpus,
                           cpus=args.cpus, skip_unmet=args.skip_unmet, executor=args.executor,
                           address=args.address, on_event=view.on_event)
    finally:
        view.close()
    if outcome.validated is not None:
        _print_dry_run(args, outcome, view.planned)
    if outcome.result is not None:
        result = outcome.result
        counts = ", ".join(f"{state} {n}" for state, n in sorted(result.counts().items()))
        if result.interrupted_by:
            # On stderr first: the reader of stdout may be what went away (`rlvr-run SPEC | head`).
            err_console.print(interrupted_summary(outcome.plan.spec_name, result, args.spec), highlight=False,
                              soft_wrap=True)
        console.print(f"{outcome.plan.spec_name}: {counts}" + (" (interrupted)" if result.interrupted_by else ""))
        # kept by the next rerun; an interrupted study does not wait for it
        reports = write_reports(args.runs_dir, outcome.plan.spec_name, settle=not result.interrupted_by)
        for report in reports:
            print_results(console, report, markdown=args.markdown)
            console.print(f"result pages: {report.dir / 'index.md'}", highlight=False)
        failed = [f"{page}.md ({why})" for r in reports for page, why in r.failed.items()]
        if failed and outcome.exit_code == 0:
            raise UserError(f"result pages that could not be built: {'; '.join(failed)}\n"
                            "  fix: repair what the error names and run `rlvr-run report` again")
    return outcome.exit_code


def interrupted_summary(spec_name: str, result, spec: str) -> str:
    """One line: what stopped the runner, how its runs were left, and how to go on."""
    import signal

    counts = ", ".join(f"{n} {state}" for state, n in sorted(result.counts().items()))
    return (f"rlvr-run: {spec_name} interrupted by {signal.Signals(result.interrupted_by).name}: {counts}; "
            f"no run left running; `rlvr-run {spec}` resumes them")


def _print_dry_run(args: argparse.Namespace, outcome, planned: Optional[Planned]) -> None:
    """The plan and its forecast, summary first (see `describe_plan`)."""
    from engine.price.study import price_plan

    priced = price_plan(outcome.plan, outcome.validated, gpu_type=args.gpu_type, gpus=args.gpus or None,
                        nodes=args.nodes, cpus=args.cpus, price=args.price, currency=args.currency,
                        executor=args.executor, hardware=Path(args.hardware) if args.hardware else None)
    if args.json:
        print(priced.model_dump_json(indent=2))
        return
    unmet = unmet_warning(planned.unmet, planned.gpus) if planned is not None and planned.unmet else []
    console.print(describe_plan(outcome.plan, planned.states if planned else {}, priced, unmet=unmet,
                                detail=args.detail))


def fix_for(exc: UserError) -> Optional[str]:
    pipeline = sys.modules.get("engine.runs.pipeline")
    if pipeline is None:  # not imported: the error is none of its (a busy runs folder, a bad flag)
        return None
    if isinstance(exc, pipeline.UnmetResources):
        need = max(r.resources.gpus for r in exc.runs)
        return (f"pass --gpus {need} on a machine that has them, run the spec on a cluster, or pass --skip-unmet "
                "to run the rest (these runs are then failed and their descendants blocked)")
    if isinstance(exc, pipeline.UnverifiedData):
        return ("make the datasets loadable here (connect to the Hugging Face Hub once — problems are cached — "
                "or set RLVR_RUN_DATA_MIRROR to a folder of the raw files), then run again; "
                "`rlvr-run validate SPEC` shows the reasons")
    return None


def unmet_lines(unmet: list[Run], gpus: int) -> str:
    lines = [f"{len(unmet)} run(s) need more GPUs than this machine offers (--gpus {gpus}):"]
    lines += [f"  {r.id} {r.label} needs {r.resources.gpus} GPU(s)" for r in unmet[:UNMET_SHOWN]]
    if len(unmet) > UNMET_SHOWN:
        lines.append(f"  … and {len(unmet) - UNMET_SHOWN} more (`--dry-run --detail` lists every run)")
    return "\n".join(lines)


def unmet_warning(unmet: list[Run], gpus: int) -> list[Text]:
    from engine.runs.pipeline import UnmetResources

    return [Text("warning: ", style="yellow") + Text(unmet_lines(unmet, gpus)),
            Text(f"fix: {fix_for(UnmetResources(unmet, gpus))}")]


class _View:
    """Renders the pipeline's events: a spinner while validating, the plan, then run progress."""

    def __init__(self, runs_dir: str, *, quiet: bool = False) -> None:
        self.quiet = quiet  # --json: stdout holds the JSON alone
        self.status = err_console.status("validating", spinner="dots")
        self.status.start()
        self.progress: Optional[RunProgress] = None
        self.planned: Optional[Planned] = None  # a dry run's plan, printed with its forecast
        self.pages = _Pages(runs_dir)

    def on_event(self, event: Event) -> None:
        from engine.runs.lineage import FINISHED
        from engine.runs.pipeline import Executing, Planned, Resuming, RunChanged, Validating

        if isinstance(event, Validating):
            self.status.update(Text(f"validating: {event.step}"))
        elif isinstance(event, Planned):
            self.status.stop()
            self.pages.spec = event.plan.spec_name
            if event.dry_run:
                self.planned = event
            elif event.unmet:
                for line in unmet_warning(event.unmet, event.gpus):
                    console.print(line, highlight=False)
        elif isinstance(event, Executing):
            if event.todo == 0:
                console.print(f"nothing to do: every run of {event.plan.spec_name} has already succeeded "
                              "(`rlvr-run status` lists them; change the spec to plan new runs)", highlight=False)
            self.progress = RunProgress(console, event.plan, total=event.todo)
        elif isinstance(event, Resuming):
            label = self.progress.labels.get(event.run_id, event.run_id) if self.progress else event.run_id
            err_console.print(f"{label}: {event.what}", highlight=False, markup=False)
        elif isinstance(event, RunChanged) and self.progress is not None:
            self.progress.change(event.run_id, event.state, event.reason)
            if event.state in FINISHED:
                self.pages.refresh()

    def close(self) -> None:
        try:
            self.status.stop()
            if self.progress is not None:
                self.progress.stop()
        except BrokenPipeError:  # the reader left; what the runner recorded is what matters
            pass


class _Pages:
    """The result pages, refreshed as runs finish: at most every REFRESH_S (without the failure
    cases, which judge again), so a long study's pages stay current without slowing it."""

    REFRESH_S = 30.0

    def __init__(self, runs_dir: str) -> None:
        self.runs_dir, self.spec, self.last = runs_dir, None, 0.0

    def refresh(self) -> None:
        if self.spec is None or time.monotonic() - self.last < self.REFRESH_S:
            return
        self.last = time.monotonic()
        from engine.report.generate import write_reports

        write_reports(self.runs_dir, self.spec, failures=False)
