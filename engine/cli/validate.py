"""`rlvr-run validate SPEC`: every check a dry run makes, every problem at once, or `ok`."""

from __future__ import annotations

import argparse

from rich.text import Text

from engine.cli.views import console, err_console
from engine.runs.preflight import preflight


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec")
    p.add_argument("--no-content", action="store_true",
                   help="skip isolation rule 3 (content leakage), which reads every dataset")
    p.set_defaults(func=command)


def command(args: argparse.Namespace) -> int:
    with err_console.status("validating", spinner="dots") as status:
        checked = preflight(args.spec, content=not args.no_content,
                            on_step=lambda step: status.update(Text(f"validating: {step}")))
    validated = checked.validated
    from engine.price.study import detect_warnings

    for warning in [*checked.plan.warnings, *detect_warnings(checked.plan, validated)]:  # the plan's hold the spec's
        err_console.print(Text("warning: ", style="bold yellow") + Text(warning, style="yellow"), soft_wrap=True)
    for waiver in validated.waivers:
        console.print(Text(f"waived rule {waiver.rule} at {waiver.where}: {waiver.what} — reason: {waiver.reason}",
                           style="magenta"), soft_wrap=True)
    console.print(Text(f"ok: {validated.summary()}; {len(checked.plan.runs)} runs", style="green"), soft_wrap=True)
    return 0
