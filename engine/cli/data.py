"""`rlvr-run data ...`: show a dataset, freeze id lists, export training data, toy problems, rule 3, pairs."""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections import Counter
from pathlib import Path
from typing import Optional

from rich.progress import Progress, SpinnerColumn
from rich.text import Text

from engine.cli.judge import add_judge_options, judge_config, judge_options_given
from engine.cli.views import (
    console,
    err_console,
    leakage_table,
    plain_progress_columns,
    text_column,
    verify_line,
)
from engine.data.files import write_problems
from engine.data.idlist import select_ids, write_idlist
from engine.data.loaders import load_reference
from engine.data.toy import toy_problems
from engine.errors import UserError
from engine.isolation.content import LeakageReport, check_leakage, describe
from engine.isolation.neardup import SketchCache
from engine.isolation.validate import validate_spec
from engine.prompts.templates import PromptChoice
from engine.spec.registry import find_registry, load_registry
from engine.train.export import export_run, summary_line
from engine.train.pairs import build_pairs, judged_samples, registry_prompt, write_pairs
from engine.train.rows import EXPORT_FORMATS, export_dataset, read_pairs
from engine.verify.declared import verify_targets
from engine.verify.leakage import confirm_by_execution
from engine.verify.problems import verify_dataset, write_outputs

def add_arguments(p: argparse.ArgumentParser) -> None:
    p.set_defaults(func=lambda a: (p.print_help(), 0)[1])
    data = p.add_subparsers(dest="data_cmd")
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
    q.add_argument("--json", nargs="?", const="-", metavar="FILE",
                   help="the full report as JSON: every pair with its kind, scores and the test runs that "
                        "confirmed it (to stdout, or to FILE)")
    q.set_defaults(func=_cmd_data_leakage)
    q = data.add_parser("verify", help="run reference solutions through the judge: sound, needs-checker, "
                        "broken tests, too slow, interactive")
    q.add_argument("target", help="a spec (verifies its datasets that declare `verified:`), or a dataset: "
                   + dataset_help.replace(", or a dataset NAME of --spec", ""))
    q.add_argument("--dataset", action="append", help="with a spec: verify this dataset (repeatable; default: "
                   "those that declare `verified:`)")
    q.add_argument("--out", type=Path, default=Path("verify"), help="folder for NAME.json and NAME.ids.txt "
                   "(default: ./verify)")
    q.add_argument("--refresh", action="store_true", help="judge again even when the cache has a report")
    q.set_defaults(func=_cmd_data_verify)
    q = data.add_parser("pairs", help="DPO preference pairs from K judged samples per problem")
    q.add_argument("--problems", type=Path, required=True, help="problems file (raw or normalized)")
    q.add_argument("--samples", type=Path, required=True, help="JSONL with problem_id and completion, K per problem")
    q.add_argument("--verdicts", type=Path, help="records `rlvr-run judge --mode dense` wrote for --samples "
                   "(else: judge now, every test, with the judge options below)")
    q.add_argument("--out", type=Path, required=True, help="pairs JSONL; the report goes beside it (.report.json)")
    q.add_argument("--min-delta", type=float, default=0.3, help="keep pairs with Δpass_ratio ≥ this (default 0.3)")
    q.add_argument("--prompt", help="prompt template written with each pair (default: per problem kind)")
    add_judge_options(q)
    q.set_defaults(func=_cmd_data_pairs)


def _load_with_progress(reference: str, spec: Optional[Path]):
    with Progress(SpinnerColumn(), text_column("loading {task.description}: {task.completed} problems"),
                  console=err_console, transient=True) as bar:
        task = bar.add_task(reference, total=None)
        return load_reference(reference, spec_path=spec, on_row=lambda n: bar.update(task, completed=n))


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
        write_problems(loaded.problems, args.out)
        console.print(f"wrote {args.out}")
    return 0


def _cmd_data_idlist(args: argparse.Namespace) -> int:
    loaded = _load_with_progress(args.dataset, args.spec)
    ids = select_ids(loaded.problems, args.n, args.seed)
    digest = write_idlist(args.out, ids)
    console.print(f"wrote {args.out}: {len(ids)} of {len(loaded.problems)} ids of {loaded.name} (seed {args.seed})")
    console.print(f"sha256 {digest}")
    return 0


def _cmd_data_export(args: argparse.Namespace) -> int:
    if args.run_dir is not None:
        return _cmd_data_export_run(args)
    if args.spec is None or args.dataset is None or args.out is None:
        raise UserError("data export needs --spec, --dataset and --out (or --run-dir DIR for a run's data)")
    registry = load_registry(find_registry(args.spec.parent))
    model = registry.model(args.model) if args.model else None
    loaded = _load_with_progress(args.dataset, args.spec)
    pairs = read_pairs(args.pairs) if args.pairs else None
    result = export_dataset(loaded, args.format, args.out, PromptChoice(registry=registry, template=args.prompt,
                            model=model), reward=args.reward or "dense", pairs=pairs)
    console.print(f"wrote {result.path}: {result.rows} {result.format} rows from {loaded.name} "
                  f"(fingerprint {loaded.fingerprint[:16]}), sha256 {result.sha256}")
    if result.skipped:
        console.print(Text(f"skipped {len(result.skipped)}", style="yellow") + Text(
            ": " + "; ".join(result.skipped[:5]) + (" …" if len(result.skipped) > 5 else "")), highlight=False)
    return 0


def _cmd_data_export_run(args: argparse.Namespace) -> int:
    given = [flag for flag, value in (("--spec", args.spec), ("--dataset", args.dataset), ("--out", args.out),
                                      ("--prompt", args.prompt), ("--model", args.model), ("--pairs", args.pairs),
                                      ("--reward", args.reward))
             if value is not None]
    if given:
        raise UserError(f"--run-dir takes everything from the run's config.yaml; drop {', '.join(given)}")
    with err_console.status(Text(f"exporting {args.run_dir}")):
        results = export_run(args.run_dir, args.format)
    console.print(summary_line(args.run_dir, results), highlight=False)
    return 0


def _cmd_data_toy(args: argparse.Namespace) -> int:
    problems = toy_problems(args.split, args.seed)
    write_problems(problems, args.out)
    console.print(f"wrote {args.out}: {len(problems)} toy {args.split} problems (seed {args.seed})")
    return 0


def _cmd_data_leakage(args: argparse.Namespace) -> int:
    validated = validate_spec(args.spec, content=False)
    cache = SketchCache(root=args.cache_dir) if args.cache_dir else None
    with err_console.status("rule 3") as status:
        report = check_leakage(validated, cache=cache, on_step=lambda step: status.update(Text(step)),
                               confirm=confirm_by_execution)
    to_stdout = args.json == "-"
    if args.json:
        text = json.dumps(leakage_json(report), indent=2, default=str) + "\n"
        if to_stdout:
            console.out(text, end="", highlight=False)
        else:
            Path(args.json).write_text(text)
    out = err_console if to_stdout else console
    s = report.settings
    out.print(f"rule 3 — threshold {s.threshold}, {s.ngram}-word shingles, {s.num_perm} permutations; "
              + ", ".join(f"{n} {report.sizes[n]} problems{' (cached)' if report.cache_hits[n] else ''}"
                          for n in report.sizes), highlight=False)
    out.print(f"by meaning: {report.semantic}", highlight=False)
    out.print(leakage_table(report))
    for pair in report.pairs:
        for leak in pair.leaks:
            out.print(f"  {pair.train} × {pair.evaluation}: {describe(leak)} — {leak.level}, kind {leak.kind}, "
                      f"scores {_scores(leak.scores)}", highlight=False)
    for warning in report.warnings:
        err_console.print(Text("warning: ", style="bold yellow") + Text(warning), highlight=False, soft_wrap=True)
    for diag in report.errors:
        err_console.print(Text(diag.render()), highlight=False, soft_wrap=True)
    return 1 if report.errors else 0


def _scores(scores: dict[str, float]) -> str:
    return ", ".join(f"{name} {value:.3f}" for name, value in scores.items()) or "—"


def leakage_json(report: LeakageReport) -> dict:
    """The report for machines: settings, what each stage did, and every pair of datasets with
    every finding (kind, level, scores, the test runs of a pair found by meaning)."""
    return {
        "settings": report.settings.model_dump(),
        "semantic": report.semantic,
        "datasets": {name: {"problems": report.sizes[name], "fingerprint": report.fingerprints.get(name)}
                     for name in report.sizes},
        "pairs": [{"train": pair.train, "evaluation": pair.evaluation, "outcome": pair.outcome,
                   "unchecked": pair.unchecked, "waiver": dataclasses.asdict(pair.waiver) if pair.waiver else None,
                   "findings": [dataclasses.asdict(leak) for leak in pair.leaks]} for pair in report.pairs],
        "unchecked_pairs": report.unchecked_pairs,
        "load_failures": report.load_failures,
        "warnings": report.warnings,
        "errors": [diag.render() for diag in report.errors],
    }


def _cmd_data_verify(args: argparse.Namespace) -> int:
    targets = verify_targets(args.target, args.dataset)
    for target in targets:
        loaded = _load_with_progress(target.reference, target.spec)
        with Progress(*plain_progress_columns(), console=err_console, transient=True) as bar:
            task = bar.add_task(f"verifying {loaded.name}", total=len(loaded.problems))
            report, cached = verify_dataset(loaded.name, loaded.problems, loaded.fingerprint, target.judge,
                                            refresh=args.refresh, progress=lambda n: bar.advance(task, n))
        out, ids_path, digest = write_outputs(report, args.out / f"{_file_name(loaded.name)}.json", target.checker)
        console.print(verify_line(report, target.checker, cached=cached), highlight=False)
        console.print(f"  wrote {out} and {ids_path} (sha256 {digest})", highlight=False)
    return 0


def _file_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def _cmd_data_pairs(args: argparse.Namespace) -> int:
    given = judge_options_given(args) if args.verdicts else []
    if given:
        raise UserError(f"{' '.join(given)} cannot apply to --verdicts {args.verdicts}: those samples were judged "
                        "already, with the limits their records name\n"
                        "  fix: drop --verdicts to judge now with these options, or drop the options")
    prompt_for = registry_prompt(load_registry(find_registry(Path.cwd())), args.prompt)
    with Progress(*plain_progress_columns(), console=err_console, transient=True) as bar:
        task = bar.add_task("judging", total=None)
        problems, judged, version = judged_samples(
            args.problems, args.samples, verdicts_path=args.verdicts, config=judge_config(args),
            progress=lambda done, total: bar.update(task, completed=done, total=total))
    result = build_pairs(problems, judged, min_delta=args.min_delta, prompt_for=prompt_for)
    result.report.judge = version
    report_file = write_pairs(result, args.out)
    console.print(f"wrote {args.out}: {result.report.pairs} pairs from {result.report.problems} problems; "
                  f"report {report_file}")
    console.print_json(json.dumps(result.report.model_dump()))
    return 0


