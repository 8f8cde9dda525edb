"""`rlvr-run`: parses arguments, calls library functions, prints. Nothing else.

Each command is one `_cmd_*` function; argument definitions live in one
`_add_*` function per area so they stay small and separate.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from typing import Callable, Optional

from rich.console import Console
from rich.text import Text

from engine.errors import UserError

PIPE_WIDTH = 132  # rich assumes 80 columns off a terminal, which folds plan and status tables


def _console(*, stderr: bool = False) -> Console:
    out = Console(stderr=stderr)
    if not out.is_terminal:
        out.width = max(out.width, PIPE_WIDTH)
    return out


console = _console()
err_console = _console(stderr=True)

SUBCOMMANDS = ("validate", "status", "judge", "data", "run")


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
    p.add_argument("--no-content", action="store_true",
                   help="skip isolation rule 3 (content leakage), which reads every dataset")
    p.set_defaults(func=_cmd_validate)

    p = sub.add_parser("status", help="what ran, what runs, what is blocked")
    p.add_argument("spec", nargs="?", help="limit to this spec")
    p.add_argument("--runs-dir", default="runs", help="output root (default: runs/)")
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
        with err_console.status("validating", spinner="dots") as status:
            validated = validate_spec(args.spec, content=not args.no_content,
                                      on_step=lambda step: status.update(f"validating: {step}"))
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
    p.add_argument("--mode", choices=("dense", "sparse"), default="dense",
                   help="sparse stops each sample at its first failing test (only `accepted` is exact)")
    p.add_argument("--backend", choices=("local", "sandbox_fusion"), default="local",
                   help="local sandbox (default) or a SandboxFusion server (needs --url)")
    p.add_argument("--url", help="SandboxFusion endpoint, e.g. http://host:8080/run_code (sandbox_fusion backend)")
    p.add_argument("--timeout", type=float, default=6.0, help="seconds of CPU per test (default 6)")
    p.add_argument("--memory-mb", type=int, default=1024, help="memory per sample in MiB (default 1024)")
    p.add_argument("--workers", type=int, default=None,
                   help="parallel samples (local: default all cores) or requests in flight (sandbox_fusion)")
    p.add_argument("--compare", choices=("tokens", "float", "exact"), default="tokens", help="stdio output comparison")
    p.add_argument("--limit", type=int, default=None, help="judge only the first N samples")
    p.add_argument("--no-cache", action="store_true", help="judge identical programs again")
    p.set_defaults(func=_cmd_judge)


def _cmd_judge(args: argparse.Namespace) -> int:
    from pathlib import Path

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from engine.judge.api import JudgeConfig
    from engine.judge.batch import judge_file
    from engine.judge.report import summary_tables

    if args.backend == "sandbox_fusion" and not args.url:
        raise UserError("--backend sandbox_fusion needs --url (e.g. http://host:8080/run_code)")
    config = JudgeConfig(
        backend=args.backend, url=args.url, timeout_s=args.timeout, memory_mb=args.memory_mb,
        compare=args.compare, stop_on_first_failure=args.mode == "sparse", cache=not args.no_cache,
        **({"workers": args.workers} if args.workers else {}),
    )
    columns = (TextColumn("judging"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=err_console, transient=True) as bar:
        task = bar.add_task("judge", total=None)
        summary = judge_file(
            Path(args.problems), Path(args.samples), Path(args.out), config, limit=args.limit,
            progress=lambda done, total: bar.update(task, completed=done, total=total),
        )
    for table in summary_tables(summary):
        console.print(table)
    console.print(f"wrote {summary.samples} verdict records to {args.out}")
    return 0


# ---------------------------------------------------------------- data
def _add_data_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("data", help="id lists, leakage report, exports, preference pairs")
    p.set_defaults(func=lambda a: (p.print_help(), 0)[1])
    data = p.add_subparsers(dest="data_cmd")
    from engine.data.export import EXPORT_FORMATS

    dataset_help = "SOURCE[:SPLIT] from the registry (e.g. mbpp:test), or a dataset NAME of --spec"

    q = data.add_parser("show", help="load a dataset: count, kinds, content fingerprint, origin")
    q.add_argument("--dataset", required=True, help=dataset_help)
    q.add_argument("--spec", type=Path, help="spec whose `datasets:` names --dataset")
    q.add_argument("--ids", action="store_true", help="also print every problem id")
    q.add_argument("--out", type=Path, help="write the normalized problems here (JSON Lines, format `problem`)")
    q.set_defaults(func=_cmd_data_show)

    q = data.add_parser("idlist", help="freeze a deterministic, seeded subset of a dataset's ids")
    q.add_argument("--dataset", required=True, help=dataset_help)
    q.add_argument("--spec", type=Path, help="spec whose `datasets:` names --dataset")
    q.add_argument("--n", type=int, required=True, help="how many ids")
    q.add_argument("--seed", type=int, required=True, help="sampling seed")
    q.add_argument("--out", type=Path, required=True, help="list file, e.g. registry/idlists/NAME.txt")
    q.set_defaults(func=_cmd_data_idlist)

    q = data.add_parser("export", help="write a dataset (or a run directory's data) as verl / trl training data")
    q.add_argument("--run-dir", type=Path, help="a run directory: write its data/ from its config.yaml "
                   "(as its launch.sh does), instead of --spec/--dataset/--out")
    q.add_argument("--spec", type=Path, help="the spec that declares --dataset")
    q.add_argument("--dataset", help="dataset name in the spec")
    q.add_argument("--format", required=True, choices=EXPORT_FORMATS, help="training data form to write")
    q.add_argument("--out", type=Path, help=".parquet, else JSON Lines")
    q.add_argument("--prompt", help="prompt template (registry/prompts.yaml); default: per problem kind")
    q.add_argument("--model", help="registry model name: picks chat vs completion prompts (default: chat)")
    q.add_argument("--reward", choices=("dense", "sparse"), help="reward mode (verl-rl, trl-grpo; default dense)")
    q.add_argument("--pairs", type=Path, help="trl-dpo: pairs JSONL (default: correct vs incorrect references)")
    q.set_defaults(func=_cmd_data_export)

    q = data.add_parser("toy", help="write the toy problems of a split (JSON Lines, format `problem`)")
    q.add_argument("--split", choices=("train", "valid", "test"), default="train",
                   help="which split (disjoint by construction; default: train)")
    q.add_argument("--seed", type=int, default=0, help="generator seed (default: 0)")
    q.add_argument("--out", type=Path, required=True, help="output JSONL file")
    q.set_defaults(func=_cmd_data_toy)

    q = data.add_parser("leakage", help="isolation rule 3: every train/eval problem pair that is the same or nearly")
    q.add_argument("spec", type=Path)
    q.add_argument("--cache-dir", type=Path, help="sketch cache (default: $RLVR_RUN_CACHE_DIR or ~/.cache/rlvr-run)")
    q.add_argument("--json", type=Path, help="also write the full report here")
    q.set_defaults(func=_cmd_data_leakage)

    q = data.add_parser("pairs", help="DPO preference pairs from K judged samples per problem")
    q.add_argument("--problems", type=Path, required=True, help="problems file (raw or normalized)")
    q.add_argument("--samples", type=Path, required=True, help="JSONL with problem_id and completion, K per problem")
    q.add_argument("--verdicts", type=Path, help="records `rlvr-run judge` wrote for --samples (else: judge now)")
    q.add_argument("--out", type=Path, required=True, help="pairs JSONL; the report goes beside it (.report.json)")
    q.add_argument("--min-delta", type=float, default=0.3, help="keep pairs with Δpass_ratio ≥ this (default 0.3)")
    q.add_argument("--prompt", help="prompt template written with each pair (default: per problem kind)")
    q.set_defaults(func=_cmd_data_pairs)


def _load_with_progress(reference: str, spec: Optional[Path]):
    from rich.progress import Progress, SpinnerColumn, TextColumn

    from engine.data.loaders import load_reference

    with Progress(SpinnerColumn(), TextColumn("loading {task.description}: {task.completed} problems"),
                  console=err_console, transient=True) as bar:
        task = bar.add_task(reference, total=None)
        return load_reference(reference, spec_path=spec, on_row=lambda n: bar.update(task, completed=n))


def _write_problems(problems, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(p.model_dump_json() + "\n" for p in problems), encoding="utf-8")


def _cmd_data_show(args: argparse.Namespace) -> int:
    loaded = _load_with_progress(args.dataset, args.spec)
    kinds = Counter(p.kind for p in loaded.problems)
    console.print(f"{loaded.name}: {len(loaded.problems)} problems "
                  f"({', '.join(f'{n} {k}' for k, n in sorted(kinds.items()))}), split {loaded.split}")
    console.print(f"fingerprint {loaded.fingerprint}")
    console.print(f"origin: {loaded.origin}", highlight=False)
    if loaded.idlist_sha256:
        console.print(f"id list sha256 {loaded.idlist_sha256}")
    if args.ids:
        console.print("\n".join(loaded.ids()), highlight=False)
    if args.out:
        _write_problems(loaded.problems, args.out)
        console.print(f"wrote {args.out}")
    return 0


def _cmd_data_idlist(args: argparse.Namespace) -> int:
    from engine.data.idlist import select_ids, write_idlist

    loaded = _load_with_progress(args.dataset, args.spec)
    ids = select_ids(loaded.problems, args.n, args.seed)
    digest = write_idlist(args.out, ids)
    console.print(f"wrote {args.out}: {len(ids)} of {len(loaded.problems)} ids of {loaded.name} (seed {args.seed})")
    console.print(f"sha256 {digest}")
    return 0


def _cmd_data_export(args: argparse.Namespace) -> int:
    from engine.data.export import PromptChoice, export_dataset, read_pairs
    from engine.registry import find_registry, load_registry

    if args.run_dir is not None:
        return _cmd_data_export_run(args)
    if args.spec is None or args.dataset is None or args.out is None:
        raise UserError("data export needs --spec, --dataset and --out (or --run-dir DIR for a run's data)")
    registry = load_registry(find_registry(args.spec.parent))
    if args.model is not None and args.model not in registry.models:
        raise UserError(f"unknown model `{args.model}`; registry/models.yaml has: {', '.join(registry.models)}")
    model = registry.models[args.model] if args.model else None
    loaded = _load_with_progress(args.dataset, args.spec)
    pairs = read_pairs(args.pairs) if args.pairs else None
    result = export_dataset(loaded, args.format, args.out, PromptChoice(registry=registry, template=args.prompt,
                            model=model), reward=args.reward or "dense", pairs=pairs)
    console.print(f"wrote {result.path}: {result.rows} {result.format} rows from {loaded.name} "
                  f"(fingerprint {loaded.fingerprint[:16]}), sha256 {result.sha256}")
    if result.skipped:
        console.print(f"[yellow]skipped {len(result.skipped)}[/]: " + "; ".join(result.skipped[:5])
                      + (" …" if len(result.skipped) > 5 else ""), highlight=False)
    return 0


def _cmd_data_export_run(args: argparse.Namespace) -> int:
    from engine.data.export import export_run, summary_line

    given = [flag for flag, value in (("--spec", args.spec), ("--dataset", args.dataset), ("--out", args.out),
                                      ("--prompt", args.prompt), ("--model", args.model), ("--pairs", args.pairs),
                                      ("--reward", args.reward))
             if value is not None]
    if given:
        raise UserError(f"--run-dir takes everything from the run's config.yaml; drop {', '.join(given)}")
    with err_console.status(f"exporting {args.run_dir}"):
        results = export_run(args.run_dir, args.format)
    console.print(summary_line(args.run_dir, results), highlight=False)
    return 0


def _cmd_data_toy(args: argparse.Namespace) -> int:
    from engine.data.toy import toy_problems

    problems = toy_problems(args.split, args.seed)
    _write_problems(problems, args.out)
    console.print(f"wrote {args.out}: {len(problems)} toy {args.split} problems (seed {args.seed})")
    return 0


def _cmd_data_leakage(args: argparse.Namespace) -> int:
    import dataclasses
    import json

    from rich.table import Table

    from engine.data.leakage import check_leakage, describe
    from engine.data.neardup import SketchCache
    from engine.validate import validate_spec

    validated = validate_spec(args.spec, content=False)
    cache = SketchCache(root=args.cache_dir) if args.cache_dir else None
    with err_console.status("rule 3") as status:
        report = check_leakage(validated, cache=cache, on_step=lambda step: status.update(step))
    s = report.settings
    console.print(f"rule 3 — threshold {s.threshold}, {s.ngram}-word shingles, {s.num_perm} permutations; "
                  + ", ".join(f"{n} {report.sizes[n]} problems{' (cached)' if report.cache_hits[n] else ''}"
                              for n in report.sizes), highlight=False)
    table = Table("training side", "evaluation side", "findings", "outcome")
    for pair in report.pairs:
        outcome = ("[yellow]NOT CHECKED[/]" if pair.unchecked else "[red]error[/]" if pair.leaks and not pair.waiver
                   else f"waived: {pair.waiver.reason}" if pair.waiver else "[green]clean[/]")
        table.add_row(f"{pair.train} ({pair.train_at})", f"{pair.evaluation} ({pair.eval_at})",
                      str(len(pair.leaks)), outcome)
    console.print(table)
    for pair in report.pairs:
        for leak in pair.leaks:
            console.print(f"  {pair.train} × {pair.evaluation}: {describe(leak)}", highlight=False)
    for warning in report.warnings:
        err_console.print(f"[bold yellow]warning:[/] {warning}", highlight=False)
    for diag in report.errors:
        err_console.print(diag.render(), highlight=False)
    if args.json:
        args.json.write_text(json.dumps(dataclasses.asdict(report), indent=2, default=str) + "\n")
    return 1 if report.errors else 0


def _cmd_data_pairs(args: argparse.Namespace) -> int:
    import json

    from rich.progress import Progress

    from engine.data.pairs import build_pairs, judged_samples, registry_prompt, write_pairs
    from engine.registry import find_registry, load_registry

    prompt_for = registry_prompt(load_registry(find_registry(Path.cwd())), args.prompt)
    with Progress(console=err_console, transient=True) as bar:
        task = bar.add_task("judging", total=None)
        problems, judged = judged_samples(args.problems, args.samples, verdicts_path=args.verdicts,
                                          progress=lambda done, total: bar.update(task, completed=done, total=total))
    result = build_pairs(problems, judged, min_delta=args.min_delta, prompt_for=prompt_for)
    report_file = write_pairs(result, args.out)
    console.print(f"wrote {args.out}: {result.report.pairs} pairs from {result.report.problems} problems; "
                  f"report {report_file}")
    console.print_json(json.dumps(result.report.model_dump()))
    return 0


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
