"""Start-up time of the command line: `rlvr-run --help` and `rlvr-run status` on a finished study.

    .venv/bin/python bench/cli_startup.py [--baseline DIR] [--reps 7]

Each command runs in a fresh interpreter (what a user waits for), on a ~100-run synthetic study
(tests/report/synthetic.py). With `--baseline DIR` (another source tree of rlvr-run, e.g.
`git worktree add /tmp/base <commit>`) the same commands run from that tree too, interleaved,
and the ratios are printed: on a busy machine the ratio is the figure to read. Each command's
time is also given as a multiple of a bare `python -c pass` measured in the same rounds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD = ("import sys; from pathlib import Path; sys.path.insert(0, 'tests/report'); from synthetic import build; "
         "build(Path(sys.argv[1]), seeds=8)")


def build_with(tree: Path, folder: Path) -> None:
    """The synthetic study, written by `tree`'s own code (each tree reads its own lineage schema)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    subprocess.run([sys.executable, "-c", BUILD, str(folder)], cwd=tree, env=env, check=True,
                   stdout=subprocess.DEVNULL)


def once(tree: Path, args: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    began = time.perf_counter()
    subprocess.run([sys.executable, "-m", "engine.cli", *args], cwd=tree, env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - began


def bare_start() -> float:
    began = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, help="another rlvr-run source tree to compare with")
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    trees = {"this tree": ROOT, **({"baseline": args.baseline.resolve()} if args.baseline else {})}
    commands = ("--help", "status")
    with tempfile.TemporaryDirectory() as tmp:
        argvs = {}
        for name, tree in trees.items():
            folder = Path(tmp) / name.replace(" ", "-")
            build_with(tree, folder)
            argvs[name] = {"--help": ["--help"], "status": ["status", "--runs-dir", str(folder)]}
        times: dict[tuple[str, str], list[float]] = {(t, c): [] for t in trees for c in commands}
        bare: list[float] = []
        for _ in range(args.reps):
            bare.append(bare_start())
            for command in commands:
                for name, tree in trees.items():
                    times[(name, command)].append(once(tree, argvs[name][command]))
    python = statistics.median(bare)
    print(f"bare python start: {python:.3f} s (`python -c pass`; the goals: --help within 2x, status within 13x)")
    for command in commands:
        line = f"{command:>8}: " + ", ".join(f"{name} {statistics.median(times[(name, command)]):.2f} s "
                                              f"({statistics.median(times[(name, command)]) / python:.1f}x bare python)"
                                              for name in trees)
        if args.baseline:
            ratio = statistics.median(times[("baseline", command)]) / statistics.median(times[("this tree", command)])
            line += f" ({ratio:.1f}x faster)"
        print(line)


if __name__ == "__main__":
    main()
