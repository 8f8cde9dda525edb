"""A finished run's outputs, recorded in lineage by the runner (lineage's only writer).

Called after a run's script exits 0 and its completion check passes, before it is marked
succeeded, so a succeeded run always has its numbers in lineage.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from engine.errors import UserError
from engine.evaluate.eval_run import METRICS_FILE, EvalOutput
from engine.plan.frozen import FrozenFlywheel, read_frozen_run
from engine.runs.lineage import ArtifactRecord, Lineage, Metric
from engine.runs.track import track_quietly
from engine.spec.model import TRAINED_KINDS
from engine.train.curves import curves
from engine.train.flywheel import (
    FLYWHEEL_SERIES,
    HARVEST_FILE,
    HARVEST_REPORT,
    REPAIR_ROWS,
    sha256_file,
)
from engine.train.flywheel_rows import flywheel_counts
from engine.train.outcome import MODEL_DIR, PAIRS_FILE, read_outcome
from engine.train.rollout_reward import TRACES_FILE

SAMPLES = "outputs/samples"
TRAIN_SERIES = "train"  # the dataset name of a training run's curves in lineage


def ingest(lineage: Lineage, run_id: str, kind: str, run_dir: Path) -> None:
    """Where a run's numbers enter lineage (and, from lineage, the spec's trackers)."""
    if kind == "eval":
        ingest_eval(lineage, run_id, Path(run_dir))
    elif kind in {k.value for k in TRAINED_KINDS}:
        ingest_training(lineage, run_id, Path(run_dir))
    else:
        return
    track_quietly(lineage, run_id, Path(run_dir))


def ingest_training(lineage: Lineage, run_id: str, run_dir: Path) -> None:
    """Curves (dataset `train`, one metric per series and step), checkpoint scores (`select/<metric>`
    at the checkpoint's step), and the artifacts: model/, the rollout traces, dpo pairs."""
    metrics = [Metric(run_id=run_id, dataset=TRAIN_SERIES, name=point.series, value=point.value, step=point.step)
               for point in curves(run_dir)]
    outcome = read_outcome(run_dir)
    for checkpoint in outcome.checkpoints if outcome else []:
        for dataset, values in checkpoint.metrics.items():
            metrics += [Metric(run_id=run_id, dataset=dataset, name=f"select/{name}", value=value,
                               step=checkpoint.step) for name, value in values.items()]
    for cycle in outcome.cycles if outcome else []:
        metrics += [Metric(run_id=run_id, dataset=TRAIN_SERIES, name=f"raft/{name}", value=cycle[name],
                           step=int(cycle["cycle"])) for name in ("acceptance", "rows")]
    wheel = _flywheel(run_dir)
    source = wheel.of_run if wheel else None
    artifacts = [ArtifactRecord(run_id=run_id, kind="model", path=str(run_dir / MODEL_DIR))]
    artifacts += [ArtifactRecord(run_id=run_id, kind=kind, path=str(path), sha256=sha256_file(path),
                                 source_run=source if kind == "pairs" else None)
                  for kind, path in (("traces", run_dir / TRACES_FILE), ("pairs", run_dir / PAIRS_FILE))
                  if path.is_file()]
    if wheel is not None:
        more_metrics, more_artifacts = flywheel_outputs(run_id, run_dir, wheel.of_run)
        metrics += more_metrics
        artifacts += more_artifacts
    lineage.record_outputs(metrics, artifacts)


def _flywheel(run_dir: Path) -> Optional[FrozenFlywheel]:
    try:
        return read_frozen_run(run_dir).flywheel
    except UserError:
        return None


def flywheel_outputs(run_id: str, run_dir: Path, source: str) -> tuple[list[Metric], list[ArtifactRecord]]:
    """The harvest and the rows built from it, with their sha256 and the run they came from, and
    the counts the pages show (dataset `flywheel`): failures harvested per class, pairs or rows
    built per class, problems without a chosen answer or without public tests."""
    artifacts = [ArtifactRecord(run_id=run_id, kind=kind, path=str(run_dir / rel), sha256=sha256_file(run_dir / rel),
                                source_run=source)
                 for kind, rel in (("harvest", HARVEST_FILE), ("harvest-report", HARVEST_REPORT),
                                   ("repair-rows", REPAIR_ROWS))
                 if (run_dir / rel).is_file()]
    metrics = [Metric(run_id=run_id, dataset=FLYWHEEL_SERIES, name=name, value=value)
               for name, value in flywheel_counts(run_dir).items()]
    return metrics, artifacts


def ingest_eval(lineage: Lineage, run_id: str, run_dir: Path) -> None:
    output = EvalOutput.model_validate_json((run_dir / "outputs" / METRICS_FILE).read_text())
    metrics = [Metric(run_id=run_id, dataset=d.dataset, protocol=d.protocol, seed=d.seed, name=name, value=value,
                      protocol_sha256=d.protocol_sha256, idlist_sha256=d.idlist_sha256, judge_version=d.judge_version)
               for d in output.datasets for name, value in d.metrics.items()]
    artifacts = [ArtifactRecord(run_id=run_id, kind="samples", path=str(run_dir / SAMPLES / f"{d.dataset}.jsonl"))
                 for d in output.datasets]
    lineage.record_outputs(metrics, artifacts)
