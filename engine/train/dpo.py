"""`python -m engine.train.dpo --run-dir DIR --model M`: offline DPO with trl's DPOTrainer.

First the pairs: K samples per `pairs_from` problem from the starting model (the run's
rollout protocol, n = K), judged, then one pair per problem by `engine.train.pairs`
(chosen: highest pass ratio; rejected: lowest, preferring SYNTAX/TIMEOUT; Δ ≥ min_delta;
all-zero problems dropped). The pairs and their quality report go to data/; a re-run
reuses the judged samples (resumable records under pairs/).

A flywheel run (`pairs_from: {failures: ...}`) pairs the harvested run's failures instead
(docs/flywheel.md). A harvest that gives no pair is a result, not a failure: the policy left
nothing of the declared classes to learn from (or no failure with an accepted answer to set
against it). The run then trains nothing, hands on its parent's model unchanged, and says so in
training.json (`unchanged`) and its pairs report (`nothing_to_learn`).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

from engine.files import atomic_write
from engine.errors import UserError
from engine.evaluate.records import SampleRecord
from engine.evaluate.score import score_model
from engine.judge.api import Judge
from engine.judge.verdict import SampleResult, Verdict
from engine.train import flywheel, flywheel_rows
from engine.train.outcome import PAIRS_FILE, Chosen, write_outcome
from engine.train.pairs import PairsResult, PreferencePair, build_pairs, report_path, write_pairs
from engine.train.selection import CheckpointScorer, choose
from engine.train.session import TrainRun, load_model, run_main


def sample_pairs(run: TrainRun) -> PairsResult:
    """Sample, judge and pair (written to data/pairs.jsonl with its report)."""
    names = run.frozen.uses("pairs")
    scored = score_model(run.run_dir, run.model, run.frozen, protocol="rollout", datasets=names,
                         out_dir=run.run_dir / "pairs")
    judged: dict[str, list[tuple[str, SampleResult]]] = {}
    for s in scored:
        for r in s.records:
            judged.setdefault(r.problem_id, []).append((r.completion, _result(r)))
    problems = [p for loaded in run.datasets("pairs") for p in loaded.problems]
    choice = run.training_choice()
    pairs = run.frozen.pairs
    result = build_pairs(problems, judged, min_delta=pairs.min_delta if pairs else 0.3,
                         prompt_for=lambda p: _plain(choice.prompt(p)))
    write_pairs(result, run.run_dir / PAIRS_FILE)
    return result


def hard_negative_pairs(run: TrainRun) -> tuple[list[PreferencePair], flywheel_rows.HardNegativesReport]:
    """The flywheel's pairs: the harvested run's failures on training problems as rejected answers
    (harvested by engine.train.flywheel, paired by engine.train.flywheel_rows), written to
    data/pairs.jsonl with their report. Each pair's prompt is the one its rejected answer was
    drawn with: recorded in the source's traces, else rendered by the source run's own rollout
    template (a harvest pass with `on:` samples with this run's)."""
    wheel = run.frozen.flywheel
    assert wheel is not None
    source = flywheel.source_dir(run.run_dir, wheel)
    problems = [p for loaded in run.datasets("harvest") for p in loaded.problems]
    if wheel.on is not None:  # a harvest pass of the source run's model over a train dataset
        score_model(run.run_dir, str(source / "model"), run.frozen, protocol="rollout", datasets=[wheel.on],
                    out_dir=run.run_dir / "harvest")
        samples = flywheel.record_samples(run.run_dir, [run.run_dir / "harvest"])
    else:
        samples = flywheel.source_samples(source, wheel.of_kind, wheel.classes)
    kept, harvested = flywheel.harvest(run.run_dir, wheel, {p.id: p for p in problems}, samples,
                                       run.run_dir if wheel.on is not None else source)
    choice = run.training_choice() if wheel.on is not None else flywheel.source_choice(source)
    policy = flywheel.start_policy(run.run_dir, wheel, source) if wheel.on is None else None
    with Judge(run.frozen.judge_config()) as judge:
        pairs, report = flywheel_rows.hard_negatives(problems, kept, harvested, wheel.chosen,
                                                     lambda p: _plain(choice.prompt(p)), choice.response, judge,
                                                     policy)
    if not pairs:
        report.nothing_to_learn = (
            f"no failure of {', '.join(wheel.classes)} among {harvested.samples} judged training samples of "
            f"{wheel.of}" if not report.problems_with_failures else
            f"{report.problems_with_failures} problem(s) with harvested failures, none with a chosen answer "
            f"({' or '.join(wheel.chosen)})")
    path = run.run_dir / PAIRS_FILE
    flywheel.write_jsonl(path, pairs)
    atomic_write(report_path(path), report.model_dump_json(indent=2) + "\n")
    print(f"harvest: {harvested.samples} judged training samples of {wheel.of} ({wheel.of_run}): "
          + ", ".join(f"{c} {n}" for c, n in harvested.harvested.items())
          + f"; pairs {len(pairs)} ({json.dumps(report.pairs_by_class)}), no chosen answer for "
          f"{len(report.no_chosen)} problem(s)", flush=True)
    return pairs, report


def hand_on_unchanged(run: TrainRun, why: str) -> None:
    """Nothing to train on: the parent's model is this run's, unchanged, and training.json says why."""
    parent = Path(run.model)
    if not parent.is_dir():  # a hub id: its files, saved once here, are what the children load
        model, tokenizer = load_model(run.model)
        parent = run.checkpoints / "checkpoint-0"
        model.save_pretrained(parent)
        tokenizer.save_pretrained(parent)
    outcome = run.outcome()
    outcome.expected_steps, outcome.unchanged = 0, why
    write_outcome(run.run_dir, outcome)
    run.hand_off(Chosen(step=0, path=os.path.relpath(parent, run.run_dir),
                        why=f"the parent's model, unchanged: nothing to learn from ({why})"))


def _result(record: SampleRecord) -> SampleResult:
    verdict = Verdict.INTERNAL_ERROR if record.verdict not in Verdict.__members__ else Verdict(record.verdict)
    return SampleResult(problem_id=record.problem_id, verdict=verdict, accepted=record.accepted,
                        passed=record.passed, total=record.total, pass_ratio=record.pass_ratio, wall_s=record.judge_s)


def _plain(prompt: Any) -> Any:
    return prompt if isinstance(prompt, str) else [m.model_dump() for m in prompt]


def dpo_dataset(pairs: Sequence[PreferencePair]) -> Any:
    from datasets import Dataset

    def turn(text: str) -> Any:
        return [{"role": "assistant", "content": text}]

    rows = [{"prompt": _plain(p.prompt), "chosen": turn(p.chosen), "rejected": turn(p.rejected)}
            if not isinstance(p.prompt, str) else {"prompt": p.prompt, "chosen": p.chosen, "rejected": p.rejected}
            for p in pairs]
    return Dataset.from_list(rows)


def train_dpo(run: TrainRun, pairs: Sequence[PreferencePair]) -> Any:
    from trl import DPOConfig, DPOTrainer

    model, tokenizer = load_model(run.model)
    args = run.args(DPOConfig, learning_rate=5e-7, beta=0.1, max_length=1024)
    extra = [CheckpointScorer(run)] if run.frozen.uses("select", "early_stop") else []
    trainer = DPOTrainer(model=model, args=args, train_dataset=dpo_dataset(pairs), processing_class=tokenizer,
                         callbacks=run.callbacks(*extra))
    run.train(trainer)
    return trainer


def main(argv: Optional[list[str]] = None) -> int:
    def body(run: TrainRun) -> None:
        if run.frozen.flywheel is not None:
            pairs, report = hard_negative_pairs(run)
            if report.nothing_to_learn is not None:
                print(f"nothing to learn from: {report.nothing_to_learn}; the parent's model is handed on unchanged",
                      flush=True)
                hand_on_unchanged(run, report.nothing_to_learn)
                return
            train_dpo(run, pairs)
            run.hand_off(choose(run))
            return
        result = sample_pairs(run)
        report = result.report
        print(f"pairs: {report.pairs} of {report.problems} problems ({report.samples} samples judged; "
              f"dropped {report.dropped}); report: {report_path(run.run_dir / PAIRS_FILE).name}", flush=True)
        if not result.pairs:
            raise UserError(f"no preference pairs from {report.samples} judged samples ({report.dropped})\n"
                            "  fix: start from a model that solves some problems (an SFT parent), raise pairs.k, "
                            "or lower pairs.min_delta")
        train_dpo(run, result.pairs)
        run.hand_off(choose(run))

    return run_main("python -m engine.train.dpo", argv, body)


if __name__ == "__main__":
    sys.exit(main())
