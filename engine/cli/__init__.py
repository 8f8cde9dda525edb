"""`rlvr-run`: one module per verb; each parses its arguments, calls the library and renders.

`main` alone maps exceptions to exit codes: a spec error 1, any other user error 2
(with the `fix:` line its verb writes), Ctrl-C 130.
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable, Optional

from rich.text import Text

from engine.cli import data, evaluate, judge, price, report, run, status, validate
from engine.cli.views import err_console
from engine.errors import SpecError, UserError

VERBS = (run, validate, status, price, report, evaluate, judge, data)
SUBCOMMANDS = tuple(verb.NAME for verb in VERBS)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlvr-run",
        description="Declarative experiment runner for RLVR post-training of code models.",
        epilog="`rlvr-run SPEC [--dry-run]` is short for `rlvr-run run SPEC`.",
    )
    sub = parser.add_subparsers(dest="command")
    for verb in VERBS:
        verb.add_parser(sub)
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
    except SpecError as exc:
        err_console.print(str(exc), markup=False, highlight=False, soft_wrap=True)
        return 1
    except UserError as exc:
        err_console.print(Text("error: ", style="bold red") + Text(str(exc)), highlight=False)
        fix = getattr(args, "fix_for", lambda e: None)(exc)
        if fix:
            err_console.print(f"fix: {fix}", highlight=False, soft_wrap=True)
        return 2
    except KeyboardInterrupt:
        err_console.print("[yellow]interrupted[/]")
        return 130
