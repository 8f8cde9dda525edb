"""`rlvr-run`: parses arguments, calls library functions, prints. Nothing else.

Each command is one `_cmd_*` function; argument definitions live in one
`_add_*` function per area so they stay small and separate.
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable, Optional

from rich.console import Console
from rich.text import Text

from engine.errors import UserError

console = Console()
err_console = Console(stderr=True)

SUBCOMMANDS = ("validate", "status", "judge", "data", "report", "run")


# ---------------------------------------------------------------- run / validate / status
def _add_run_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="validate, plan, materialize and execute a spec (the default verb)")
    p.add_argument("spec", help="experiment-matrix spec (YAML)")
    p.add_argument("--dry-run", action="store_true", help="print the plan; write nothing")
    p.add_argument("--runs-dir", default="runs", help="output root (default: runs/)")
    p.add_argument("--gpus", type=int, default=0, help="GPUs available to the local executor")
    p.add_argument("--cpus", type=int, default=None, help="CPU slots (default: all cores)")
    p.add_argument("--skip-unmet", action="store_true",
                   help="run what fits; runs needing more GPUs than --gpus fail, their descendants are blocked")
    p.set_defaults(func=_cmd_run)

    p = sub.add_parser("validate", help="check a spec: errors with file:line:col, or ok")
    p.add_argument("spec")
    p.set_defaults(func=_cmd_validate)

    p = sub.add_parser("status", help="what ran, what runs, what is blocked")
    p.add_argument("spec", nargs="?", help="limit to this spec")
    p.add_argument("--runs-dir", default="runs")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_status)


def _cmd_run(args: argparse.Namespace) -> int:
    from engine.errors import SpecError
    from engine.pipeline import run_spec

    if args.gpus < 0 or (args.cpus is not None and args.cpus < 1):
        raise UserError("--gpus must be >= 0 and --cpus >= 1")
    try:
        outcome = run_spec(args.spec, runs_dir=args.runs_dir, dry_run=args.dry_run, gpus=args.gpus,
                           cpus=args.cpus, skip_unmet=args.skip_unmet, console=console)
    except SpecError as exc:
        err_console.print(str(exc), markup=False, highlight=False, soft_wrap=True)
        return 1
    return outcome.exit_code


def _cmd_validate(args: argparse.Namespace) -> int:
    from engine.errors import SpecError
    from engine.validate import validate_spec

    try:
        validated = validate_spec(args.spec)
    except SpecError as exc:
        err_console.print(str(exc), markup=False, highlight=False, soft_wrap=True)
        return 1
    for warning in validated.warnings:
        err_console.print(Text("warning: ", style="bold yellow") + Text(warning, style="yellow"), soft_wrap=True)
    for waiver in validated.waivers:
        console.print(Text(f"waived rule {waiver.rule} at {waiver.where}: {waiver.what} — reason: {waiver.reason}",
                           style="magenta"), soft_wrap=True)
    console.print(Text(f"ok: {validated.summary()}", style="green"), soft_wrap=True)
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    from engine.status import collect_status, render_status

    report = collect_status(args.runs_dir, args.spec)
    if args.json:
        print(report.model_dump_json(indent=2))
    else:
        console.print(render_status(report))
    return 0


# ---------------------------------------------------------------- judge
def _add_judge_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("judge", help="judge completions against problems' tests")
    p.add_argument("--problems", required=True, help="problems file (HumanEval/MBPP/CodeContests raw or normalized)")
    p.add_argument("--samples", required=True, help="JSONL with problem_id and completion")
    p.add_argument("--out", required=True, help="verdict records (JSONL)")
    p.set_defaults(func=_cmd_judge)


def _cmd_judge(args: argparse.Namespace) -> int:
    raise UserError("`judge` is not wired yet")


# ---------------------------------------------------------------- data
def _add_data_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("data", help="id lists, leakage report, exports, preference pairs")
    p.set_defaults(func=lambda a: (p.print_help(), 0)[1])
    p.add_subparsers(dest="data_cmd")


# ---------------------------------------------------------------- entry
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlvr-run",
        description="Declarative experiment runner for RLVR post-training of code models.",
        epilog="`rlvr-run SPEC [--dry-run]` is short for `rlvr-run run SPEC`.",
    )
    sub = parser.add_subparsers(dest="command")
    _add_run_parsers(sub)
    _add_judge_parser(sub)
    _add_data_parsers(sub)
    return parser


def _normalize_argv(argv: list[str]) -> list[str]:
    """Make `rlvr-run SPEC ...` mean `rlvr-run run SPEC ...`."""
    if argv and not argv[0].startswith("-") and argv[0] not in SUBCOMMANDS:
        return ["run", *argv]
    return argv


def main(argv: Optional[list[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(_normalize_argv(list(sys.argv[1:] if argv is None else argv)))
    func: Optional[Callable[[argparse.Namespace], int]] = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        return func(args)
    except UserError as exc:
        err_console.print(Text("error: ", style="bold red") + Text(str(exc)), highlight=False)
        return 2
    except KeyboardInterrupt:
        err_console.print("[yellow]interrupted[/]")
        return 130


if __name__ == "__main__":
    sys.exit(main())
