"""`rlvr-run status`: what ran, what runs, what is blocked, and each run's headline metric.

Read-only: it opens lineage in WAL read mode and never takes the runs lock, so
it works while a runner executes.

The headline metric of a run is the first of HEADLINE_METRICS it recorded, on
the first dataset it evaluates (spec order), at its final step (else its
latest step). Runs that evaluate nothing (training runs) have none: their
evaluation runs carry the numbers.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

from engine.errors import UserError
from engine.records import Record
from engine.runs.lineage import (
    LINEAGE_FILE,
    Metric,
    RunRecord,
    RunState,
    open_lineage,
    parse_iso,
)

HEADLINE_METRICS = ("accepted@1", "pass@1", "pass_ratio_mean")


class Headline(Record):
    name: str
    dataset: str
    value: float
    step: int


class StatusRow(Record):
    id: str
    spec_name: str
    phase: str
    variant: Optional[str]
    seed: Optional[int]
    kind: str
    state: RunState
    attempt: int
    started_at: Optional[str]
    finished_at: Optional[str]
    duration_s: Optional[float]
    reason: Optional[str]
    headline: Optional[Headline] = None


class StatusReport(Record):
    spec: Optional[str]
    runs: list[StatusRow]
    counts: dict[str, int]
    note: str = ""  # why there is nothing to show, when there is not


def spec_name_of(spec: str) -> str:
    """SPEC as given on the command line: a spec file (its `name:`) or a spec name."""
    path = Path(spec)
    if not path.is_file():
        return spec
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    try:
        data = YAML(typ="safe").load(path.read_text())
    except YAMLError as exc:
        raise UserError(f"{path}: not valid YAML ({exc}); run `rlvr-run validate {path}`") from None
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        raise UserError(f"{path}: has no `name:`; run `rlvr-run validate {path}`")
    return data["name"]


def collect_status(runs_dir: Path | str, spec: Optional[str] = None) -> StatusReport:
    name = spec_name_of(spec) if spec else None
    path = Path(runs_dir) / LINEAGE_FILE
    if not path.exists():
        return StatusReport(spec=name, runs=[], counts={}, note=f"nothing has run yet: no {path} (run `rlvr-run SPEC` first)")
    with open_lineage(path, readonly=True) as lineage:
        records = lineage.runs(spec_name=name)
        if not records:
            known = ", ".join(lineage.spec_names()) or "none"
            return StatusReport(spec=name, runs=[], counts={}, note=f"no runs of spec {name!r} in {path} (specs there: {known})")
        ids = [rec.id for rec in records]
        metrics: dict[str, list[Metric]] = {run_id: [] for run_id in ids}
        for m in lineage.all_metrics(ids, names=HEADLINE_METRICS):
            metrics[m.run_id].append(m)
        evaluated = lineage.evaluated_datasets(ids)
        rows = [_row(rec, metrics[rec.id], evaluated[rec.id]) for rec in records]
    counts = Counter(r.state.value for r in rows)
    return StatusReport(spec=name, runs=rows, counts={s.value: counts[s.value] for s in RunState if counts[s.value]})


def _row(rec: RunRecord, metrics: list[Metric], evaluated: list[str]) -> StatusRow:
    return StatusRow(
        id=rec.id, spec_name=rec.spec_name, phase=rec.phase, variant=rec.variant, seed=rec.seed, kind=rec.kind,
        state=rec.state, attempt=rec.attempt, started_at=rec.started_at, finished_at=rec.finished_at,
        duration_s=_duration(rec), reason=rec.reason,
        headline=pick_headline(metrics, evaluated),
    )


def _duration(rec: RunRecord) -> Optional[float]:
    start = parse_iso(rec.started_at)
    if start is None:
        return None
    end = parse_iso(rec.finished_at) if rec.state is not RunState.running else datetime.now(timezone.utc)
    return None if end is None else max(0.0, (end - start).total_seconds())


def pick_headline(metrics: list[Metric], evaluated: list[str]) -> Optional[Headline]:
    datasets = evaluated + sorted({m.dataset for m in metrics} - set(evaluated))
    for dataset in datasets:
        for name in HEADLINE_METRICS:
            found = [m for m in metrics if m.dataset == dataset and m.name == name]
            if found:
                best = next((m for m in found if m.step == -1), max(found, key=lambda m: m.step))
                return Headline(name=name, dataset=dataset, value=best.value, step=best.step)
    return None
