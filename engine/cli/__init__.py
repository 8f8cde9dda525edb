"""`rlvr-run`: one module per verb; each parses its arguments, calls the library and renders.

The verb table below names each verb's module without importing it: `rlvr-run --help`
loads no verb, and a command loads only its own (the library behind `data` or `run`
costs seconds to import; `status` and `--help` must answer at once).

`main` alone maps exceptions to exit codes: a spec error 1, any other user error 2
(with the `fix:` line its verb writes), Ctrl-C 130, a reader that went away (`| head`) 141.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Callable, Iterable, Optional

# verb → (its module, its one-line help). Each module defines `add_arguments(parser)`.
VERBS: dict[str, tuple[str, str]] = {
    "run": ("engine.cli.run", "validate, plan, materialize and execute a spec (the default verb)"),
    "validate": ("engine.cli.validate", "check a spec: errors with file:line:col, or ok"),
    "status": ("engine.cli.status", "what ran, what runs, what is blocked, and the time left"),
    "price": ("engine.cli.price", "a study's forecast against its actual durations; --fit refits a hardware profile"),
    "report": ("engine.cli.report", "write the result pages (Markdown + PNG) from lineage"),
    "evaluate": ("engine.cli.evaluate",
                 "evaluate a run directory's model on its datasets (what an eval run's launch.sh runs)"),
    "judge": ("engine.cli.judge", "judge completions against problems' tests"),
    "data": ("engine.cli.data", "id lists, leakage report, exports, preference pairs"),
    "export": ("engine.cli.export", "a study's tables, comparisons and run metrics as tidy CSV or JSON rows"),
    "compare": ("engine.cli.compare", "two studies' shared cells side by side, with Δ where comparable"),
}
SUBCOMMANDS = tuple(VERBS)
# Verbs that may load a model in this process (rule 3's encoder, the tiny base model): the
# libraries' own progress bars and warnings would land between rlvr-run's lines. `evaluate` is
# what a run's launch.sh runs: its output is the run's log, where they belong.
LOADS_MODELS = ("run", "validate", "data")


def build_parser(verbs: Iterable[str] = SUBCOMMANDS) -> argparse.ArgumentParser:
    """The parser with the arguments of `verbs` (their modules imported); every other verb is
    listed with its help only."""
    parser = argparse.ArgumentParser(
        prog="rlvr-run",
        description="Declarative experiment runner for RLVR post-training of code models.",
        epilog="`rlvr-run SPEC [--dry-run]` is short for `rlvr-run run SPEC`.",
    )
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="command")
    chosen = set(verbs)
    for name, (module, help_text) in VERBS.items():
        verb = sub.add_parser(name, help=help_text, description=help_text)
        if name in chosen:
            importlib.import_module(module).add_arguments(verb)
    return parser


class _Version(argparse.Action):
    """`--version`, looked up only when asked: importlib.metadata would cost every start a tenth
    of a second, a third of what `--help` may take."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="show program's version number and exit")

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: Optional[str] = None) -> None:
        print(f"rlvr-run {_version()}")
        parser.exit()


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rlvr-run")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def _normalize_argv(argv: list[str]) -> list[str]:
    """Make `rlvr-run SPEC ...` mean `rlvr-run run SPEC ...`."""
    if argv and not argv[0].startswith("-") and argv[0] not in SUBCOMMANDS:
        return ["run", *argv]
    return argv


def quiet_libraries() -> None:
    """Keep transformers' and the Hub's progress bars and logged warnings off this process's
    terminal (they read these variables when first imported); a setting of the user's stays, and
    the runs this process starts get the environment without ours (`run_environment`)."""
    from engine.runs.executors.base import QUIETED_ENV, RUNNER_QUIET_ENV

    ours = [name for name in RUNNER_QUIET_ENV if name not in os.environ]
    os.environ.update({name: RUNNER_QUIET_ENV[name] for name in ours})
    os.environ[QUIETED_ENV] = " ".join(dict.fromkeys([*os.environ.get(QUIETED_ENV, "").split(), *ours]))


def main(argv: Optional[list[str]] = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:
        if not _output_closed():
            raise  # a pipe of the library's own (a worker's): a fault, not the reader leaving
        return _reader_left()


def _main(argv: Optional[list[str]]) -> int:
    argv = _normalize_argv(list(sys.argv[1:] if argv is None else argv))
    parser = build_parser(argv[:1])
    args = parser.parse_args(argv)
    func: Optional[Callable[[argparse.Namespace], int]] = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    if args.command in LOADS_MODELS:
        quiet_libraries()
    from rich.text import Text

    from engine.cli.views import console, err_console
    from engine.errors import SpecError, UserError

    # rich stops with exit status 1 on a closed pipe, which here means a spec error: one way for all
    console.on_broken_pipe = err_console.on_broken_pipe = _pipe_closed  # type: ignore[method-assign]

    try:
        return func(args)
    except SpecError as exc:
        err_console.print(str(exc), markup=False, highlight=False, soft_wrap=True)
        return 1
    except UserError as exc:
        err_console.print(Text("error: ", style="bold red") + Text(str(exc)), highlight=False)
        fix = getattr(args, "fix_for", lambda e: None)(exc)
        if fix:
            err_console.print(Text(f"fix: {fix}"), highlight=False, soft_wrap=True)
        return 2
    except KeyboardInterrupt:
        err_console.print(Text("interrupted", style="yellow"))
        return 130


def _pipe_closed() -> None:
    raise BrokenPipeError


def _output_closed() -> bool:
    """Whether our stdout or stderr is a pipe whose reader has gone (`rlvr-run status | head`)."""
    import select

    for stream in (sys.stdout, sys.stderr):
        try:
            poller = select.poll()
            poller.register(stream.fileno(), select.POLLOUT)
            if any(mask & select.POLLERR for _, mask in poller.poll(0)):
                return True
        except (AttributeError, OSError, ValueError):  # no file descriptor (a test's capture)
            continue
    return False


def _reader_left() -> int:
    """As Unix tools do when the reader of their output goes: stop quietly, with SIGPIPE's status.
    What is still buffered goes nowhere, so the interpreter's last flush cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        try:
            os.dup2(devnull, stream.fileno())
        except (AttributeError, OSError, ValueError):
            continue
    return 128 + 13
