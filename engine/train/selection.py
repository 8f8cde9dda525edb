"""Checkpoint selection and early stopping.

Each checkpoint is scored as soon as it is saved, in the training process (the slot it
holds is the free one): generated with the run's `select` protocol on its `select_on` /
`early_stop_on` datasets and the regression sets, judged, summarized under
`selection/checkpoint-N/`. Scores go to training.json, so a resumed run never scores a
checkpoint twice. The chosen checkpoint is the best by `select_metric` (default
accepted@1) on the select_on dataset, ties to the higher mean pass ratio, then the later
step; without select_on, the last one. Early stopping ends training after `patience`
scored checkpoints without a gain above `min_delta` on the early_stop_on dataset. A scored
checkpoint without the metric is an error (`engine.train.select_metric`), never a 0.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from transformers import TrainerCallback

from engine.evaluate.score import score_model
from engine.spec.model import EarlyStopSpec
from engine.train.early_stop import early_stop_reason
from engine.train.outcome import CheckpointScore, Chosen, TrainingOutcome, write_outcome
from engine.train.select_metric import metric_name, metric_value
from engine.train.session import TrainRun

TIE_BREAK = "pass_ratio_mean"


def score_checkpoint(run: TrainRun, checkpoint: Path, step: int) -> CheckpointScore:
    names = run.frozen.uses("select", "early_stop", "monitor")
    scored = score_model(run.run_dir, str(checkpoint), run.frozen, protocol="select", datasets=names,
                         out_dir=run.run_dir / "selection" / f"step-{step}")
    return CheckpointScore(step=step, path=str(checkpoint.relative_to(run.run_dir)),
                           metrics={s.dataset: s.metrics for s in scored})


class CheckpointScorer(TrainerCallback):
    """Scores every checkpoint when it is saved; stops training when early stopping says so."""

    def __init__(self, run: TrainRun) -> None:
        self.run = run
        self.metric = metric_name(run.frozen.select_metric)
        self.stop: Optional[EarlyStopSpec] = run.frozen.early_stop or EarlyStopSpec()

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        outcome = self.run.outcome()
        step = self.run.step_offset + state.global_step
        if outcome.score(step) is None:
            checkpoint = self.run.checkpoints / f"checkpoint-{state.global_step}"
            outcome.checkpoints.append(score_checkpoint(self.run, checkpoint, step))
            write_outcome(self.run.run_dir, outcome)
            print(f"scored {checkpoint.name}: {_headline(outcome.checkpoints[-1], self.metric)}", flush=True)
        reason = early_stop_reason(outcome, self.run.frozen.uses("early_stop"), self.metric, self.stop)
        if reason and not control.should_training_stop:
            control.should_training_stop = True
            outcome.stopped_early = reason
            write_outcome(self.run.run_dir, outcome)
            print(f"early stop: {reason}", flush=True)


def _headline(score: CheckpointScore, metric: str) -> str:
    return ", ".join(f"{d} {metric} " + (f"{m[metric]:.3f}" if metric in m else "missing")
                     for d, m in score.metrics.items())


def choose(run: TrainRun) -> Chosen:
    """The checkpoint children load: the best scored one on select_on, else the last saved."""
    outcome = run.outcome()
    select = run.frozen.uses("select")
    metric = metric_name(run.frozen.select_metric)
    last = run.last_checkpoint()
    if last is None:
        raise RuntimeError(f"training left no checkpoint under {run.checkpoints}")
    if not select or not outcome.checkpoints:
        return Chosen(step=run.step_offset + int(last.name.split("-")[1]), path=str(last.relative_to(run.run_dir)),
                      why="last checkpoint (no select_on)")
    name = select[0]

    def key(c: CheckpointScore) -> tuple[float, float, int]:
        return (metric_value(c.metrics, name, metric, c.step), metric_value(c.metrics, name, TIE_BREAK, c.step),
                c.step)

    best = max(outcome.checkpoints, key=key)
    return Chosen(step=best.step, path=best.path,
                  why=f"best {metric} on {name} ({key(best)[0]:.3f}) of {len(outcome.checkpoints)} checkpoints")
