"""The metric log under accelerate: transformers calls a callback on every process, and only the
first may write, or each step is logged once per process (and with that process's own stats)."""

from __future__ import annotations

import json

from transformers import TrainerState

from engine.train.outcome import TRAINING_FILE
from engine.train.session import StepLog, TrainRun


def _state(first: bool) -> TrainerState:
    state = TrainerState(global_step=1, max_steps=2)
    state.is_world_process_zero = first
    return state


def test_only_the_first_process_writes_the_metric_log(tmp_path):
    ranks = [StepLog(TrainRun(run_dir=tmp_path, frozen=None, model="m", attempt="1"),  # type: ignore[arg-type]
                     stats=lambda rank=rank: {"reward": float(rank)}) for rank in range(2)]
    for rank, log in enumerate(ranks):
        log.on_train_begin(None, _state(rank == 0), None)
        log.on_log(None, _state(rank == 0), None, logs={"loss": 1.0})
    lines = [json.loads(line) for line in ranks[0].path.read_text().splitlines()]
    assert lines == [{"step": 1, "data": {"loss": 1.0, "reward": 0.0, "step_time_s": 0.0}}]
    assert (tmp_path / TRAINING_FILE).is_file()
