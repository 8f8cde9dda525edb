"""`data verify` on the raw dataset files ($RLVR_RUN_DATA_MIRROR): the counts per status for the CodeContests sample, MBPP and HumanEval.

Reports go to the verify cache (a rerun only reads them) and to --out. `--max-tests N`
keeps each CodeContests problem's first N tests (the sample holds 3-264 per problem;
all of them take the better part of an hour of CPython on two cores).

    .venv/bin/python bench/verify_datasets.py [--max-tests 10] [--out verify-bench]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import time
from pathlib import Path

from engine.data.convert import (
    problem_from_codecontests_derived,
    problem_from_humaneval,
    problem_from_mbpp,
)
from engine.data.fingerprint import problems_fingerprint
from engine.judge.config import JudgeConfig
from engine.problem import Problem
from engine.verify.problems import verify_dataset, write_outputs

# The raw dataset files (humaneval.jsonl, mbpp_full.jsonl, mbpp_sanitized.jsonl, the CodeContests
# sample): the folder RLVR_RUN_DATA_MIRROR names, as for the loaders.
DATA = Path(os.environ.get("RLVR_RUN_DATA_MIRROR") or "datasets")


def _rows(name: str) -> list[dict]:
    if not (DATA / name).is_file():
        raise SystemExit(f"{DATA / name} not found: set RLVR_RUN_DATA_MIRROR to the folder of the raw dataset files")
    opener = gzip.open if name.endswith(".gz") else open
    with opener(DATA / name, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def datasets(max_tests: int | None) -> dict[str, list[Problem]]:
    codecontests = [problem_from_codecontests_derived(r) for r in _rows("codecontests_train_sample_derived.jsonl.gz")]
    if max_tests:
        codecontests = [p.model_copy(update={"stdio_tests": p.stdio_tests[:max_tests]}) for p in codecontests]
    return {
        "codecontests_sample": codecontests,
        "mbpp": [problem_from_mbpp(r, sanitized=False) for r in _rows("mbpp_full.jsonl")],
        "humaneval": [problem_from_humaneval(r) for r in _rows("humaneval.jsonl")],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-tests", type=int, default=10, help="CodeContests tests kept per problem (0: all)")
    parser.add_argument("--out", type=Path, default=Path("verify-bench"))
    parser.add_argument("--only", help="one of codecontests_sample, mbpp, humaneval")
    args = parser.parse_args()
    config = JudgeConfig()
    for name, problems in datasets(args.max_tests or None).items():
        if args.only and name != args.only:
            continue
        start = time.perf_counter()
        report, cached = verify_dataset(name, problems, problems_fingerprint(problems), config)
        write_outputs(report, args.out / f"{name}.json")
        counts = ", ".join(f"{n} {status}" for status, n in report.counts().items())
        print(f"{name}: {len(problems)} problems — {counts}; resolved by a generic checker: "
              f"{report.resolved_by_checker() or 'none'} ({time.perf_counter() - start:.0f} s"
              f"{', cached' if cached else ''}, judge {config.version}, {config.workers} workers)", flush=True)


if __name__ == "__main__":
    main()
