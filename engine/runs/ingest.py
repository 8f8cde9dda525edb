"""A finished run's outputs, recorded in lineage by the runner (lineage's only writer).

Called after a run's script exits 0 and its completion check passes, before it is marked
succeeded, so a succeeded run always has its numbers in lineage.
"""

from __future__ import annotations

from pathlib import Path

from engine.evaluate.run import METRICS_FILE, EvalOutput
from engine.runs.lineage import ArtifactRecord, Lineage, Metric

SAMPLES = "outputs/samples"


def ingest(lineage: Lineage, run_id: str, kind: str, run_dir: Path) -> None:
    if kind == "eval":
        ingest_eval(lineage, run_id, Path(run_dir))


def ingest_eval(lineage: Lineage, run_id: str, run_dir: Path) -> None:
    output = EvalOutput.model_validate_json((run_dir / "outputs" / METRICS_FILE).read_text())
    for d in output.datasets:
        for name, value in d.metrics.items():
            lineage.record_metric(Metric(run_id=run_id, dataset=d.dataset, protocol=d.protocol, seed=d.seed,
                                         name=name, value=value, protocol_sha256=d.protocol_sha256,
                                         idlist_sha256=d.idlist_sha256, judge_version=d.judge_version))
        lineage.record_artifact(ArtifactRecord(run_id=run_id, kind="samples",
                                               path=str(run_dir / SAMPLES / f"{d.dataset}.jsonl")))
