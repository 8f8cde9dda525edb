"""A finished run's outputs, recorded in lineage by the runner (lineage's only writer).

Called after a run's script exits 0 and its completion check passes, before it is marked
succeeded, so a succeeded run always has its numbers in lineage.
"""

from __future__ import annotations

from pathlib import Path

from engine.evaluate.run import METRICS_FILE, EvalOutput
from engine.runs.lineage import ArtifactRecord, Lineage, Metric
from engine.spec.model import TRAINED_KINDS
from engine.train.curves import curves
from engine.train.outcome import MODEL_DIR, PAIRS_FILE, read_outcome
from engine.train.rollout_reward import TRACES_FILE

SAMPLES = "outputs/samples"
TRAIN_SERIES = "train"  # the dataset name of a training run's curves in lineage


def ingest(lineage: Lineage, run_id: str, kind: str, run_dir: Path) -> None:
    if kind == "eval":
        ingest_eval(lineage, run_id, Path(run_dir))
    elif kind in {k.value for k in TRAINED_KINDS}:
        ingest_training(lineage, run_id, Path(run_dir))


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
    artifacts = [ArtifactRecord(run_id=run_id, kind="model", path=str(run_dir / MODEL_DIR))]
    artifacts += [ArtifactRecord(run_id=run_id, kind=kind, path=str(path))
                  for kind, path in (("traces", run_dir / TRACES_FILE), ("pairs", run_dir / PAIRS_FILE))
                  if path.is_file()]
    lineage.record_outputs(metrics, artifacts)


def ingest_eval(lineage: Lineage, run_id: str, run_dir: Path) -> None:
    output = EvalOutput.model_validate_json((run_dir / "outputs" / METRICS_FILE).read_text())
    metrics = [Metric(run_id=run_id, dataset=d.dataset, protocol=d.protocol, seed=d.seed, name=name, value=value,
                      protocol_sha256=d.protocol_sha256, idlist_sha256=d.idlist_sha256, judge_version=d.judge_version)
               for d in output.datasets for name, value in d.metrics.items()]
    artifacts = [ArtifactRecord(run_id=run_id, kind="samples", path=str(run_dir / SAMPLES / f"{d.dataset}.jsonl"))
                 for d in output.datasets]
    lineage.record_outputs(metrics, artifacts)
