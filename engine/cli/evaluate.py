"""`rlvr-run evaluate --run-dir DIR --model M`: what an eval run's launch.sh runs.

Generates with the run's frozen protocol, judges, and writes outputs/metrics.json; a re-run
resumes (only missing samples are generated, only unjudged ones judged). Progress is a rich
bar on a terminal and a plain line every tenth of the work in a log.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Optional

from engine.cli.views import StageProgress, console, eval_table
from engine.errors import UserError
from engine.evaluate.eval_run import Settings, evaluate_runs


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run-dir", type=Path, required=True, action="append", dest="run_dirs",
                   help="an eval run's directory (runs/<spec>/<run-id>/); repeat it to evaluate several runs of "
                        "one model with one model load")
    p.add_argument("--model", required=True, help="the model to evaluate: a Hugging Face folder or hub id")
    p.add_argument("--backend", choices=("auto", "hf", "vllm", "openai"), default="auto",
                   help="generation engine: hf or vllm (local), openai (the OpenAI-compatible server at --base-url); "
                        "auto: the run's `generation.backend` or `endpoint:`, else vllm where a GPU and vllm exist, "
                        "else hf")
    p.add_argument("--base-url", help="an OpenAI-compatible server serving --model, e.g. http://127.0.0.1:8000/v1 "
                                      "(implies --backend openai; a spec declares it as an eval phase's `endpoint:`)")
    p.add_argument("--batch-size", type=int, help="prompts per forward batch (hf; default: the run's, else 16 on "
                                                  "a CPU and 64 on a GPU)")
    p.add_argument("--rejudge", action="store_true", help="judge every generation again (e.g. after a judge fix)")
    p.add_argument("--generate-only", action="store_true",
                   help="a best_of_n run: n samples per problem, one chosen by the public tests into outputs/samples")
    p.add_argument("--samples", type=Path, help="score these chosen samples (a best_of_n run's outputs/samples)")
    p.set_defaults(func=command)


def served_backend(backend: str, base_url: Optional[str]) -> str:
    """The local engine to pass on: `openai` names the server at --base-url, which alone already
    chooses it; a local engine together with a server is a contradiction, refused."""
    if backend == "openai" and not base_url:
        raise UserError("--backend openai needs --base-url: the address of the OpenAI-compatible server serving "
                        "--model\n  fix: add --base-url http://HOST:PORT/v1")
    if backend in ("hf", "vllm") and base_url:
        raise UserError(f"--backend {backend} generates locally, --base-url {base_url} on a server: pick one\n"
                        f"  fix: drop --base-url to generate with {backend}, or drop --backend {backend}")
    return "auto" if backend == "openai" else backend


def command(args: argparse.Namespace) -> int:
    settings = Settings(backend=served_backend(args.backend, args.base_url), base_url=args.base_url,
                        batch_size=args.batch_size,
                        rejudge=args.rejudge, generate_only=args.generate_only, samples=args.samples)
    with StageProgress(console) as progress:
        outputs = evaluate_runs(args.run_dirs, args.model, settings, on_progress=progress.update)
    for output in outputs:
        if output.datasets:
            console.print(eval_table(output))
    return 0
