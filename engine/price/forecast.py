"""A study's forecast: device-hours per run, phase and in all, wall time on the given slots,
and the critical path, each as P10/P50/P90 over Monte Carlo draws of the profile's constants.

One draw per study, shared by every run (runs share hardware and software, so their errors
move together). Draw 0 is the median of every constant; it gives the parts and the critical
path's runs shown. A structural contingency is stated, never added: published reproductions
ran up to 2x off, and stalls outside the GPU do not show in a throughput model.
"""

from __future__ import annotations

import os
import random
from collections import defaultdict
from typing import Iterable, Optional, Sequence

from pydantic import BaseModel, Field

from engine.errors import UserError
from engine.plan.model import evaluation_key
from engine.price.kinds import run_cost
from engine.price.memory import checkpoint_gb
from engine.price.model import Context, RunCost, prior_used
from engine.price.profiles import NAMES, Constants, Profile
from engine.price.shapes import RunShape, StudyShape
from engine.price.simulate import SimJob, critical_path, lower_bound, pack

DRAWS = 300
RNG_SEED = 0
CONTINGENCY = "x1.5-2 structural contingency not included (reproductions ran up to 2x off; non-GPU stalls)"


class Quantiles(BaseModel):
    p10: float
    p50: float
    p90: float

    @classmethod
    def of(cls, values: Sequence[float]) -> "Quantiles":
        ordered = sorted(values)
        at = lambda q: ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]  # noqa: E731
        return cls(p10=at(0.1), p50=at(0.5), p90=at(0.9))

    def scaled(self, factor: float) -> "Quantiles":
        return Quantiles(p10=self.p10 * factor, p50=self.p50 * factor, p90=self.p90 * factor)


class RunForecast(BaseModel):
    id: str
    label: str
    unit: str  # phase or phase/variant
    kind: str
    slots: int
    seconds: Quantiles
    parts: dict[str, float]  # seconds at the median draw
    steps: Optional[int] = None
    job: str  # the executor job it runs in (evaluations of one checkpoint share one)


class GroupForecast(BaseModel):
    name: str
    runs: int
    slot_hours: Quantiles
    seconds: Quantiles  # run-seconds summed (wall of each run, not slot-weighted)
    cost: Optional[Quantiles] = None  # slot-hours at the --price, when one is given
    checkpoint_gb: float = 0.0  # checkpoints its runs write (median draw)


class ResponsePriorUse(BaseModel):
    median: float
    sigma: float
    max_tokens: float
    source: str  # protocol | model | default (the hardware file's, for a non-reasoning coder)


class Forecast(BaseModel):
    study: str
    profile: str
    slot: str  # GPU | CPU
    slots: int  # GPUs (or CPU slots) the study is packed on
    nodes: int
    draws: int
    runs: list[RunForecast]
    phases: list[GroupForecast]
    kinds: list[GroupForecast]
    slot_hours: Quantiles
    wall_s: Quantiles
    critical_path_s: Quantiles
    critical_path: list[str]  # run labels along it, at the median draw
    lower_bound_s: float  # at the median draw
    price_per_hour: Optional[float] = None
    currency: Optional[str] = None  # what --price is in (a symbol or code: only shown)
    cost: Optional[Quantiles] = None
    checkpoint_gb: float = 0.0  # checkpoint disk the study writes (weights and optimizer state, merged folders)
    contingency: str = CONTINGENCY
    notes: list[str] = Field(default_factory=list)
    # protocol name → the response-length prior its generation was priced with, and where it came from
    response_priors: dict[str, ResponsePriorUse] = Field(default_factory=dict)


def response_priors(runs: Sequence[RunShape], study: StudyShape, profile: Profile) -> dict[str, ResponsePriorUse]:
    """The response-length prior of every protocol `runs` generate with (`model.lengths`)."""
    out: dict[str, ResponsePriorUse] = {}
    ctx = context(study, profile, profile.median())
    for run in runs:
        for use, protocol in (run.config.get("protocols") or {}).items():
            name = str(protocol.get("name") or use)
            if name in out or run.scores_samples:
                continue
            p, cap, source = prior_used(ctx, protocol)
            out[name] = ResponsePriorUse(median=p.response_median_tokens, sigma=p.response_sigma, max_tokens=cap,
                                         source=source)
    return out


def prior_notes(priors: dict[str, ResponsePriorUse], model: str) -> list[str]:
    """What the forecast says under it: which prior each protocol used; the protocols that fell back
    to the default in one line, with the fix."""
    notes, fallback = [], [name for name, use in priors.items() if use.source == "default"]
    for name, use in priors.items():
        if use.source != "default":
            whose = "declared on the protocol" if use.source == "protocol" else f"the base model {model}'s prior"
            notes.append(f"protocol {name}: response lengths median {use.median:g}, sigma {use.sigma:g} tokens, "
                         f"clipped at {use.max_tokens:g} ({whose})")
    if fallback:
        use = priors[fallback[0]]
        notes.append(f"protocol{'s' if len(fallback) > 1 else ''} {', '.join(fallback)}: no response-length prior, "
                     f"priced at the registry default (median {use.median:g}, sigma {use.sigma:g} tokens: "
                     "registry/hardware.yaml, a non-reasoning coder); a model that reasons at length needs "
                     "`response_tokens: {median: M, sigma: S}` on its protocol or its base model")
    return notes


def model_notes(runs: Sequence[RunShape], study: StudyShape, profile: Profile) -> list[str]:
    """What the forecast assumed of the model and the machine for lack of facts. A GPU dry run refuses
    a model of unknown size (`shapes.require_size`); a CPU one, and a recorded study's re-forecast,
    price it at the profile's size, which can be thousands of times off. A profile without
    `memory_gb` (a hardware file written before it) prices no rollout beyond the KV cache's room."""
    notes = []
    if study.params_b is None:
        notes.append(f"the base model's size is unknown: priced as the {profile.name} profile's "
                     f"{profile.entry.params_b:g} B-parameter model; add `params_b: <billions of parameters>` "
                     "under base_model, or name a model from registry/models.yaml")
    if profile.slot == "GPU" and profile.entry.memory_gb is None and any(r.kind in ("grpo", "repair") for r in runs):
        notes.append(f"hardware profile {profile.name} has no `memory_gb`: rollouts are priced as if the KV cache "
                     "held every sequence of a step (long responses priced low); add `memory_gb:` (one GPU's "
                     f"memory, GB) to the profile in {profile.path}")
    return notes


def context(study: StudyShape, profile: Profile, constants: Constants) -> Context:
    scale = profile.entry.params_b / study.params_b if study.params_b else 1.0
    return Context(c=constants, priors=profile.priors, slot=profile.slot, scale=scale, sizes=study.sizes,
                   sources=study.sources, model_lengths=study.model_lengths, runs=study.by_id(),
                   params_b=study.params_b or profile.entry.params_b, memory_gb=profile.entry.memory_gb,
                   per_node=profile.entry.slots_per_node or 8)


def job_key(run: RunShape, grouped: bool) -> str:
    """With an executor that groups them (`StudyShape.groups_evals`), evaluations of one checkpoint
    (or of the base model) at one allocation share a job, so only the first pays the model's load."""
    if grouped and run.kind == "eval" and not run.scores_samples:
        return evaluation_key(run.evaluates, run.config)
    return run.id


def _members(runs: Sequence[RunShape], grouped: bool) -> dict[str, list[RunShape]]:
    members: dict[str, list[RunShape]] = defaultdict(list)
    for run in runs:
        members[job_key(run, grouped)].append(run)
    return members


SHARED_PARTS = ("start", "merge")  # paid once per job: the model's load


def joiners(runs: Sequence[RunShape], grouped: bool) -> set[str]:
    """Runs that join a job another run opened, so skip its start-up (SHARED_PARTS)."""
    return {run.id for group in _members(runs, grouped).values() for run in group[1:]}


def effective_seconds(runs: Sequence[RunShape], costs: dict[str, RunCost], grouped: bool) -> dict[str, float]:
    """Each run's seconds within its job: after the first, a job's runs skip the start-up."""
    skip = joiners(runs, grouped)
    return {run.id: costs[run.id].seconds - (sum(costs[run.id].parts.get(p, 0.0) for p in SHARED_PARTS)
                                             if run.id in skip else 0.0) for run in runs}


def jobs_of(runs: Sequence[RunShape], seconds: dict[str, float],
            grouped: bool) -> tuple[list[SimJob], dict[str, str]]:
    """Executor jobs in plan order (a job at its first run's place), and run id → job id."""
    members = _members(runs, grouped)
    job_of = {run.id: group[0].id for group in members.values() for run in group}
    jobs = []
    for group in members.values():
        head = group[0]
        parents = tuple(dict.fromkeys(job_of.get(p, p) for run in group for p in run.parents))
        jobs.append(SimJob(id=head.id, seconds=sum(seconds[r.id] for r in group), gpus=head.gpus, cpus=head.cpus,
                           parents=parents))
    return jobs, job_of


def default_slots(study: StudyShape, profile: Profile, gpus: Optional[int], cpus: Optional[int],
                  nodes: int = 1) -> int:
    """The slots the study is packed on: --gpus when given, else `nodes` whole nodes of the profile
    (one node grown to the largest run when no --nodes is named)."""
    if profile.slot == "CPU":
        return cpus or os.cpu_count() or 1
    if gpus:
        return gpus
    per_node = profile.entry.slots_per_node or 8
    if nodes > 1:
        return per_node * nodes
    need = max((r.gpus for r in study.runs), default=1)
    return max(per_node, -(-need // per_node) * per_node)


def held(profile: Profile, run_gpus: int, run_cpus: int) -> int:
    """Slots a run holds for the bill: its GPUs on a GPU profile (none for a CPU-only run, such as
    an evaluation of a served endpoint), its CPU slots on the cpu profile."""
    return run_gpus if profile.slot == "GPU" else max(run_cpus, 1)


def check_cluster(study: StudyShape, profile: Profile, gpus: Optional[int], nodes: int) -> None:
    """Refuse a cluster the study cannot be packed on, naming the option to change (never a traceback)."""
    if profile.slot != "GPU":
        return
    if nodes < 1:
        raise UserError(f"--nodes must be at least 1, got {nodes}")
    if gpus is not None and (gpus < 1 or gpus % nodes):
        raise UserError(f"--gpus {gpus} does not split evenly over --nodes {nodes}")
    need = max((r.gpus for r in study.runs), default=0)
    total = default_slots(study, profile, gpus, None, nodes)
    if need > total:
        big = next(r for r in study.runs if r.gpus == need)
        asked = f"--gpus {gpus}" if gpus else f"--nodes {nodes} ({total} GPUs)"
        raise UserError(f"run {big.label} needs {need} GPUs but the forecast was asked for {asked}")


def forecast(study: StudyShape, profile: Profile, *, gpus: Optional[int] = None, nodes: int = 1,
             cpus: Optional[int] = None, price: Optional[float] = None, currency: Optional[str] = None,
             draws: int = DRAWS,
             skip: Iterable[str] = (), scale: Optional[dict[str, float]] = None,
             elapsed: Optional[dict[str, float]] = None) -> Forecast:
    """The study's forecast; `skip` (finished runs) costs nothing, `elapsed` is subtracted from
    running runs, `scale` corrects runs by what finished ones took against their forecast."""
    check_cluster(study, profile, gpus, nodes)
    slots = default_slots(study, profile, gpus, cpus, nodes)
    skipped = set(skip)
    runs = [r for r in study.runs if r.id not in skipped]
    if profile.slot == "CPU" and (big := next((r for r in runs if r.gpus), None)):
        raise UserError(f"run {big.label} needs {big.gpus} GPU(s) but profile {profile.name} prices CPU slots; "
                        "pass --gpu-type with a GPU profile (h100, a100, or one of your own)")
    rng = random.Random(RNG_SEED)
    per_run: dict[str, list[float]] = defaultdict(list)
    hours, walls, paths = [], [], []
    median_costs: dict[str, RunCost] = {}
    median_chain: list[str] = []
    bound = 0.0
    job_of: dict[str, str] = {}
    for draw in range(max(1, draws)):
        z = {name: (rng.gauss(0.0, 1.0) if draw else 0.0) for name in NAMES}
        ctx = context(study, profile, profile.draw(z))
        costs = {r.id: run_cost(ctx, r) for r in runs}
        seconds = effective_seconds(runs, costs, study.groups_evals)
        for run_id in seconds:
            seconds[run_id] *= (scale or {}).get(run_id, 1.0)
            if run_id in (elapsed or {}):
                seconds[run_id] = max(seconds[run_id] - (elapsed or {})[run_id], 0.0)
        jobs, job_of = jobs_of(runs, seconds, study.groups_evals)
        if profile.slot == "CPU":
            schedule = pack(jobs, gpus=0, cpus=slots)
        else:
            schedule = pack(jobs, gpus=slots, nodes=nodes)
        work = sum(held(profile, j.gpus, j.cpus) * j.seconds for j in jobs)
        length, chain = critical_path(jobs)
        hours.append(work / 3600)
        walls.append(schedule.makespan)
        paths.append(length)
        for run in runs:
            per_run[run.id].append(seconds[run.id])
        if draw == 0:
            median_costs, median_chain = costs, chain
            bound = max(length, work / slots) if profile.slot == "CPU" else lower_bound(jobs, slots)
    label = {r.id: r.label for r in study.runs}
    priors = response_priors(runs, study, profile)
    run_rows = [RunForecast(id=r.id, label=r.label, unit=r.unit, kind=r.kind, slots=held(profile, r.gpus, r.cpus),
                            seconds=Quantiles.of(per_run[r.id]),
                            parts={k: round(v, 1) for k, v in median_costs[r.id].parts.items()},
                            steps=median_costs[r.id].steps, job=job_of.get(r.id, r.id)) for r in runs]
    total = Quantiles.of(hours)
    ctx = context(study, profile, profile.median())
    disk = {r.id: checkpoint_gb(ctx, r, median_costs[r.id].saves) for r in runs}
    groups = lambda key: _groups(run_rows, per_run, key, price, disk)  # noqa: E731
    return Forecast(
        study=study.name, profile=profile.name, slot=profile.slot, slots=slots,
        nodes=nodes if profile.slot == "GPU" else 1, draws=max(1, draws), runs=run_rows,
        phases=groups(lambda r: r.unit), kinds=groups(lambda r: r.kind),
        slot_hours=total, wall_s=Quantiles.of(walls), critical_path_s=Quantiles.of(paths),
        critical_path=[label.get(j, j) for j in median_chain], lower_bound_s=bound,
        price_per_hour=price, currency=currency, cost=total.scaled(price) if price is not None else None,
        checkpoint_gb=sum(disk.values()),
        notes=list(dict.fromkeys([*study.notes, *(n for r in runs for n in median_costs[r.id].notes),
                                  *prior_notes(priors, study.model), *model_notes(runs, study, profile)])),
        response_priors=priors)


def _groups(rows: list[RunForecast], per_run: dict[str, list[float]], key, price: Optional[float] = None,
            disk: Optional[dict[str, float]] = None) -> list[GroupForecast]:
    names: dict[str, list[RunForecast]] = defaultdict(list)
    for row in rows:
        names[key(row)].append(row)
    out = []
    for name, members in names.items():
        draws = len(per_run[members[0].id])
        sums = [sum(per_run[m.id][d] for m in members) for d in range(draws)]
        slot_sums = [sum(per_run[m.id][d] * m.slots for m in members) / 3600 for d in range(draws)]
        hours = Quantiles.of(slot_sums)
        out.append(GroupForecast(name=name, runs=len(members), slot_hours=hours, seconds=Quantiles.of(sums),
                                 cost=hours.scaled(price) if price is not None else None,
                                 checkpoint_gb=sum((disk or {}).get(m.id, 0.0) for m in members)))
    return out
