"""`python -m engine.train.sft --run-dir DIR --model M`: supervised fine-tuning with trl's SFTTrainer
on the reference solutions of the run's `train` datasets, as conversational prompt/completion rows
so the loss covers the answer only."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Optional, Sequence

from engine.files import atomic_write
from engine.errors import UserError
from engine.evaluate.eval_run import Settings, generator_for
from engine.judge.api import Judge
from engine.train import flywheel, flywheel_rows
from engine.train.curriculum import ordered
from engine.train.rows import sft_rows
from engine.train.selection import CheckpointScorer, choose
from engine.train.session import TrainRun, load_model, run_main


def sft_dataset(run: TrainRun, rows: Optional[list[dict[str, Any]]] = None) -> Any:
    from datasets import Dataset

    if rows is None:
        with _main_process_first():
            skipped: list[str] = []
            choice = run.training_choice()
            rows = [r for loaded in ordered(run.frozen, run.run_dir, run.model, run.datasets("train"))
                    for r in sft_rows(loaded, choice, skipped, split_prompt=True)]
            if run.frozen.flywheel is not None:
                rows = repair_mix(run, rows)
    return Dataset.from_list(rows)


def _main_process_first() -> Any:
    """Under accelerate, the first process alone builds what needs an engine (the curriculum's pass
    rates, the flywheel's repair rows) and writes it to data/; the others wait for it and read it
    back (each would otherwise build engines over every GPU of the machine)."""
    import contextlib
    import os

    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return contextlib.nullcontext()
    from accelerate import PartialState

    return PartialState().main_process_first()


def repair_mix(run: TrainRun, base: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`base` with the flywheel's format-repair rows mixed in at the declared share; the distinct rows
    and their report go to data/. A re-run reuses them while the harvested files are unchanged (the
    repair loop samples: rebuilding would train a resumed run on other rows)."""
    wheel = run.frozen.flywheel
    assert wheel is not None and wheel.share is not None
    source = flywheel.source_dir(run.run_dir, wheel)
    rows_path, report_path = run.run_dir / flywheel.REPAIR_ROWS, run.run_dir / flywheel.MIX_REPORT
    report = _reusable(report_path, source, wheel.of_kind, wheel.classes)
    if report is not None and rows_path.is_file():
        rows = [json.loads(line) for line in rows_path.read_text(encoding="utf-8").splitlines() if line.strip()]
    else:
        problems = {p.id: p for loaded in run.datasets("harvest") for p in loaded.problems}
        kept, harvested = flywheel.harvest(run.run_dir, wheel, problems, flywheel.source_samples(source, wheel.of_kind, wheel.classes),
                                           source)
        choice = flywheel.source_choice(source)  # a failure is repaired from the prompt it answered
        decoding = flywheel.decoding_of_source(source)
        backend = generator_for(run.frozen, Settings(), str(source / "model"))
        try:
            with Judge(run.frozen.judge_config()) as judge:
                rows, report = flywheel_rows.repair_rows(problems, kept, harvested, lambda p: _dumps(choice.prompt(p)),
                                                    backend, decoding, judge, share=wheel.share,
                                                    tries=max(1, decoding.n), corrected=wheel.corrected,
                                                    respond=choice.response)
        finally:
            backend.close()
        flywheel.write_jsonl(rows_path, rows)
    mixed = flywheel_rows.mix(base, rows, report)
    atomic_write(report_path, report.model_dump_json(indent=2) + "\n")
    print(f"repair mix: {report.repaired} of {report.failures} harvested failures corrected "
          f"({json.dumps(report.corrected_from)}; {report.no_public_tests} on problems without public tests); "
          f"{report.mixed_rows} repair rows in "
          f"{len(mixed)} (share {report.achieved_share:.3f}, declared {report.share})", flush=True)
    return mixed


def _reusable(path: Path, source: Path, kind: str, classes: Sequence[str]) -> Optional[flywheel_rows.RepairRowsReport]:
    """The earlier report while the harvest would read the very same files: the same contents, and
    no file added since (a verl step dump, a RAFT cycle) that the rows were not built from."""
    try:
        report = flywheel_rows.RepairRowsReport.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    now = Counter(rel for rel, _ in flywheel.source_samples(source, kind, classes))
    same = dict(now) == {f.path: f.samples for f in report.harvest.sources} and all(
        flywheel.sha256_file(source / f.path) == f.sha256 for f in report.harvest.sources)
    return report if same else None


def _dumps(prompt: Any) -> Any:
    if isinstance(prompt, str):
        raise UserError("format-repair rows need a chat prompt (the feedback is a user turn)\n"
                        "  fix: use a chat prompt template")
    return [m.model_dump() for m in prompt]


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


def release_gpu_memory() -> None:
    """What a finished trainer held, given back (its objects collected, torch's cache emptied)."""
    import gc

    gc.collect()
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()
