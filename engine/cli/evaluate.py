"""`rlvr-run evaluate --run-dir DIR --model M`: what an eval run's launch.sh runs.

Generates with the run's frozen protocol, judges, and writes outputs/metrics.json; a re-run
resumes (only missing samples are generated, only unjudged ones judged). Progress is a rich
bar on a terminal and a plain line every tenth of the work in a log.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from engine.cli.views import StageProgress, console, eval_table
from engine.evaluate.backends import BACKENDS
from engine.evaluate.eval_run import Settings, evaluate_run

NAME = "evaluate"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(NAME, help="evaluate a run directory's model on its datasets (what an eval run's launch.sh runs)")
    p.add_argument("--run-dir", type=Path, required=True, help="an eval run's directory (runs/<spec>/<run-id>/)")
    p.add_argument("--model", required=True, help="the model to evaluate: a Hugging Face folder or hub id")
    p.add_argument("--backend", choices=("auto", *BACKENDS), default="auto",
                   help="generation backend (auto: vllm where a GPU and vllm exist, else hf)")
    p.add_argument("--base-url", help="OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1 (openai backend)")
    p.add_argument("--batch-size", type=int, default=16, help="prompts per generate call (hf)")
    p.add_argument("--rejudge", action="store_true", help="judge every generation again (e.g. after a judge fix)")
    p.add_argument("--generate-only", action="store_true",
                   help="a best_of_n run: n samples per problem, one chosen by the public tests into outputs/samples")
    p.add_argument("--samples", type=Path, help="score these chosen samples (a best_of_n run's outputs/samples)")
    p.set_defaults(func=command)


def command(args: argparse.Namespace) -> int:
    settings = Settings(backend=args.backend, base_url=args.base_url, batch_size=args.batch_size,
                        rejudge=args.rejudge, generate_only=args.generate_only, samples=args.samples)
    with StageProgress(console) as progress:
        output = evaluate_run(args.run_dir, args.model, settings, on_progress=progress.update)
    if output.datasets:
        console.print(eval_table(output))
    return 0
