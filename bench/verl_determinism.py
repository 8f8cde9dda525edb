"""Same numbers twice: two fresh runs of `specs/verl-cpu.yaml`, every non-timing figure compared.

    .venv/bin/python bench/verl_determinism.py [--runs-dir A --runs-dir B]

Without `--runs-dir` it runs the study twice, each into a fresh temporary folder (about twice the
study's wall time). Compared, run by run (matched by label, so ids may differ): every metric in
lineage (evaluations, selection, training summaries) and every figure of verl's own step log
(`metrics.*.jsonl`) but its timings and throughputs. It prints each figure that differs with its
two values, the count of figures compared, and the largest relative spread.
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path

from engine.files import read_jsonl
from engine.runs.lineage import LINEAGE_FILE, open_lineage
from engine.runs.pipeline import run_spec

SPEC = Path(__file__).resolve().parents[1] / "specs" / "verl-cpu.yaml"
# Wall-clock figures differ between any two runs and say nothing about the numbers; so does the
# judge cache's hit rate, which depends on which run judged a program first. Matched by prefix
# or suffix: `reward_std` or `exec_success` are numbers.
TIMING_PREFIXES = ("timing_s/", "timing_per_token_ms/", "perf/", "time/")
TIMING_SUFFIXES = ("_s", "_seconds", "throughput", "wall", "cached/mean@1", "cache_hit_rate")


def _timing(name: str) -> bool:
    last = name.rsplit("/", 1)[-1]
    # A seconds figure reduced by verl (`…/judge_wall_s/mean@1`) is a timing at any depth.
    seconds = any(part.endswith("_s") for part in name.split("/")[:-1])
    return (name.startswith(TIMING_PREFIXES) or any(f"/{p}" in name for p in TIMING_PREFIXES)
            or name.endswith(TIMING_SUFFIXES) or last.startswith("judge_s") or "/cached/" in name or seconds)


def figures(runs_dir: Path) -> dict[str, float]:
    """`label | source | name` -> value for every non-timing figure of the study in `runs_dir`."""
    out: dict[str, float] = {}
    with open_lineage(runs_dir / LINEAGE_FILE, readonly=True) as lineage:
        runs = lineage.runs(SPEC.stem)
        for run in runs:
            label = f"{run.phase}{'/' + run.variant if run.variant else ''}@{run.seed}"
            for m in lineage.metrics(run.id):
                if not _timing(m.name):
                    out[f"{label} | {m.dataset}/{m.protocol} step {m.step} | {m.name}"] = m.value
            for log in sorted((runs_dir / SPEC.stem / run.id / "logs").glob("metrics.*.jsonl")):
                for row in read_jsonl(log):
                    for name, value in (row.get("data") or {}).items():
                        if isinstance(value, (int, float)) and not _timing(name):
                            out[f"{label} | verl step {row.get('step')} | {name}"] = float(value)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs-dir", type=Path, action="append", default=[],
                        help="a finished study's runs folder (give two), instead of running it twice")
    args = parser.parse_args()
    dirs = list(args.runs_dir)
    if dirs and len(dirs) != 2:
        parser.error("give --runs-dir twice, or not at all")
    for i in range(2 - len(dirs)):
        runs_dir = Path(tempfile.mkdtemp(prefix=f"rlvr-verl-det{i}-")) / "runs"
        began = time.perf_counter()
        run_spec(SPEC, runs_dir=runs_dir)
        print(f"run {i + 1}: {time.perf_counter() - began:.0f} s into {runs_dir}")
        dirs.append(runs_dir)
    a, b = figures(dirs[0]), figures(dirs[1])
    only = sorted(set(a) ^ set(b))
    common = sorted(set(a) & set(b))
    differ = [k for k in common if not (a[k] == b[k] or (math.isnan(a[k]) and math.isnan(b[k])))]
    for key in differ:
        print(f"differs: {key}: {a[key]:.6g} vs {b[key]:.6g}")
    for key in only:
        print(f"in one run only: {key}")
    spread = max((abs(a[k] - b[k]) / max(abs(a[k]), abs(b[k]), 1e-12) for k in differ), default=0.0)
    print(f"{len(common)} figures compared: {len(differ)} differ, {len(only)} in one run only; "
          f"largest relative spread {spread:.3g}")


if __name__ == "__main__":
    main()
