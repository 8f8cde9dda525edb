"""`rlvr-run judge`: judge a file of completions against a file of problems."""

from __future__ import annotations

import argparse
from pathlib import Path

from engine.errors import UserError
from engine.judge.config import JudgeConfig


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--problems", required=True, help="problems file (HumanEval/MBPP/CodeContests raw or normalized)")
    p.add_argument("--samples", required=True, help="JSONL with problem_id and completion")
    p.add_argument("--out", required=True, help="verdict records (JSONL)")
    p.add_argument("--mode", choices=("dense", "sparse"), default="dense",
                   help="sparse stops each sample at its first failing test (only `accepted` is exact)")
    add_judge_options(p)
    p.add_argument("--limit", type=int, default=None, help="judge only the first N samples")
    p.set_defaults(func=command)


# The judge's settings and their defaults, for every command that judges (`judge`, `data pairs`).
JUDGE_DEFAULTS = {"backend": "local", "url": None, "timeout": 6.0, "memory_mb": 1024, "workers": None,
                  "compare": "tokens", "no_cache": False, "allow_unsandboxed": False}


def add_judge_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backend", choices=("local", "sandbox_fusion"),
                   help="local sandbox (default) or a SandboxFusion server (needs --url)")
    p.add_argument("--url", help="SandboxFusion endpoint, e.g. http://host:8080/run_code (sandbox_fusion backend)")
    p.add_argument("--timeout", type=float, help="seconds of CPU per test (default 6)")
    p.add_argument("--memory-mb", type=int, help="memory per sample in MiB (default 1024)")
    p.add_argument("--workers", type=int,
                   help="parallel samples (local: default all cores) or requests in flight (sandbox_fusion)")
    p.add_argument("--compare", choices=("tokens", "float", "exact"), help="stdio output comparison")
    p.add_argument("--no-cache", action="store_true", help="judge identical programs again")
    p.add_argument("--allow-unsandboxed", action="store_true",
                   help="judge even where the network and the filesystem cannot be isolated (the records say so)")
    p.set_defaults(**JUDGE_DEFAULTS)


def judge_options_given(args: argparse.Namespace) -> list[str]:
    """The judge options set to something other than their defaults (as `--flag`)."""
    return [f"--{name.replace('_', '-')}" for name, default in JUDGE_DEFAULTS.items() if getattr(args, name) != default]


def judge_config(args: argparse.Namespace, *, sparse: bool = False) -> JudgeConfig:
    if args.backend == "sandbox_fusion" and not args.url:
        raise UserError("--backend sandbox_fusion needs --url (e.g. http://host:8080/run_code)")
    return JudgeConfig(
        backend=args.backend, url=args.url, timeout_s=args.timeout, memory_mb=args.memory_mb,
        compare=args.compare, stop_on_first_failure=sparse, cache=not args.no_cache,
        allow_unsandboxed=args.allow_unsandboxed,
        **({"workers": args.workers} if args.workers else {}),
    )


def command(args: argparse.Namespace) -> int:
    config = judge_config(args, sparse=args.mode == "sparse")
    if config.backend == "local":
        # The workers start on the other cores while this process imports what reads the files,
        # judges and draws (half a second here, as long as the workers' own start).
        from engine.judge.local.spawn import start_early_for

        start_early_for(config)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from engine.cli.views import console, err_console, judge_tables, text_column
    from engine.judge.batch import judge_file

    columns = (text_column("judging"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=err_console, transient=True) as bar:
        task = bar.add_task("judge", total=None)
        summary = judge_file(
            Path(args.problems), Path(args.samples), Path(args.out), config, limit=args.limit,
            progress=lambda done, total: bar.update(task, completed=done, total=total),
        )
    for table in judge_tables(summary):
        console.print(table)
    console.print(f"wrote {summary.samples} verdict records to {args.out}")
    return 0
