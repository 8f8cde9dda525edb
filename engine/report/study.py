"""A study as the result pages see it, read from lineage and run outputs alone.

Evaluation runs carry the numbers: each belongs to a *unit* (a phase, or a variant of one)
and a seed, and evaluates datasets under a protocol, an id list and a judge version — the
context that decides whether two numbers may stand side by side.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

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


SOURCE, READ_AS_DIGESTED = "source", "read as digested"  # `Cell.memo` keys of `Cell.kept`


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
            if self.memo.get(SOURCE):  # what was read is what `kept` digested before: only then keep values
                self.memo[READ_AS_DIGESTED] = self._source() == self.memo[SOURCE]
        return self._samples

    def kept(self, name: str, compute: Callable[["Cell"], Optional[dict[str, float]]]) -> Optional[dict[str, float]]:
        """`compute(self)` (values its samples give, per problem id; callers only read them), once per
        cell, and once per process for the same content of the files `samples()` reads: pages are
        regenerated while a study runs, and reading every finished run's records again was most of
        that. The content is digested before the samples are read and again after; values are kept
        only when the two agree, so they are never filed under content they were not computed from."""
        if name in self.memo:
            return self.memo[name]
        if SOURCE not in self.memo:  # samples already given or read: no digest of theirs to key by
            self.memo[SOURCE] = self._source() if self._samples is None else None
        source = self.memo[SOURCE]
        found = _KEPT.get((source, name)) if source else None
        if found is not None:
            value = dict(found[0]) if found[0] is not None else None
        else:
            value = compute(self)
            if source and self.memo.get(READ_AS_DIGESTED):
                _KEPT.put((source, name), (dict(value) if value is not None else None,))
        self.memo[name] = value
        return value

    def _source(self) -> Optional[str]:
        """A digest of everything `samples()` reads: the run's metrics file (its records' keys), its
        records file, the dataset and the judge version; None when a file cannot be read."""
        outputs = Path(self.run.run_dir or "/nonexistent") / "outputs"
        digest = hashlib.sha256()
        try:
            for part in (self.dataset.encode(), self.context.judge_version.encode(), (outputs / METRICS_FILE).read_bytes(),
                         (outputs / "samples" / f"{self.dataset}.jsonl").read_bytes()):
                digest.update(len(part).to_bytes(8, "little") + part)
        except OSError:
            return None
        return digest.hexdigest()


class _Kept:
    """Values computed from run records, by the digest of the records' content (`Cell.kept`):
    the least recently used go once more than KEPT_VALUES numbers are held."""

    def __init__(self, limit: int) -> None:
        self.limit, self.held = limit, 0
        self._entries: OrderedDict[tuple[str, str], tuple[Optional[dict[str, float]]]] = OrderedDict()
        self._lock = threading.Lock()  # pages may be written from more than one thread

    def get(self, key: tuple[str, str]) -> Optional[tuple[Optional[dict[str, float]]]]:
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
            return found

    def put(self, key: tuple[str, str], entry: tuple[Optional[dict[str, float]]]) -> None:
        with self._lock:
            if key in self._entries:
                return
            self._entries[key] = entry
            self.held += _size(entry)
            while self.held > self.limit and self._entries:
                self.held -= _size(self._entries.popitem(last=False)[1])


def _size(entry: tuple[Optional[dict[str, float]]]) -> int:
    return 1 + len(entry[0] or ())


KEPT_VALUES = 1_000_000  # numbers kept across regenerations: tens of MB, a 1,000-run study's several times over
_KEPT = _Kept(KEPT_VALUES)


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
        """The recorded spec's data: parsed once per text (every page asks), each caller its own copy."""
        return copy.deepcopy(_spec_data(self.spec.text)) if self.spec is not None else {}

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


@functools.lru_cache(maxsize=8)
def _spec_data(text: str) -> dict[str, Any]:
    try:
        data = YAML(typ="safe").load(text)
    except Exception:  # a recorded spec always parsed once; never let the report die on it
        return {}
    return data if isinstance(data, dict) else {}


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
