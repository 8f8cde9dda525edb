"""A model scored inside another run: a training run's checkpoints on its selection sets, the
samples a dpo run builds pairs from, a raft cycle's samples, a curriculum's pass rates.

The same stages as an evaluation (generate → judge, resumable records keyed by content),
written under a folder of the calling run instead of its outputs/.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from engine.evaluate import stages
from engine.evaluate.backends.base import Backend
from engine.evaluate.metrics import reported_ks, summarize
from engine.evaluate.records import SampleRecord
from engine.evaluate.eval_run import Settings, generator_for, tasks
from engine.judge.api import Judge
from engine.plan.frozen import FrozenRun


@dataclass(frozen=True, kw_only=True)
class Scored:
    dataset: str
    metrics: dict[str, float]
    records: list[SampleRecord]  # first-round samples, one per (problem, sample)


def score_model(run_dir: Path, model: str, frozen: FrozenRun, *, protocol: str, datasets: list[str],
                out_dir: Path, backend: Optional[Backend] = None, settings: Settings = Settings(),
                on_progress: stages.ProgressHandler = stages._quiet) -> list[Scored]:
    """Generate with the run's `protocol` on `datasets`, judge, summarize (resumes from `out_dir`)."""
    todo = tasks(run_dir, model, frozen, protocol, datasets=datasets, out_dir=out_dir)
    judge_config = frozen.judge_config(protocol)
    owned = backend is None
    backend = backend or generator_for(frozen, settings, model, on_progress)
    out = []
    try:
        with Judge(judge_config) as judge:
            for task in todo:
                stages.generate_and_judge(task, backend, judge, judge.version, on_progress)
                records = [r for r in stages.samples(task) if r.round == 1]
                # the pass@k an evaluation with this protocol reports: what `select_metric` may name
                metrics = summarize(records, ks=reported_ks(task.decoding.n))
                out.append(Scored(dataset=task.dataset, metrics=metrics, records=records))
    finally:
        if owned:
            backend.close()
    return out
