"""Pricing a whole study: before it runs (from its plan), and as it runs or after (from lineage):
the forecast, the comparisons it can detect, forecast against actual, and a refit of a profile."""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Mapping, Optional, Sequence

from pydantic import BaseModel, Field

from engine.errors import SpecError, UserError
from engine.plan.model import Plan
from engine.price.forecast import DRAWS, Forecast, context, forecast
from engine.price.memory import problems
from engine.price.published import PublishedCheck, checks, load_published
from engine.price.power import Comparison, comparisons, spec_data, undetectable
from engine.price.profiles import HARDWARE_FILE, Profile, load_profile
from engine.price.shapes import StudyShape, require_size, shape_of_plan, shape_of_records
from engine.price.slurm import for_slurm
from engine.runs.lineage import Attempt, DatasetRecord, Lineage, RunRecord, RunState, RunTime
from engine.spec.registry import Registry, project_registry
from engine.spec.validated import ValidatedSpec


class StudyPrice(BaseModel):
    forecast: Forecast
    comparisons: list[Comparison] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    # a recipe's published figures beside the forecast of the same phase on the same GPUs
    published: list[PublishedCheck] = Field(default_factory=list)


def registry_with_profiles(registry: Registry) -> Path:
    """The spec's registry when it holds hardware profiles, else the project's own."""
    return registry.root if (registry.root / HARDWARE_FILE).is_file() else project_registry()


def default_profile(study: StudyShape) -> str:
    return "h100" if any(r.gpus for r in study.runs) else "cpu"


def resolve_profile(study: StudyShape, name: Optional[str], registry: Registry,
                    hardware: Optional[Path] = None) -> Profile:
    """The named profile (default: h100, or cpu for a study without GPUs), from the registry's hardware
    file with a user's own (`--hardware FILE`) over it."""
    return load_profile(name or default_profile(study), registry_with_profiles(registry), hardware)


def refuse_what_does_not_fit(study: StudyShape, profile: Profile, validated: ValidatedSpec) -> None:
    """A run whose model, optimizer state or KV cache cannot fit its GPUs is refused at its phase's line."""
    found = problems(context(study, profile, profile.median()), study.runs)
    if not found:
        return
    loaded, diagnostics, seen = validated.loaded, [], set()
    for p in found:
        if p.run.unit in seen:
            continue
        seen.add(p.run.unit)
        where = next((keys for keys in (("phases", p.run.phase, "resources"), ("phases", p.run.phase),
                                        ("evaluate", p.run.phase), ("base_model",))
                      if loaded.positions.found(*keys)), ("base_model",))
        diagnostics.append(loaded.diagnostic(where, f"does not fit {profile.name}'s memory: {p.message}", p.fix))
    raise SpecError(diagnostics)


def published_checks(study: StudyShape, validated: ValidatedSpec, hardware: Optional[Path] = None,
                     draws: int = DRAWS) -> list[PublishedCheck]:
    """A recipe's published figures (registry/published.yaml, by the spec's name) beside the forecast."""
    found = load_published(registry_with_profiles(validated.registry)) or load_published(project_registry())
    if study.name not in found:
        return []
    profiles = lambda name: load_profile(name, registry_with_profiles(validated.registry), hardware)  # noqa: E731
    try:
        return checks(study, found[study.name], profiles, draws)
    except StopIteration:  # the recipe was edited: a published phase is gone
        return []


def price_plan(plan: Plan, validated: ValidatedSpec, *, gpu_type: Optional[str] = None, gpus: Optional[int] = None,
               nodes: int = 1, cpus: Optional[int] = None, price: Optional[float] = None,
               currency: Optional[str] = None, draws: int = DRAWS, executor: Optional[str] = None,
               hardware: Optional[Path] = None) -> StudyPrice:
    """The dry run's forecast and detectable differences for a planned study, on `executor` (the
    command line's `--executor`; default: the spec's), with `hardware` (a user's own profiles file)."""
    study = shape_of_plan(plan, validated, executor=executor)
    profile = resolve_profile(study, gpu_type, validated.registry, hardware)
    if profile.slot == "GPU":
        require_size(study, validated)
        refuse_what_does_not_fit(study, profile, validated)
    if (executor or validated.spec.executor.kind.value) == "slurm":
        study, nodes = for_slurm(study, profile, gpus=gpus, nodes=nodes)
    found = comparisons(study, profile.power, spec_data(validated.spec))
    detect = validated.spec.detect
    return StudyPrice(forecast=forecast(study, profile, gpus=gpus, nodes=nodes, cpus=cpus, price=price,
                                        currency=currency, draws=draws),
                      comparisons=found, warnings=undetectable(found, detect.min_effect if detect else None),
                      published=published_checks(study, validated, hardware, draws) if profile.slot == "GPU" else [])


# ---------------------------------------------------------------- actuals


def _processes(times: Mapping[str, RunTime]) -> list[list[tuple[str, Attempt]]]:
    """Every attempt of every run, grouped by the process that did it: an attempt done in another
    run's process (evaluations of one checkpoint share one model load) joins that run's attempt
    which began last before it (the runner starts the process's own run first)."""
    groups: dict[tuple[str, int], list[tuple[str, Attempt]]] = {}
    alone: list[list[tuple[str, Attempt]]] = []
    for run_id, run in times.items():
        for i, attempt in enumerate(run.attempts):
            if attempt.process is None:
                groups.setdefault((run_id, i), []).insert(0, (run_id, attempt))
    for run_id, run in times.items():
        for attempt in run.attempts:
            if attempt.process is None:
                continue
            leader = times.get(attempt.process)
            began = [i for i, a in enumerate(leader.attempts) if a.process is None and a.start <= attempt.start] \
                if leader else []
            if began:
                groups[(attempt.process, began[-1])].append((run_id, attempt))
            else:
                alone.append([(run_id, attempt)])
    return [*groups.values(), *alone]


def _span(group: list[tuple[str, Attempt]], now: datetime) -> tuple[datetime, datetime]:
    return min(a.start for _, a in group), max(a.end or now for _, a in group)


def attributed_seconds(records: Sequence[RunRecord], forecast_s: dict[str, float],
                       times: Mapping[str, RunTime]) -> dict[str, float]:
    """Each succeeded run's actual seconds: the sum of its attempts (lineage's events), not its last
    one. An attempt done in a process with other runs (evaluations of one checkpoint) holds the
    process's whole time, which is split among them in proportion to their forecasts.

    `times` should hold every run of the study, those of an older plan too: a process shared with
    a run an edit replaced was that run's as well, so it takes its share (a member without a
    forecast weighs as the mean of those with one) instead of leaving the whole to the others."""
    now = datetime.now(timezone.utc)
    took: dict[str, float] = defaultdict(float)
    for group in _processes(times):
        start, end = _span(group, now)
        whole = (end - start).total_seconds()
        known = [max(forecast_s[run_id], 0.0) for run_id, _ in group if run_id in forecast_s]
        fill = sum(known) / len(known) if known else 1.0
        weights = [max(forecast_s[run_id], 0.0) if run_id in forecast_s else fill for run_id, _ in group]
        total = sum(weights)
        for (run_id, attempt), weight in zip(group, weights):
            took[run_id] += attempt.seconds(now) if len(group) == 1 else \
                whole * (weight / total if total else 1 / len(group))
    return {r.id: took[r.id] for r in records if r.state is RunState.succeeded and r.id in times}


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


def observed_slots(records: Sequence[RunRecord], slot: str, times: Mapping[str, RunTime]) -> Optional[int]:
    """The most GPUs (or CPU slots) the study's attempts held at once: the executor it ran on. Runs
    done in one process (the local executor runs a checkpoint's evaluations together) held one
    slot between them, not one each."""
    sizes = {}
    for rec in records:
        config = json.loads(rec.config_json or "{}").get("resources") or {}
        sizes[rec.id] = int(config.get("gpus", 0)) if slot == "GPU" else max(int(config.get("cpus", 1)), 1)
    held = []
    for group in _processes({run_id: t for run_id, t in times.items() if run_id in sizes}):
        ended = [(run_id, a) for run_id, a in group if a.end is not None]
        if ended:
            start, end = _span(ended, datetime.now(timezone.utc))
            held.append((start, end, max(sizes[run_id] for run_id, _ in ended)))
    points = [(h[0], h[2]) for h in held] + [(h[1], -h[2]) for h in held]
    peak = now = 0
    for _, change in sorted(points, key=lambda p: (p[0], p[1])):
        now += change
        peak = max(peak, now)
    return peak or None


def versus(spec_name: str, records: Sequence[RunRecord], datasets: Sequence[DatasetRecord],
           times: Mapping[str, RunTime], *, gpu_type: Optional[str] = None, gpus: Optional[int] = None,
           nodes: int = 1, cpus: Optional[int] = None, hardware: Optional[Path] = None,
           draws: int = DRAWS, registry: Optional[Registry] = None, fc: Optional[Forecast] = None) -> Versus:
    """Each finished run's duration (the sum of its attempts) beside its forecast, per kind, and for the
    study's wall time; the study is packed on the slots it was seen to use unless --gpus / --cpus say
    otherwise."""
    registry = registry or spec_registry(None)
    fc = fc or forecast_records(spec_name, records, datasets, times, registry=registry, gpu_type=gpu_type, gpus=gpus,
                                nodes=nodes, cpus=cpus, draws=draws, hardware=hardware)
    actual = attributed_seconds(records, {r.id: r.seconds.p50 for r in fc.runs}, times)
    rows = [RunActual(id=r.id, label=r.label, kind=r.kind, forecast_s=r.seconds.p50, low_s=r.seconds.p10,
                      high_s=r.seconds.p90, actual_s=actual.get(r.id)) for r in fc.runs]
    by_kind: dict[str, list[RunActual]] = defaultdict(list)
    for row in rows:
        if row.actual_s is not None:
            by_kind[row.kind].append(row)
    kinds = [KindActual(kind=k, runs=len(v), forecast_s=sum(r.forecast_s for r in v),
                        actual_s=sum(r.actual_s or 0.0 for r in v)) for k, v in by_kind.items()]
    finished = [r for r in records if r.state is RunState.succeeded and r.id in times]
    wall = None
    if finished and len(finished) == len(records):  # first start of any attempt to the last finish
        wall = (max(t.last_end for r in finished if (t := times[r.id]).last_end)
                - min(t.first_start for r in finished if (t := times[r.id]).first_start)).total_seconds()
    return Versus(study=spec_name, profile=fc.profile, slots=fc.slots, runs=rows, kinds=kinds,
                  forecast_wall_s=fc.wall_s.p50, forecast_wall_band=(fc.wall_s.p10, fc.wall_s.p90),
                  actual_wall_s=wall, finished=len(finished), total=len(records))


def versus_lineage(lineage: Lineage, spec_name: str, **options) -> Versus:
    spec = lineage.spec(spec_name)
    records = lineage.plan_runs(spec_name)
    # every run's times, an older plan's too: a process it shared with a current run is split with it
    return versus(spec_name, records, lineage.datasets(spec_name), lineage.run_times(r.id for r in lineage.runs(spec_name)),
                  registry=spec_registry(spec.path if spec else None), **options)


def forecast_records(spec_name: str, records: Sequence[RunRecord], datasets: Sequence[DatasetRecord],
                     times: Mapping[str, RunTime], *,
                     registry: Optional[Registry] = None, gpu_type: Optional[str] = None, gpus: Optional[int] = None,
                     nodes: int = 1, cpus: Optional[int] = None, draws: int = DRAWS,
                     hardware: Optional[Path] = None) -> Forecast:
    """The forecast of a recorded study, packed on the slots it was seen to use (unless told)."""
    registry = registry or spec_registry(None)
    study = shape_of_records(spec_name, records, datasets, registry)
    if not study.runs:
        raise UserError(f"no runs of {spec_name!r} recorded")
    profile = resolve_profile(study, gpu_type, registry, hardware)
    seen = observed_slots(records, profile.slot, times)
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
    return undetectable(comparisons(study, prior, spec_data(validated.spec)), detect.min_effect)
