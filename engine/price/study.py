"""Pricing a whole study: before it runs (from its plan), and as it runs or after (from lineage):
the forecast, the comparisons it can detect, forecast against actual, and a refit of a profile."""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Optional, Sequence

from pydantic import BaseModel, Field

from engine.errors import UserError
from engine.plan.model import Plan
from engine.price.forecast import DRAWS, Forecast, forecast
from engine.price.power import Comparison, comparisons, undetectable
from engine.price.profiles import HARDWARE_FILE, Profile, load_profile
from engine.price.shapes import StudyShape, shape_of_plan, shape_of_records
from engine.runs.lineage import DatasetRecord, Lineage, RunRecord, RunState
from engine.spec.registry import Registry, project_registry
from engine.spec.validated import ValidatedSpec


class StudyPrice(BaseModel):
    forecast: Forecast
    comparisons: list[Comparison] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)


def registry_with_profiles(registry: Registry) -> Path:
    """The spec's registry when it holds hardware profiles, else the project's own."""
    return registry.root if (registry.root / HARDWARE_FILE).is_file() else project_registry()


def default_profile(study: StudyShape) -> str:
    return "h100" if any(r.gpus for r in study.runs) else "cpu"


def resolve_profile(study: StudyShape, name: Optional[str], registry: Registry) -> Profile:
    return load_profile(name or default_profile(study), registry_with_profiles(registry))


def price_plan(plan: Plan, validated: ValidatedSpec, *, gpu_type: Optional[str] = None, gpus: Optional[int] = None,
               nodes: int = 1, cpus: Optional[int] = None, price: Optional[float] = None,
               draws: int = DRAWS, executor: Optional[str] = None) -> StudyPrice:
    """The dry run's forecast and detectable differences for a planned study, on `executor` (the
    command line's `--executor`; default: the spec's)."""
    study = shape_of_plan(plan, validated, executor=executor)
    profile = resolve_profile(study, gpu_type, validated.registry)
    found = comparisons(study, profile.power)
    detect = validated.spec.detect
    return StudyPrice(forecast=forecast(study, profile, gpus=gpus, nodes=nodes, cpus=cpus, price=price, draws=draws),
                      comparisons=found, warnings=undetectable(found, detect.min_effect if detect else None))


# ---------------------------------------------------------------- actuals


def seconds_of(rec: RunRecord) -> Optional[float]:
    if rec.state is not RunState.succeeded or not rec.started_at or not rec.finished_at:
        return None
    return (datetime.fromisoformat(rec.finished_at) - datetime.fromisoformat(rec.started_at)).total_seconds()


def attributed_seconds(records: Sequence[RunRecord], forecast_s: dict[str, float]) -> dict[str, float]:
    """Each finished run's actual seconds. Runs done in one process (evaluations of one checkpoint:
    same host and pid, overlapping in time) are each stamped with the whole process's start and
    end, so the process's time is split among them in proportion to their forecasts."""
    finished = sorted(((r, s) for r in records if (s := seconds_of(r)) is not None),
                      key=lambda item: item[0].started_at or "")
    out: dict[str, float] = {}
    groups: list[list[RunRecord]] = []
    open_group: dict[tuple, tuple[list[RunRecord], datetime]] = {}
    for rec, seconds in finished:
        out[rec.id] = seconds
        if rec.pid is None:
            continue
        key = (rec.host, rec.pid)
        start, end = datetime.fromisoformat(rec.started_at or ""), datetime.fromisoformat(rec.finished_at or "")
        group = open_group.get(key)
        if group and start < group[1]:
            group[0].append(rec)
            open_group[key] = (group[0], max(group[1], end))
        else:
            groups.append([rec])
            open_group[key] = (groups[-1], end)
    for group in (g for g in groups if len(g) > 1):
        whole = (max(datetime.fromisoformat(r.finished_at or "") for r in group)
                 - min(datetime.fromisoformat(r.started_at or "") for r in group)).total_seconds()
        weights = [max(forecast_s.get(r.id, 0.0), 0.0) for r in group]
        total = sum(weights)
        for rec, weight in zip(group, weights):
            out[rec.id] = whole * (weight / total if total else 1 / len(group))
    return out


class KindActual(BaseModel):
    kind: str
    runs: int
    forecast_s: float  # P50, summed over the kind's finished runs
    actual_s: float

    @property
    def error(self) -> float:
        return self.forecast_s / self.actual_s - 1 if self.actual_s else 0.0


class RunActual(BaseModel):
    id: str
    label: str
    kind: str
    forecast_s: float
    low_s: float
    high_s: float
    actual_s: Optional[float]


class Versus(BaseModel):
    """Forecast against what a study then took."""

    study: str
    profile: str
    slots: int
    runs: list[RunActual]
    kinds: list[KindActual]
    forecast_wall_s: float
    forecast_wall_band: tuple[float, float]
    actual_wall_s: Optional[float]  # first start to last finish, when every run succeeded
    finished: int
    total: int

    @property
    def wall_error(self) -> Optional[float]:
        return self.forecast_wall_s / self.actual_wall_s - 1 if self.actual_wall_s else None


def spec_registry(spec_path: Optional[str]) -> Registry:
    """The registry nearest the study's spec file (the project's own when it is gone)."""
    from engine.spec.registry import find_registry, load_registry

    where = Path(spec_path).parent if spec_path and Path(spec_path).parent.is_dir() else None
    return load_registry(find_registry(where))


def observed_slots(records: Sequence[RunRecord], slot: str) -> Optional[int]:
    """The most GPUs (or CPU slots) the study's runs held at once: the executor it ran on. Runs
    recorded with one process (the local executor runs a checkpoint's evaluations together) held
    one slot between them, not one each."""
    held: list[list] = []  # [process or run, start, end, slots], a process's overlapping runs merged
    for rec in sorted((r for r in records if r.started_at and r.finished_at), key=lambda r: r.started_at or ""):
        config = json.loads(rec.config_json or "{}").get("resources") or {}
        size = int(config.get("gpus", 0)) if slot == "GPU" else max(int(config.get("cpus", 1)), 1)
        start, end = datetime.fromisoformat(rec.started_at or ""), datetime.fromisoformat(rec.finished_at or "")
        owner = (rec.host, rec.pid) if rec.pid else rec.id
        same = next((h for h in held if h[0] == owner and start <= h[2]), None)
        if same is not None:  # a pid is reused only after its process ended: overlap means the same process
            same[2], same[3] = max(same[2], end), max(same[3], size)
        else:
            held.append([owner, start, end, size])
    points = [(h[1], h[3]) for h in held] + [(h[2], -h[3]) for h in held]
    peak = now = 0
    for _, change in sorted(points, key=lambda p: (p[0], p[1])):
        now += change
        peak = max(peak, now)
    return peak or None


def versus(spec_name: str, records: Sequence[RunRecord], datasets: Sequence[DatasetRecord], *,
           gpu_type: Optional[str] = None, gpus: Optional[int] = None, nodes: int = 1, cpus: Optional[int] = None,
           draws: int = DRAWS, registry: Optional[Registry] = None, fc: Optional[Forecast] = None) -> Versus:
    """Each finished run's duration beside its forecast, per kind, and for the study's wall time; the
    study is packed on the slots it was seen to use unless --gpus / --cpus say otherwise."""
    registry = registry or spec_registry(None)
    fc = fc or forecast_records(spec_name, records, datasets, registry=registry, gpu_type=gpu_type, gpus=gpus,
                                nodes=nodes, cpus=cpus, draws=draws)
    actual = attributed_seconds(records, {r.id: r.seconds.p50 for r in fc.runs})
    rows = [RunActual(id=r.id, label=r.label, kind=r.kind, forecast_s=r.seconds.p50, low_s=r.seconds.p10,
                      high_s=r.seconds.p90, actual_s=actual.get(r.id)) for r in fc.runs]
    by_kind: dict[str, list[RunActual]] = defaultdict(list)
    for row in rows:
        if row.actual_s is not None:
            by_kind[row.kind].append(row)
    kinds = [KindActual(kind=k, runs=len(v), forecast_s=sum(r.forecast_s for r in v),
                        actual_s=sum(r.actual_s or 0.0 for r in v)) for k, v in by_kind.items()]
    finished = [r for r in records if seconds_of(r) is not None]
    wall = None
    if finished and len(finished) == len(records):
        wall = (max(datetime.fromisoformat(r.finished_at or "") for r in finished)
                - min(datetime.fromisoformat(r.started_at or "") for r in finished)).total_seconds()
    return Versus(study=spec_name, profile=fc.profile, slots=fc.slots, runs=rows, kinds=kinds,
                  forecast_wall_s=fc.wall_s.p50, forecast_wall_band=(fc.wall_s.p10, fc.wall_s.p90),
                  actual_wall_s=wall, finished=len(finished), total=len(records))


def versus_lineage(lineage: Lineage, spec_name: str, **options) -> Versus:
    spec = lineage.spec(spec_name)
    return versus(spec_name, lineage.runs(spec_name=spec_name), lineage.datasets(spec_name),
                  registry=spec_registry(spec.path if spec else None), **options)


def forecast_records(spec_name: str, records: Sequence[RunRecord], datasets: Sequence[DatasetRecord], *,
                     registry: Optional[Registry] = None, gpu_type: Optional[str] = None, gpus: Optional[int] = None,
                     nodes: int = 1, cpus: Optional[int] = None, draws: int = DRAWS) -> Forecast:
    """The forecast of a recorded study, packed on the slots it was seen to use (unless told)."""
    registry = registry or spec_registry(None)
    study = shape_of_records(spec_name, records, datasets, registry)
    if not study.runs:
        raise UserError(f"no runs of {spec_name!r} recorded")
    profile = resolve_profile(study, gpu_type, registry)
    seen = observed_slots(records, profile.slot)
    if profile.slot == "CPU":
        cpus = cpus or seen
    else:
        need = max((r.gpus for r in study.runs), default=0)
        gpus = gpus or (seen if seen and seen >= need else None)
    return forecast(study, profile, gpus=gpus, nodes=nodes, cpus=cpus, draws=draws)


def detect_warnings(plan: Plan, validated: ValidatedSpec) -> list[str]:
    """`validate`'s warnings: declared ablations that cannot detect the spec's `detect.min_effect`."""
    detect = validated.spec.detect
    if detect is None:
        return []
    from engine.price.profiles import load_profiles

    study = shape_of_plan(plan, validated)
    prior = load_profiles(registry_with_profiles(validated.registry)).power
    return undetectable(comparisons(study, prior), detect.min_effect)
