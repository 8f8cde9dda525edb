"""Checkpoint selection and early stopping.

Each checkpoint is generated with the run's `select` protocol on its `select_on` /
`early_stop_on` datasets and the regression sets, judged, summarized under
`selection/checkpoint-N/`. On a CPU it is scored as soon as it is saved, in the training
process (the slot it holds is the free one). On a GPU the trainer holds the memory an engine
would need: the checkpoints are scored after training, once the trainer's memory is released,
each in a process of its own (`score_pending`); only early stopping, which needs the scores
while training, scores each as it is saved, in a process of its own beside the trainer. Under
accelerate only the first process scores. Scores go to training.json, so a resumed run never scores a
checkpoint twice. The chosen checkpoint is the best by `select_metric` (default
accepted@1) on the select_on dataset, ties to the higher mean pass ratio, then the later
step; without select_on, the last one. Early stopping ends training after `patience`
scored checkpoints without a gain above `min_delta` on the early_stop_on dataset. A scored
checkpoint without the metric is an error (`engine.train.select_metric`), never a 0.
"""

from __future__ import annotations

import argparse
import gc
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

from transformers import TrainerCallback

from engine.evaluate.score import score_model
from engine.spec.phases import EarlyStopSpec
from engine.train.early_stop import early_stop_reason
from engine.train.outcome import CheckpointScore, Chosen, TrainingOutcome, write_outcome
from engine.train.select_metric import metric_name, metric_value
from engine.train.session import TrainRun, is_main_process, run_main

TIE_BREAK = "pass_ratio_mean"


def score_checkpoint(run: TrainRun, checkpoint: Path, step: int, *, apart: bool = False) -> CheckpointScore:
    """`apart`: in a process of its own, whose engine's memory is returned when it exits (a GPU
    trainer's process keeps what it allocated; an engine built beside it would compete for it)."""
    if apart:
        return _score_apart(run, checkpoint, step)
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
        if not state.is_world_process_zero:  # under accelerate every process saves; one scores
            return
        on_gpu = _on_gpu()
        if on_gpu and not self.run.frozen.uses("early_stop"):
            return  # nothing needs the score before training ends: `choose` scores it once the trainer is gone
        outcome = self.run.outcome()
        step = self.run.step_offset + state.global_step
        if outcome.score(step) is None:
            checkpoint = self.run.checkpoints / f"checkpoint-{state.global_step}"
            outcome.checkpoints.append(score_checkpoint(self.run, checkpoint, step, apart=on_gpu))
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


def score_pending(run: TrainRun) -> None:
    """Score the saved checkpoints not scored yet: those a GPU trainer saved while it held its
    memory, each now in a process of its own once the trainer's memory is released."""
    if not run.frozen.uses("select", "early_stop") or not is_main_process():
        return
    outcome = run.outcome()
    saved = sorted((int(p.name.split("-")[1]), p) for p in run.checkpoints.glob("checkpoint-*")
                   if p.name.split("-")[1].isdigit() and (p / "trainer_state.json").is_file())
    pending = [(run.step_offset + n, p) for n, p in saved if outcome.score(run.step_offset + n) is None]
    if not pending:
        return
    gc.collect()
    if _on_gpu():
        import torch

        torch.cuda.empty_cache()
    for step, checkpoint in pending:
        outcome.checkpoints.append(score_checkpoint(run, checkpoint, step, apart=_on_gpu()))
        write_outcome(run.run_dir, outcome)
        print(f"scored {checkpoint.name}: {_headline(outcome.checkpoints[-1], metric_name(run.frozen.select_metric))}",
              flush=True)


def _on_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def _score_apart(run: TrainRun, checkpoint: Path, step: int) -> CheckpointScore:
    command = [sys.executable, "-m", "engine.train.selection", "--run-dir", str(run.run_dir), "--model", str(checkpoint),
               "--step", str(step)]
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, env={**os.environ, "RANK": "0"})
    if done.returncode != 0:
        raise RuntimeError(f"scoring {checkpoint.name} failed (exit {done.returncode}); its output is in this log")
    return CheckpointScore.model_validate_json(done.stdout.strip().splitlines()[-1])


def main(argv: Optional[list[str]] = None) -> int:
    """One checkpoint scored in this process: its CheckpointScore as the last line of stdout."""
    parser = argparse.ArgumentParser(prog="python -m engine.train.selection")
    parser.add_argument("--step", type=int, required=True)
    args, rest = parser.parse_known_args(argv)

    def body(run: TrainRun) -> None:
        print(score_checkpoint(run, Path(run.model), args.step).model_dump_json(), flush=True)

    return run_main("python -m engine.train.selection", rest, body)


def choose(run: TrainRun) -> Chosen:
    """The checkpoint children load: the best scored one on select_on, else the last saved (the
    checkpoints not scored yet are scored first)."""
    score_pending(run)
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


if __name__ == "__main__":
    sys.exit(main())
