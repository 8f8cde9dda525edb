"""`python -m engine.train.verl_finish --run-dir DIR`: after a verl training run, choose the
checkpoint to hand off and write outputs/training.json; prints the chosen global step.

verl validates every `test_freq` steps on the select_on data (its `val-core/...` and
`val-aux/...` metrics in the file log) and saves every `save_freq` steps. The choice is the
saved step with the best validation score by the run's `select_metric`, as trl's choice
(`engine.train.select_metric`: accepted@1 = our reward's `acc/mean@1`, pass_ratio_mean, ...;
SFT: the lowest `val/loss`), else the last saved step. A validated step without that metric
is an error, never a 0. The launch script then merges that step to model/. When
`engine.train.verl_watch` stopped the run early, its reason goes into training.json too.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Optional

from engine.plan.frozen import FrozenRun, read_frozen_run
from engine.train.outcome import (
    CheckpointScore,
    Chosen,
    TrainingOutcome,
    logged_steps,
    write_outcome,
)
from engine.train.select_metric import VERL_SFT_METRIC, MissingMetric, metric_name, verl_value

STOP_FILE = "outputs/early_stop.json"  # written by engine.train.verl_watch when it stops the run
_STEP = re.compile(r"^global_step_(\d+)$")


def saved_steps(run_dir: Path) -> list[int]:
    return sorted(int(m.group(1)) for p in (run_dir / "checkpoints").glob("global_step_*")
                  if p.is_dir() and (m := _STEP.match(p.name)))


def validated_checkpoints(run_dir: Path) -> list[CheckpointScore]:
    """The saved steps verl validated, in step order, with their validation metrics."""
    validation = {row["step"]: _val(row["data"]) for row in logged_steps(run_dir)}
    return [CheckpointScore(step=s, path=f"checkpoints/global_step_{s}", metrics={"valid": validation[s]})
            for s in saved_steps(run_dir) if validation.get(s)]


def ranking(run: FrozenRun) -> tuple[str, bool]:
    """(metric, lower is better) a verl run's checkpoints are ranked by: SFT's validation loss,
    else the run's select_metric (the mean over the validation data sources)."""
    return (VERL_SFT_METRIC, True) if run.kind == "sft" else (metric_name(run.select_metric), False)


def finish(run_dir: Path) -> TrainingOutcome:
    run = read_frozen_run(run_dir)
    saved = saved_steps(run_dir)
    if not saved:
        raise SystemExit(f"error: verl saved no checkpoint under {run_dir / 'checkpoints'} (trained zero steps?)")
    scores = validated_checkpoints(run_dir)
    name, lower = ranking(run)
    if scores:
        try:
            values = {c.step: headline(c, name) for c in scores}
        except MissingMetric as exc:
            raise SystemExit(f"error: {exc}") from None
        best = (min if lower else max)(scores, key=lambda c: (values[c.step], c.step))
        chosen = Chosen(step=best.step, path=best.path, why=f"best {name} on the validation "
                        f"data ({values[best.step]:.3f}) of {len(scores)} checkpoints")
    else:
        chosen = Chosen(step=saved[-1], path=f"checkpoints/global_step_{saved[-1]}", why="last checkpoint")
    total = run.hparams.get("total_steps")
    outcome = TrainingOutcome(trainer="verl", expected_steps=int(total) if total else None, checkpoints=scores,
                              chosen=chosen, stopped_early=stop_recorded(run_dir))
    write_outcome(run_dir, outcome)
    return outcome


def stop_recorded(run_dir: Path) -> Optional[str]:
    """The early-stop reason `engine.train.verl_watch` recorded, if it stopped this run."""
    try:
        return json.loads((run_dir / STOP_FILE).read_text(encoding="utf-8"))["reason"]
    except (OSError, ValueError, KeyError):
        return None


def _val(data: dict) -> dict[str, float]:
    """verl's validation metrics of one logged step (kept under their verl names)."""
    return {k: v for k, v in data.items() if k.startswith(("val-core/", "val-aux/")) or k == VERL_SFT_METRIC}


def headline(score: CheckpointScore, name: str) -> float:
    """`name` of one validated checkpoint; raises MissingMetric when verl did not log it."""
    metrics = score.metrics["valid"]
    if name == VERL_SFT_METRIC:
        if name not in metrics:
            raise MissingMetric(f"verl's validation at step {score.step} logged no {name!r}")
        return metrics[name]
    return verl_value(metrics, name, score.step)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.train.verl_finish")
    parser.add_argument("--run-dir", type=Path, required=True)
    args = parser.parse_args(argv)
    outcome = finish(args.run_dir.resolve())
    print(outcome.chosen.step)
    print(f"chosen {outcome.chosen.path}: {outcome.chosen.why}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
