"""`rlvr-run validate specs/matrix.yaml`, cold and warm: what the on-disk cache of verl's
compositions and config checks saves.

    .venv/bin/python bench/validate_cache.py [--baseline DIR] [--reps 2]

Each validate runs in a fresh interpreter. Cold: an empty cache folder ($RLVR_RUN_CACHE_DIR).
Warm: the folder the cold run filled. With `--baseline DIR` (another source tree, e.g.
`git worktree add /tmp/base <commit>`) its validate runs too, interleaved, for a ratio that
holds on a busy machine; each tree validates its own specs/matrix.yaml (an older tree cannot
read today's keys), so the ratio compares the seed study as each tree had it.

It also times a fresh interpreter importing what verl's own config check needs
(`verl.utils.config`, `verl.workers.config`: torch, transformers, tensordict, Ray): a cold
validate of a spec with verl runs pays that import once, and no cache can spare it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "specs" / "matrix.yaml"


def validate(tree: Path, cache: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree), "RLVR_RUN_CACHE_DIR": str(cache)}
    began = time.perf_counter()
    # Each tree validates its own specs/matrix.yaml: an older tree may not read today's keys.
    subprocess.run([sys.executable, "-m", "engine.cli", "validate", str(SPEC.relative_to(ROOT))], cwd=tree, env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - began


VERL_CHECK_IMPORT = "import verl.utils.config, verl.workers.config, verl.trainer.ppo.utils"


def verl_import() -> float:
    began = time.perf_counter()
    subprocess.run([sys.executable, "-c", VERL_CHECK_IMPORT], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, help="another rlvr-run source tree to compare with")
    parser.add_argument("--reps", type=int, default=2)
    args = parser.parse_args()
    times: dict[str, list[float]] = {"cold": [], "warm": [], "baseline": [], "verl": []}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.reps):
            cache = Path(tmp) / f"cache-{rep}"
            times["cold"].append(validate(ROOT, cache))
            times["warm"].append(validate(ROOT, cache))
            times["verl"].append(verl_import())
            if args.baseline:
                base_cache = Path(tmp) / f"base-{rep}"
                shutil.copytree(cache, base_cache)  # its data caches, not verl's (it has none)
                shutil.rmtree(base_cache / "verl", ignore_errors=True)
                times["baseline"].append(validate(args.baseline.resolve(), base_cache))
    cold, warm = statistics.median(times["cold"]), statistics.median(times["warm"])
    print(f"validate {SPEC.relative_to(ROOT)}: cold {cold:.1f} s, warm {warm:.1f} s ({cold / warm:.1f}x)")
    verl = statistics.median(times["verl"])
    print(f"a fresh interpreter importing verl's config check: {verl:.1f} s (the floor of a cold validate)")
    if args.baseline:
        base = statistics.median(times["baseline"])
        print(f"baseline {base:.1f} s: cold {base / cold:.1f}x faster, warm {base / warm:.1f}x faster")


if __name__ == "__main__":
    main()
