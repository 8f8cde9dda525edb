"""What the cost model reads of a study: each run's frozen config, its GPUs, its parents, and
how many problems each dataset holds. Built from a plan (before anything runs) or from
lineage (the same frozen configs, for a study's pages and `status`), so both price alike.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional, Sequence

from engine.plan.model import Plan
from engine.runs.lineage import DatasetRecord, Lineage, RunRecord
from engine.spec.model import ExecutorKind
from engine.spec.registry import Registry
from engine.spec.validated import ValidatedSpec

UNKNOWN_SIZE = 1000  # problems assumed for a dataset whose size nothing tells (said in the notes)


@dataclass(frozen=True)
class RunShape:
    id: str
    label: str
    kind: str
    phase: str
    variant: Optional[str]
    seed: Optional[int]
    parents: tuple[str, ...]
    evaluates: Optional[str]
    gpus: int
    cpus: int
    config: dict[str, Any]
    # an evaluation of a best_of_n run's chosen samples: it judges them, loads and generates nothing
    scores_samples: bool = False

    @property
    def unit(self) -> str:
        return self.phase + (f"/{self.variant}" if self.variant else "")

    def protocol(self, use: str) -> dict[str, Any]:
        return dict((self.config.get("protocols") or {}).get(use) or {})

    def hparam(self, *names: str, default: Any = None) -> Any:
        """The first of `names` set in hparams, then in trainer overrides (last dotted part)."""
        hp = self.config.get("hparams") or {}
        over = {k.rsplit(".", 1)[-1]: v for k, v in (self.config.get("overrides") or {}).items()}
        for name in names:
            if hp.get(name) is not None:
                return hp[name]
        for name in names:
            if over.get(name) is not None:
                return over[name]
        return default

    def datasets(self, use: str) -> list[str]:
        return [n for n, d in (self.config.get("datasets") or {}).items() if use in (d.get("uses") or [])]


@dataclass(kw_only=True)
class StudyShape:
    name: str
    runs: list[RunShape]
    sizes: dict[str, int]  # dataset → problems
    sources: dict[str, str]  # dataset → registry source
    params_b: Optional[float]  # the base model's size, when the registry knows it
    notes: list[str] = field(default_factory=list)  # assumptions made for lack of facts
    # The executor runs the evaluations of one checkpoint in one process (the local executor does;
    # the Ray executor submits one job per run, each loading its model).
    groups_evals: bool = True

    def by_id(self) -> dict[str, RunShape]:
        return {r.id: r for r in self.runs}


def mark_sample_scoring(runs: list[RunShape]) -> list[RunShape]:
    """Flag the evaluations whose target is a best_of_n run: they score its chosen samples."""
    best_of_n = {r.id for r in runs if r.kind == "best_of_n"}
    return [replace(r, scores_samples=True) if r.kind == "eval" and r.evaluates in best_of_n else r for r in runs]


def _params_b(base_model: Any, registry: Registry) -> Optional[float]:
    entry = registry.models.get(base_model) if isinstance(base_model, str) else None
    return entry.params_b if entry else None


def _idlist_size(path: Path) -> Optional[int]:
    try:
        return sum(1 for line in path.read_text(encoding="utf-8").splitlines()
                   if line.strip() and not line.lstrip().startswith("#"))
    except OSError:
        return None


def _size(name: str, ds: dict[str, Any], registry: Registry, loaded: dict[str, int], notes: list[str]) -> int:
    if name in loaded:
        return loaded[name]
    if ds.get("ids_file"):
        path = Path(ds["ids_file"])
        found = _idlist_size(path if path.is_absolute() else registry.project_root / path)
        if found is not None:
            return found
    source = registry.datasets.get(ds.get("source", ""))
    split = source.splits.get(ds.get("split") or source.default_split or "") if source else None
    if split is not None and split.size is not None:
        if ds.get("verified"):
            notes.append(f"{name}: priced at the split's {split.size} problems; `verified:` keeps fewer")
        return split.size
    notes.append(f"{name}: size unknown here, priced as {UNKNOWN_SIZE} problems")
    return UNKNOWN_SIZE


def _sizes(configs: list[dict[str, Any]], registry: Registry, loaded: dict[str, int],
           notes: list[str]) -> tuple[dict[str, int], dict[str, str]]:
    sizes: dict[str, int] = {}
    sources: dict[str, str] = {}
    for config in configs:
        for name, ds in (config.get("datasets") or {}).items():
            if name not in sizes:
                sizes[name] = _size(name, ds, registry, loaded, notes)
                sources[name] = ds.get("source", "")
    return sizes, sources


def shape_of_plan(plan: Plan, validated: ValidatedSpec, *, executor: Optional[str] = None) -> StudyShape:
    """The planned study; `executor` ("local" | "ray") is the command line's `--executor`, which
    overrides the spec's `executor.kind` as it does for the run itself."""
    runs = [RunShape(id=r.id, label=r.label, kind=r.kind.value, phase=r.phase, variant=r.variant, seed=r.seed,
                     parents=tuple(r.parents), evaluates=r.evaluates, gpus=r.resources.gpus, cpus=r.resources.cpus,
                     config=r.config) for r in plan.runs]
    runs = mark_sample_scoring(runs)
    notes: list[str] = []
    sizes, sources = _sizes([r.config for r in runs], validated.registry, dict(validated.dataset_sizes), notes)
    return StudyShape(name=plan.spec_name, runs=runs, sizes=sizes, sources=sources,
                      params_b=_params_b(validated.spec.base_model if isinstance(validated.spec.base_model, str)
                                         else None, validated.registry), notes=notes,
                      groups_evals=(ExecutorKind(executor) if executor else validated.spec.executor.kind)
                      is ExecutorKind.local)


def shape_of_record(rec: RunRecord) -> RunShape:
    config = json.loads(rec.config_json or "{}")
    resources = config.get("resources") or {}
    label = rec.phase + (f"/{rec.variant}" if rec.variant else "")
    if config.get("schedule"):
        label += f":{config['schedule']}"
    label += f"@{rec.seed}" if rec.seed is not None else ""
    return RunShape(id=rec.id, label=label, kind=str(getattr(rec.kind, "value", rec.kind)), phase=rec.phase,
                    variant=rec.variant, seed=rec.seed, parents=tuple(config.get("parents") or ()),
                    evaluates=config.get("evaluates"), gpus=int(resources.get("gpus", 0)),
                    cpus=int(resources.get("cpus", 1)), config=config)


def shape_of_records(spec_name: str, records: Sequence[RunRecord], datasets: Sequence[DatasetRecord],
                     registry: Registry) -> StudyShape:
    """The study as lineage recorded it (runs in the order they were planned)."""
    runs = mark_sample_scoring([shape_of_record(r) for r in records])
    loaded = {d.name: d.problems for d in datasets if d.problems}
    notes: list[str] = []
    sizes, sources = _sizes([r.config for r in runs], registry, loaded, notes)
    base = next((r.config.get("base_model") for r in runs), None)
    # A Ray submission id on any run: the study ran on the Ray executor, one job per run.
    return StudyShape(name=spec_name, runs=runs, sizes=sizes, sources=sources,
                      params_b=_params_b(base, registry), notes=notes,
                      groups_evals=not any(r.job_id for r in records))


def shape_of_lineage(lineage: Lineage, spec_name: str, registry: Registry) -> StudyShape:
    return shape_of_records(spec_name, lineage.plan_runs(spec_name), lineage.datasets(spec_name), registry)
