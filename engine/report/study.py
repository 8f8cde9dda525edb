"""A study as the result pages see it, read from lineage and run outputs alone.

Evaluation runs carry the numbers: each belongs to a *unit* (a phase, or a variant of one)
and a seed, and evaluates datasets under a protocol, an id list and a judge version — the
context that decides whether two numbers may stand side by side.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ruamel.yaml import YAML

from engine.evaluate.records import Keys, SampleRecord, read
from engine.evaluate.eval_run import METRICS_FILE, EvalOutput
from engine.runs.lineage import (
    ArtifactRecord,
    AttemptRecord,
    DatasetRecord,
    Event,
    LeakRecord,
    Lineage,
    Metric,
    RunRecord,
    SpecRecord,
    WaiverRecord,
)
from engine.runs.status import OlderRun, older_runs


@dataclass(frozen=True)
class Context:
    """What must match for two numbers to be compared (isolation rules 4 and 5)."""

    protocol_sha256: str
    idlist_sha256: str
    judge_version: str


@dataclass
class Cell:
    """One evaluation run's numbers on one dataset."""

    run: RunRecord
    dataset: str
    context: Context
    metrics: dict[str, float]
    protocol: str
    _samples: Optional[list[SampleRecord]] = field(default=None, repr=False)
    # what is computed from its samples, by what asked (pages ask for the same many times)
    memo: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def samples(self) -> list[SampleRecord]:
        """Its judged samples (all rounds), read from the run's records once: those of the full
        keys (model, protocol, id list, decoding seed) its metrics were computed from, as the run's
        outputs/metrics.json records them; none when it does not (no interval, then)."""
        if self._samples is None:
            outputs = Path(self.run.run_dir or "/nonexistent") / "outputs"
            keys = _keys(outputs / METRICS_FILE, self.dataset)
            self._samples = [r for r in read(outputs / "samples" / f"{self.dataset}.jsonl", SampleRecord, keys)  # type: ignore[misc]
                             if r.judge_version == self.context.judge_version] if keys else []
        return self._samples


def _keys(path: Path, dataset: str) -> Optional[Keys]:
    try:
        output = EvalOutput.model_validate_json(path.read_text())
    except (OSError, ValueError):
        return None
    return next((d.keys for d in output.datasets if d.dataset == dataset), None)


@dataclass
class Study:
    name: str
    spec: Optional[SpecRecord]
    runs: list[RunRecord]
    configs: dict[str, dict[str, Any]]
    metrics: dict[str, list[Metric]]
    events: list[Event]
    waivers: list[WaiverRecord]
    datasets: list[DatasetRecord]
    artifacts: dict[str, list[ArtifactRecord]]
    leaks: list[LeakRecord] = field(default_factory=list)  # rule 3's waived leaks and warnings
    older: list[OlderRun] = field(default_factory=list)  # runs of an older plan of the spec: apart
    attempts: list[AttemptRecord] = field(default_factory=list)  # each run's attempts (`run_times`), as `events`

    def protocol(self, run: RunRecord) -> dict[str, Any]:
        """An evaluation run's frozen protocol (what its numbers were generated with)."""
        return self.configs[run.id].get("protocols", {}).get("evaluate", {})

    @property
    def spec_data(self) -> dict[str, Any]:
        if self.spec is None:
            return {}
        try:
            data = YAML(typ="safe").load(self.spec.text)
        except Exception:  # a recorded spec always parsed once; never let the report die on it
            return {}
        return data if isinstance(data, dict) else {}

    def unit(self, run: RunRecord) -> str:
        return run.phase + (f"/{run.variant}" if run.variant else "")

    def units(self) -> list[str]:
        """Units in plan order (the base model first)."""
        out: list[str] = []
        for run in self.runs:
            if self.unit(run) not in out:
                out.append(self.unit(run))
        return out

    def evaluations(self, schedule: Optional[str] = None) -> list[RunRecord]:
        return [r for r in self.runs if r.kind == "eval" and (schedule is None or self.configs[r.id].get("schedule") == schedule)]

    def trained(self) -> list[RunRecord]:
        return [r for r in self.runs if r.kind in ("sft", "dpo", "grpo", "repair", "raft")]

    def cells(self, run: RunRecord) -> list[Cell]:
        """One cell per (dataset, protocol) the run recorded: numbers of two protocols never merge
        into one cell (the columns then keep each seed once, `main_table.column`)."""
        by_dataset: dict[tuple[str, str], list[Metric]] = {}
        for m in self.metrics.get(run.id, []):
            if m.step == -1:
                by_dataset.setdefault((m.dataset, m.protocol), []).append(m)
        out = []
        for (dataset, _), metrics in by_dataset.items():
            first = metrics[0]
            context = Context(first.protocol_sha256 or "", first.idlist_sha256 or "", first.judge_version or "")
            out.append(Cell(run=run, dataset=dataset, context=context, metrics={m.name: m.value for m in metrics},
                            protocol=first.protocol))
        return out

    def series(self, run_id: str) -> dict[str, dict[int, float]]:
        out: dict[str, dict[int, float]] = {}
        for m in self.metrics.get(run_id, []):
            if m.step >= 0:
                key = m.name if m.dataset == "train" else f"{m.dataset}/{m.name}"
                out.setdefault(key, {})[m.step] = m.value
        return out


def load_study(lineage: Lineage, name: str) -> Study:
    """The study as its latest plan: the runs an edit no longer plans are `older`, never a number."""
    runs = lineage.plan_runs(name)
    configs = {r.id: json.loads(r.config_json or "{}") for r in runs}
    ids = [r.id for r in runs]
    spec_ids = {r.id for r in lineage.runs(name)}
    metrics: dict[str, list[Metric]] = {}
    for m in lineage.all_metrics(ids):
        metrics.setdefault(m.run_id, []).append(m)
    return Study(name=name, spec=lineage.spec(name), runs=runs, configs=configs, metrics=metrics,
                 # every run's events, an older plan's too: a process it shared with a current run
                 # splits its time with it (`price.study.attributed_seconds`)
                 events=[e for e in lineage.events() if e.run_id in spec_ids], waivers=lineage.waivers(name),
                 datasets=lineage.datasets(name), artifacts={i: lineage.artifacts(i) for i in ids},
                 leaks=lineage.leaks(name), older=older_runs(lineage, name), attempts=lineage.attempts(spec_ids))
