"""What the cost model reads of a study: each run's frozen config, its GPUs, its parents, and
how many problems each dataset holds. Built from a plan (before anything runs) or from
lineage (the same frozen configs, for a study's pages and `status`), so both price alike.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional, Sequence

from engine.errors import SpecError
from engine.plan.model import Plan
from engine.runs.lineage import DatasetRecord, Lineage, RunRecord
from engine.spec.model import ExecutorKind, ModelRef
from engine.spec.registry import ModelEntry, Registry
from engine.spec.validated import ValidatedSpec
from engine.train.launch import params_b_of

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
    params_b: Optional[float]  # the base model's size: spelled out, from the registry, or its weight files
    notes: list[str] = field(default_factory=list)  # assumptions made for lack of facts
    # The base model's response-length prior ({median, sigma}: spelled out or its registry entry's),
    # used by every protocol that declares none; `model` names it for the forecast's notes.
    model_lengths: Optional[dict[str, float]] = None
    model: str = ""
    # The executor runs the evaluations of one checkpoint in one process (the local executor does;
    # the Ray executor submits one job per run, each loading its model).
    groups_evals: bool = True

    def by_id(self) -> dict[str, RunShape]:
        return {r.id: r for r in self.runs}


def mark_sample_scoring(runs: list[RunShape]) -> list[RunShape]:
    """Flag the evaluations whose target is a best_of_n run: they score its chosen samples."""
    best_of_n = {r.id for r in runs if r.kind == "best_of_n"}
    return [replace(r, scores_samples=True) if r.kind == "eval" and r.evaluates in best_of_n else r for r in runs]


@dataclass(frozen=True)
class BaseModelFacts:
    name: str
    params_b: Optional[float]
    lengths: Optional[dict[str, float]]


def _entry(path: Optional[str], registry: Registry) -> Optional[ModelEntry]:
    """The registry entry a resolved model path is (by name, hub id or local build folder)."""
    if not path:
        return None
    for name, entry in registry.models.items():
        if path in (name, entry.hf_id) or (entry.build is not None and entry.build.folder(name) == path):
            return entry
    return None


def base_model_facts(base_model: Any, registry: Registry) -> BaseModelFacts:
    """What pricing knows of the base model (a registry name, a resolved ModelRef, or the dict a frozen
    config holds): what the spec spelled out first, then its registry entry, then its weight files."""
    if isinstance(base_model, dict):
        base_model = ModelRef.model_validate(base_model)
    if isinstance(base_model, str):
        entry = registry.models.get(base_model)
        base_model = ModelRef(path=base_model)
    else:
        entry = _entry(getattr(base_model, "path", None), registry)
    declared = getattr(base_model, "response_tokens", None) or (entry.response_tokens if entry else None)
    size = getattr(base_model, "params_b", None) or (entry.params_b if entry else None)
    if size is None and base_model is not None:
        size = params_b_of(registry.models, base_model)
    return BaseModelFacts(name=str(getattr(base_model, "path", "") or ""), params_b=size,
                          lengths=declared.model_dump() if declared is not None else None)


def require_size(study: StudyShape, validated: ValidatedSpec) -> None:
    """A GPU forecast scales every throughput by the model's size: a size nothing gives (a spelled-out
    model the registry does not know, without weight files here) is refused, naming the field to add."""
    if study.params_b is not None:
        return
    raise SpecError([validated.loaded.diagnostic(
        ("base_model",), "the base model's size is unknown, and a GPU forecast scales every throughput by it",
        "add `params_b: <billions of parameters>` under base_model (e.g. `params_b: 14.8`), or name a model "
        "from registry/models.yaml")])


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
    """The planned study; `executor` ("local" | "ray" | "slurm") is the command line's `--executor`, which
    overrides the spec's `executor.kind` as it does for the run itself."""
    runs = [RunShape(id=r.id, label=r.label, kind=r.kind.value, phase=r.phase, variant=r.variant, seed=r.seed,
                     parents=tuple(r.parents), evaluates=r.evaluates, gpus=r.resources.gpus, cpus=r.resources.cpus,
                     config=r.config) for r in plan.runs]
    runs = mark_sample_scoring(runs)
    notes: list[str] = []
    sizes, sources = _sizes([r.config for r in runs], validated.registry, dict(validated.dataset_sizes), notes)
    written = validated.loaded.spec.base_model
    base = base_model_facts(written if isinstance(written, str) else validated.spec.base_model, validated.registry)
    return StudyShape(name=plan.spec_name, runs=runs, sizes=sizes, sources=sources, params_b=base.params_b,
                      notes=notes, model_lengths=base.lengths, model=written if isinstance(written, str) else base.name,
                      groups_evals=(ExecutorKind(executor) if executor else validated.spec.executor.kind)
                      in (ExecutorKind.local, ExecutorKind.slurm))


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
    base = base_model_facts(next((r.config.get("base_model") for r in runs), None), registry)
    # A Ray submission id on any run: the study ran on the Ray executor, one job per run (Slurm's
    # numeric job ids group evaluations, as the local executor does).
    ray = any(r.job_id and not r.job_id.isdigit() for r in records)
    return StudyShape(name=spec_name, runs=runs, sizes=sizes, sources=sources, params_b=base.params_b, notes=notes,
                      model_lengths=base.lengths, model=base.name, groups_evals=not ray)


def shape_of_lineage(lineage: Lineage, spec_name: str, registry: Registry) -> StudyShape:
    return shape_of_records(spec_name, lineage.plan_runs(spec_name), lineage.datasets(spec_name), registry)
