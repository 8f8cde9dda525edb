"""The smoke study on other seeds and thread counts: does the main job pass however its tiny model trains?

    .venv/bin/python bench/smoke_robustness.py [--config 1,2:1 --config 3,4:1 ...] [--keep DIR]

Training trajectories differ across CPUs (the order of float sums), and the thread count of a run
changes that order too, so other seeds and other thread counts stand in for other machines. Each
`--config SEEDS:THREADS` runs `specs/smoke.yaml` from scratch with those seeds and every phase's
`resources.cpus` set to THREADS (a run's torch threads are its CPUs), in a fresh runs folder, as
`make demo` would (a subprocess: the exit code is the main job's). Default: seeds {1, 2}, {3, 4} and
{5, 6} on one thread, and {1, 2} on two.

Prints per config: the exit code, the wall time, the runs by state, the toy-valid accepted@1 of SFT
per seed, per GRPO/repair run the share of steps whose every group had zero advantage
(`frac_reward_zero_std` = 1), the runs the completion check calls unchanged, and the flywheel's pairs.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from ruamel.yaml import YAML

from engine.files import read_jsonl
from engine.runs.completion import unchanged
from engine.runs.lineage import LINEAGE_FILE, open_lineage

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "specs" / "smoke.yaml"
DEFAULT = ["1,2:1", "3,4:1", "5,6:1", "1,2:2"]


def write_spec(folder: Path, seeds: list[int], threads: int) -> Path:
    yaml = YAML()
    spec = yaml.load(SPEC.read_text())
    spec["seeds"] = seeds
    if threads > 1:
        for phase in spec["phases"].values():
            phase["resources"] = {"cpus": threads}
    path = folder / "smoke.yaml"
    with path.open("w") as out:
        yaml.dump(spec, out)
    return path


def _zero_advantage_share(run_dir: Path) -> str:
    steps = [r.get("data", {}) for log in sorted((run_dir / "logs").glob("metrics.*.jsonl")) for r in read_jsonl(log)]
    shares = [d["frac_reward_zero_std"] for d in steps if "frac_reward_zero_std" in d]
    if not shares:
        return "no steps"
    return f"{sum(1 for s in shares if s >= 1.0)}/{len(shares)} steps all-zero"


def summary(runs_dir: Path) -> dict:
    out: dict = {"states": Counter(), "sft_valid": {}, "zero_advantage": {}, "unchanged": {}, "flywheel_pairs": {}}
    with open_lineage(runs_dir / LINEAGE_FILE, readonly=True) as lineage:
        runs = lineage.runs("smoke")
        for run in runs:
            out["states"][run.state.value] += 1
            config = json.loads(run.config_json or "{}")
            label = run.phase + (f"/{run.variant}" if run.variant else "") + f"@{run.seed}"
            run_dir = Path(run.run_dir) if run.run_dir else runs_dir / "smoke" / run.id
            if run.kind == "eval" and config.get("schedule") == "every_phase" and run.phase == "sft":
                for m in lineage.metrics(run.id):
                    if m.dataset == "toy_valid" and m.name == "accepted@1":
                        out["sft_valid"][run.seed] = round(m.value, 3)
            if run.kind in ("grpo", "repair"):
                out["zero_advantage"][label] = _zero_advantage_share(run_dir)
            if run.kind != "eval":
                why = unchanged(run.kind, run_dir)
                if why:
                    out["unchanged"][label] = why
            if run.variant == "dpo_flywheel" and run.kind == "dpo":
                pairs = [m.value for m in lineage.metrics(run.id) if m.name == "pairs"]
                out["flywheel_pairs"][label] = int(pairs[0]) if pairs else None
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", action="append", help="SEEDS:THREADS, e.g. 3,4:1 (repeatable)")
    parser.add_argument("--keep", type=Path, help="write the runs folders here (default: a temporary folder)")
    args = parser.parse_args()
    base = args.keep or Path(tempfile.mkdtemp(prefix="rlvr-robust-"))
    failed = 0
    for config in args.config or DEFAULT:
        seeds_text, threads_text = config.split(":")
        seeds, threads = [int(s) for s in seeds_text.split(",")], int(threads_text)
        folder = base / f"seeds-{'-'.join(map(str, seeds))}-threads-{threads}"
        folder.mkdir(parents=True, exist_ok=True)
        spec = write_spec(folder, seeds, threads)
        began = time.time()
        done = subprocess.run([sys.executable, "-m", "engine.cli", str(spec), "--runs-dir", str(folder / "runs")],
                              cwd=ROOT, capture_output=True, text=True)
        wall = time.time() - began
        (folder / "output.log").write_text(done.stdout + done.stderr)
        failed += done.returncode != 0
        found = summary(folder / "runs")
        print(f"seeds {seeds}, {threads} thread(s): exit {done.returncode} in {wall / 60:.1f} min; "
              f"runs {dict(found['states'])}", flush=True)
        print(f"  SFT toy_valid accepted@1 by seed: {found['sft_valid']}")
        print(f"  zero-advantage steps: {found['zero_advantage']}")
        print(f"  unchanged runs: {found['unchanged'] or 'none'}")
        print(f"  flywheel pairs: {found['flywheel_pairs']}", flush=True)
    print(f"{len(args.config or DEFAULT) - failed} of {len(args.config or DEFAULT)} configs passed; folders under {base}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
