"""What differs between two recordings of one study: every non-timing metric and every generated text.

    .venv/bin/python bench/study_diff.py RUNS_A RUNS_B [--spec smoke] [--show 10]
    .venv/bin/python bench/study_diff.py --run [--spec-file specs/smoke.yaml] [--show 10]

Runs are matched by label (phase, variant, schedule, seed), so two fresh runs of one spec compare
even where their ids differ. Compared: every metric row (run, dataset, protocol, name, step) whose
name is not a timing (seconds, rates per second, cache hits), and every JSON Lines record a run wrote
under its folder with a `completion`, `prompt`, `chosen`, `rejected` or `text` field (samples,
generations, rollout traces, pairs, harvests, training rows), keyed by file, problem, sample and
round: its texts and what it says of them (code, verdict, pass ratio, tokens, reward, seed). Not
compared: per-test timings and the model key a record names (a checkpoint's content hash covers its
trainer state, which holds the runs folder's path). `--run` runs the spec twice from scratch into temporary folders first (the same spec on the
same machine must give 0 differences). Prints the counts, then the first differences of each kind.
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
from pathlib import Path

from engine.files import read_jsonl
from engine.runs.lineage import LINEAGE_FILE, open_lineage

# Wall-clock figures and what depends on the judge cache's warmth differ from run to run by nature.
TIMING = re.compile(r"(_s$|_s_|_s/|/judge_s|per_s|wall|latency|step_time|cache_hit|^lr$|learning_rate)")
TEXT_FIELDS = ("completion", "prompt", "chosen", "rejected", "text", "messages", "conversation")
# what a record says of its sample beside the text: compared with it
OUTCOME_FIELDS = ("code", "verdict", "accepted", "pass_ratio", "passed", "total", "finish_reason", "completion_tokens",
                  "reward", "round", "parent", "seed")


def _label(run) -> str:
    """phase[/variant][:schedule][@seed], as the plan labels it (a recorded run keeps its schedule in its config)."""
    schedule = json.loads(run.config_json or "{}").get("schedule")
    return (run.phase + (f"/{run.variant}" if run.variant else "") + (f":{schedule}" if schedule else "")
            + (f"@{run.seed}" if run.seed is not None else ""))


def metric_table(runs_dir: Path, spec: str) -> dict[tuple, float]:
    out: dict[tuple, float] = {}
    with open_lineage(runs_dir / LINEAGE_FILE, readonly=True) as lineage:
        for run in lineage.runs(spec):
            for m in lineage.metrics(run.id):
                if not TIMING.search(m.name):
                    out[(_label(run), m.dataset, m.protocol, m.name, m.step)] = m.value
    return out


def texts(runs_dir: Path, spec: str) -> dict[tuple, str]:
    out: dict[tuple, str] = {}
    with open_lineage(runs_dir / LINEAGE_FILE, readonly=True) as lineage:
        runs = lineage.runs(spec)
    for run in runs:
        folder = runs_dir / spec / run.id
        for path in sorted(folder.rglob("*.jsonl")):
            rel = str(path.relative_to(folder))
            if rel.startswith("logs/"):
                continue
            for n, record in enumerate(read_jsonl(path)):
                if not isinstance(record, dict) or not any(f in record for f in TEXT_FIELDS):
                    continue
                key = (_label(run), rel, record.get("problem_id", record.get("id")), record.get("sample"),
                       record.get("round"), n if "problem_id" not in record else None)
                kept = {k: record[k] for k in (*TEXT_FIELDS, *OUTCOME_FIELDS) if k in record}
                out[key] = json.dumps(kept, sort_keys=True, default=str)
    return out


def differences(a: dict[tuple, object], b: dict[tuple, object]) -> list[tuple[tuple, object, object]]:
    return [(k, a.get(k), b.get(k)) for k in sorted(set(a) | set(b), key=str) if a.get(k) != b.get(k)]


def compare(runs_a: Path, runs_b: Path, spec: str) -> dict[str, list]:
    return {"metrics": differences(metric_table(runs_a, spec), metric_table(runs_b, spec)),
            "texts": differences(texts(runs_a, spec), texts(runs_b, spec)),
            "counts": [len(metric_table(runs_a, spec)), len(texts(runs_a, spec))]}


def _run_twice(spec_file: Path) -> tuple[Path, Path, str]:
    from engine.runs.pipeline import run_spec

    folders = []
    for _ in range(2):
        runs_dir = Path(tempfile.mkdtemp(prefix="rlvr-twice-")) / "runs"
        outcome = run_spec(spec_file, runs_dir=runs_dir)
        folders.append(runs_dir)
        name = outcome.plan.spec_name
    return folders[0], folders[1], name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="*", type=Path, help="two runs folders")
    parser.add_argument("--spec", default="smoke", help="the study's name in lineage")
    parser.add_argument("--run", action="store_true", help="run --spec-file twice from scratch first")
    parser.add_argument("--spec-file", type=Path, default=Path("specs/smoke.yaml"))
    parser.add_argument("--show", type=int, default=10)
    args = parser.parse_args()
    if args.run:
        a, b, spec = _run_twice(args.spec_file)
    elif len(args.runs) == 2:
        (a, b), spec = args.runs, args.spec
    else:
        parser.error("give two runs folders, or --run")
    found = compare(a, b, spec)
    metrics, records = found["counts"]
    print(f"{a} vs {b} ({spec}): {metrics} non-timing metric values, {records} generated-text records")
    print(f"metrics that differ: {len(found['metrics'])}")
    print(f"generated texts that differ: {len(found['texts'])}")
    for kind in ("metrics", "texts"):
        for key, x, y in found[kind][: args.show]:
            print(f"  {kind}: {key}\n    A: {str(x)[:300]}\n    B: {str(y)[:300]}")


if __name__ == "__main__":
    main()
