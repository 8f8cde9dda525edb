"""Start-up of a launch script's command: a cold interpreter against a fork of the warm server.

    .venv/bin/python bench/warm_start.py [--reps 5]

Each row is what a local launch script pays before its command does any work: `--help` of
the evaluation and trl training entry points (each imports what its run imports: torch,
transformers, trl), run with the real interpreter (cold) and through the warm server's shim
(`engine.runs.warm`), interleaved rep by rep so a busy machine slows both alike. Prints the
median wall seconds of each, their ratio, and the server's one-off preload time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from engine.runs.warm import WarmServer

COMMANDS = {
    "evaluate": ["-m", "engine.cli", "evaluate", "--help"],
    "sft (trl)": ["-m", "engine.train.sft", "--help"],
    "grpo (trl)": ["-m", "engine.train.grpo", "--help"],
}


def timed(python: str, args: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run([python, *args], env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True)
    if "cold start" in done.stderr:  # the shim fell back: this row would time the cold path twice
        raise SystemExit(f"the warm server refused: {done.stderr.strip()}")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    started = time.perf_counter()
    server = WarmServer()
    timed(server.python, ["-m", "engine.cli", "--version"], env)  # waits for the preload
    print(f"warm server ready (its imports) in {time.perf_counter() - started:.1f} s, once per runner")
    try:
        print(f"{'command':<12} {'cold s':>7} {'warm s':>7} {'cold/warm':>9}")
        for name, command in COMMANDS.items():
            cold, warm = [], []
            for _ in range(args.reps):
                cold.append(timed(sys.executable, command, env))
                warm.append(timed(server.python, command, env))
            c, w = statistics.median(cold), statistics.median(warm)
            print(f"{name:<12} {c:>7.2f} {w:>7.2f} {c / w:>8.1f}x")
    finally:
        server.close()


if __name__ == "__main__":
    main()
