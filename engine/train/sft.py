"""`python -m engine.train.sft --run-dir DIR --model M`: supervised fine-tuning with trl's SFTTrainer
on the reference solutions of the run's `train` datasets, as conversational prompt/completion rows
so the loss covers the answer only."""

from __future__ import annotations

import sys
from typing import Any, Optional

from engine.train.curriculum import ordered
from engine.train.rows import sft_rows
from engine.train.selection import CheckpointScorer, choose
from engine.train.session import TrainRun, load_model, run_main


def sft_dataset(run: TrainRun, rows: Optional[list[dict[str, Any]]] = None) -> Any:
    from datasets import Dataset

    if rows is None:
        skipped: list[str] = []
        choice = run.choice("select")
        rows = [r for loaded in ordered(run.frozen, run.run_dir, run.model, run.datasets("train"))
                for r in sft_rows(loaded, choice, skipped, split_prompt=True)]
    return Dataset.from_list(rows)


def train_sft(run: TrainRun, model_path: str, rows: Optional[list[dict[str, Any]]] = None, **defaults: Any) -> Any:
    """One SFTTrainer run to its end (resumed when checkpoints exist); returns the trainer."""
    from trl import SFTConfig, SFTTrainer

    model, tokenizer = load_model(model_path)
    args = run.args(SFTConfig, **{"learning_rate": 1e-5, "max_length": 1024, "completion_only_loss": True,
                                  **defaults})
    extra = [CheckpointScorer(run)] if run.frozen.uses("select", "early_stop") else []
    trainer = SFTTrainer(model=model, args=args, train_dataset=sft_dataset(run, rows), processing_class=tokenizer,
                         callbacks=run.callbacks(*extra))
    run.train(trainer)
    return trainer


def main(argv: Optional[list[str]] = None) -> int:
    def body(run: TrainRun) -> None:
        train_sft(run, run.model)
        run.hand_off(choose(run))

    return run_main("python -m engine.train.sft", argv, body)


if __name__ == "__main__":
    sys.exit(main())
