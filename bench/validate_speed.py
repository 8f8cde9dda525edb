"""`rlvr-run validate` of the smoke study and of a small bring-your-own spec, cold and warm; a
second runner refused for the lock; optionally a rerun with nothing to do.

    .venv/bin/python bench/validate_speed.py [--baseline DIR] [--reps 2] [--rerun]

Each command runs in a fresh interpreter (what a user waits for). Cold: an empty cache folder
($RLVR_RUN_CACHE_DIR): datasets, sketches, the embedding model's vectors and the judge's
verdicts computed afresh. Warm: the folder the cold run filled (a second validation, or one
after editing anything but the data). Targets: warm <= 3 s, cold <= 8 s, on an idle machine.
`lock held`: `rlvr-run SPEC` while this process holds the runs folder's lock; it must be
refused at once, before validating. `--rerun` runs tests/specs/byo/byo.yaml to the end once
(a minute or two on 2 cores; once per tree), then times `rlvr-run SPEC` again, with nothing
left to do (target <= 3 s).

With `--baseline DIR` (another source tree, e.g. `git archive <commit> | tar -x -C DIR`) the
same commands run from that tree too, interleaved with this tree's, each tree with its own
cache folders, for ratios that hold on a busy machine (the figure to read there). Each row
gives wall seconds and, in brackets, the CPU seconds of the command and its children.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPECS = {"smoke": ROOT / "specs" / "smoke.yaml", "byo": ROOT / "tests" / "specs" / "byo" / "byo.yaml"}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def cli(tree: Path, args: list[str], cache: Path, *, expect: int = 0) -> tuple[float, float]:
    """Wall and CPU seconds of `python -m engine.cli ARGS` run from `tree`."""
    env = {**os.environ, "PYTHONPATH": str(tree), "RLVR_RUN_CACHE_DIR": str(cache)}
    cpu, began = _children_cpu(), time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "engine.cli", *args], cwd=tree, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - began
    if done.returncode != expect:
        raise SystemExit(f"{tree}: rlvr-run {' '.join(args)} exited {done.returncode}, not {expect}:\n{done.stderr[-2000:]}")
    return wall, _children_cpu() - cpu


def _median(pairs: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, help="another rlvr-run source tree to compare with")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--rerun", action="store_true", help="also run byo.yaml to the end, then time a rerun")
    args = parser.parse_args()
    from engine.runs.runlock import RunLock

    trees = {"this tree": ROOT, **({"baseline": args.baseline.resolve()} if args.baseline else {})}
    times: dict[tuple[str, str], list[tuple[float, float]]] = {}
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.reps):
            for name, spec in SPECS.items():
                for tree_name, tree in trees.items():
                    cache = Path(tmp) / f"{tree_name.replace(' ', '-')}-{name}-{rep}"
                    validate = ["validate", str(spec)]
                    times.setdefault((tree_name, f"{name} cold"), []).append(cli(tree, validate, cache))
                    times.setdefault((tree_name, f"{name} warm"), []).append(cli(tree, validate, cache))
                    times.setdefault((tree_name, f"{name} --no-content"), []).append(
                        cli(tree, [*validate, "--no-content"], cache))
                    runs = Path(tmp) / f"runs-{tree_name.replace(' ', '-')}"
                    with RunLock(runs):
                        times.setdefault((tree_name, f"{name} lock held"), []).append(
                            cli(tree, [str(spec), "--runs-dir", str(runs)], cache, expect=2))
        if args.rerun:
            for tree_name, tree in trees.items():
                cache, runs = (Path(tmp) / f"rerun-{tree_name.replace(' ', '-')}-{part}" for part in ("cache", "runs"))
                first = cli(tree, [str(SPECS["byo"]), "--runs-dir", str(runs)], cache)
                print(f"{tree_name}: byo.yaml run to the end in {first[0]:.0f} s ({first[1]:.0f} s CPU)")
            for _ in range(args.reps):
                for tree_name, tree in trees.items():
                    cache, runs = (Path(tmp) / f"rerun-{tree_name.replace(' ', '-')}-{part}" for part in ("cache", "runs"))
                    times.setdefault((tree_name, "byo rerun, nothing to do"), []).append(
                        cli(tree, [str(SPECS["byo"]), "--runs-dir", str(runs)], cache))
    print("load average at the start {:.1f} {:.1f} {:.1f}, at the end {:.1f} {:.1f} {:.1f}".format(*load, *os.getloadavg()))
    rows = dict.fromkeys(row for _, row in times)
    for row in rows:
        wall, cpu = _median(times[("this tree", row)])
        line = f"{row:28} {wall:6.2f} s ({cpu:5.2f} s CPU)"
        if ("baseline", row) in times:
            base_wall, base_cpu = _median(times[("baseline", row)])
            line += (f"   baseline {base_wall:6.2f} s ({base_cpu:5.2f} s CPU): {base_wall / wall:.1f}x faster "
                     f"({base_cpu / cpu:.1f}x CPU)")
        print(line)


if __name__ == "__main__":
    main()
