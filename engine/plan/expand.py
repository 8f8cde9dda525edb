"""The planner: a validated spec → a DAG of runs with content-addressed ids.

Expansion rules (the decisions this module makes):

- Every phase and every variant is a *unit*. A variant is its phase with only the
  fields it names replaced (`hparams` and `overrides` merge key by key).
- Trained units (sft, dpo, grpo, repair) and `best_of_n` units get one run per seed.
  Their parent is the run of the unit named in `from:` for the same seed; `from: base`
  (or no `from:`) means the base model and no parent run. A unit may name a phase or a
  variant in `from:`; children of a phase follow the phase's own runs, never its
  variants' (variants stay leaves unless someone names them).
- Each trained / best_of_n run gets its evaluations attached: one eval run per schedule
  (`every_phase`: valid + regression sets; `final`: test sets; `phase`: the unit's own
  `evaluate:` list), each covering all of the schedule's datasets. One run per
  (run, schedule) keeps the DAG readable; datasets are loops inside the run.
- An `eval` unit does not produce a model, so its runs ARE its evaluations: the same
  schedule runs, attached to the model it names in `from:` (the base model for
  `base`, so those runs have no parent). Naming an eval or best_of_n unit in another
  unit's `from:` means that unit's model (they pass it through).
- A trained run's prompt template is explicit in its config (`prompt: {template, from}`), by one
  rule (`training_prompt`): the unit's `prompt:`; else the first of its rollout protocol, its
  select protocol, the study's evaluation protocol (`evaluate.every_phase`, else `final`) that
  names a `prompt:`; else none (the model's defaults, `template: null`). It trains and samples
  on that template; a unit whose evaluations use another is warned about at its spec line.
- Seeds: a run evaluating a per-seed run takes its seed. An evaluation of the base
  model is per seed only when its protocol samples (temperature > 0 or n > 1);
  greedy evaluation of the base model is a single run with seed None.

A run's id is the first 12 hex digits of the sha256 of the canonical JSON of its fully
resolved config (which holds its protocols and the sha256 of every id list it uses) plus
its parents' ids. The spec file's own hash is not an input: editing a comment keeps ids.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from engine.errors import UserError
from engine.plan.model import (
    BASE,
    DATASET_USES,
    DEFAULT_TRAINER,
    MODEL_KINDS,
    Edge,
    Plan,
    Run,
    RunDataset,
    run_id,
)
from engine.plan.inputs import as_json, dataset_files, frozen_registry
from engine.plan.units import Unit, resolve_units, unit_flywheel, unit_order
from engine.spec.flywheel import Flywheel, harvested
from engine.spec.model import (
    EvalSchedule,
    PhaseKind,
    ProtocolSpec,
    Spec,
)
from engine.spec.phases import (
    FailuresSpec,
    PairsSpec,
    Resources,
)
from engine.spec.registry import Registry
from engine.spec.validated import ValidatedSpec, frozen_protocol


@dataclass(kw_only=True)
class _Planner:
    spec: Spec
    idlist_hashes: dict[str, str]
    fingerprints: dict[str, str]
    files: dict[str, dict[str, str]] = field(default_factory=dict)  # see `dataset_files`
    registry: Optional[Registry] = None  # the entries a run consumes are frozen into its config
    runs: list[Run] = field(default_factory=list)
    # unit name → seed → id of the run holding that unit's model (None: base model)
    model_runs: dict[str, dict[Optional[int], Optional[str]]] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)
    harvested: set[str] = field(default_factory=set)  # units whose failures a flywheel harvests

    def add(self, run: Run) -> None:
        if run.id not in self.seen:  # identical evaluations collapse into one run
            self.seen.add(run.id)
            self.runs.append(run)


def plan(validated: ValidatedSpec) -> Plan:
    """Expand a validated spec into its DAG of runs (pure: reads nothing, writes nothing)."""
    spec = validated.spec
    planner = _Planner(spec=spec, idlist_hashes=dict(validated.idlist_hashes),
                       fingerprints=dict(validated.dataset_fingerprints),
                       files=dataset_files(validated), registry=validated.registry)
    units = resolve_units(spec)
    planner.harvested = {w.of for u in units.values() if (w := unit_flywheel(u)) is not None}
    for unit in unit_order(units):
        _plan_unit(planner, unit)
    loaded = validated.loaded
    return Plan(spec_name=spec.name, spec_sha256=loaded.sha256, spec_path=str(loaded.path.resolve()),
                runs=planner.runs, waivers=list(validated.waivers),
                warnings=[*validated.warnings, *prompt_warnings(validated, planner.runs)])


def _plan_unit(planner: _Planner, unit: Unit) -> None:
    seeds = planner.spec.seeds
    source = unit.fields.get("from_") or BASE
    upstream = planner.model_runs.get(source) if source != BASE else None
    runs_of: dict[Optional[int], Optional[str]] = {}
    if unit.kind == PhaseKind.eval:
        for seed in seeds:
            model_run = upstream[seed] if upstream else None
            _attach_evaluations(planner, unit, model_run, seed, evaluated_kind=None)
            runs_of[seed] = model_run  # an eval unit passes its model through
    else:
        for seed in seeds:
            parent = upstream[seed] if upstream else None
            run = _phase_run(planner, unit, seed, parent, _harvest_source(planner, unit, seed))
            planner.add(run)
            _attach_evaluations(planner, unit, run.id, seed, evaluated_kind=unit.kind)
            runs_of[seed] = run.id if unit.kind in MODEL_KINDS else parent
    planner.model_runs[unit.name] = runs_of


def _harvest_source(planner: _Planner, unit: Unit, seed: int) -> Optional[tuple[Flywheel, str]]:
    """The flywheel a unit declares and the run (same seed) whose failures it harvests."""
    wheel = unit_flywheel(unit)
    if wheel is None:
        return None
    source = planner.model_runs.get(wheel.of, {}).get(seed)
    if source is None:
        raise UserError(f"{unit.name}: {wheel.field}.{wheel.of_key}: {wheel.of!r} has no run for seed {seed}")
    return wheel, source


def _flywheel_config(planner: _Planner, unit: Unit, wheel: Flywheel, source: str) -> dict[str, Any]:
    """What a flywheel run's config records about its harvest (its id depends on all of it,
    and on the source run's id, a parent of the run)."""
    source_run = next(r for r in planner.runs if r.id == source)
    out: dict[str, Any] = {"use": wheel.field, "of": wheel.of, "of_run": source, "of_kind": source_run.kind.value,
                           "classes": list(wheel.classes), "on": wheel.on,
                           "datasets": harvested(planner.spec, wheel)}
    pairs_from = unit.fields.get("pairs_from")
    if isinstance(pairs_from, FailuresSpec):
        out["chosen"] = list(pairs_from.chosen)
    mix = unit.fields.get("mix")
    if mix is not None and wheel.field == "mix":
        out["share"] = mix.share
        out["corrected"] = list(mix.corrected)
    return out


def _phase_run(planner: _Planner, unit: Unit, seed: int, parent: Optional[str],
               harvest: Optional[tuple[Flywheel, str]] = None) -> Run:
    f = unit.fields
    uses: dict[str, list[str]] = {}
    for key, use in DATASET_USES.items():
        if isinstance(f.get(key), str):
            uses.setdefault(f[key], []).append(use)
    if harvest is not None:
        for name in harvested(planner.spec, harvest[0]):
            uses.setdefault(name, []).append("harvest")
    if unit.kind == PhaseKind.best_of_n:
        for name in _schedule_datasets(planner.spec, unit):
            uses.setdefault(name, []).append("generate")
    protocols: dict[str, str | ProtocolSpec] = {
        use: f[key] for key, use in (("rollout", "rollout"), ("protocol", "generate")) if f.get(key)}
    if unit.kind in MODEL_KINDS:
        _add_training_evaluation(planner.spec, unit, uses, protocols)
    trainer = f.get("trainer") or DEFAULT_TRAINER.get(unit.kind)
    extra = {k: f.get(k) for k in ("reward", "n", "rounds", "curriculum")}
    extra["hparams"] = dict(f.get("hparams") or {})
    extra["overrides"] = dict(f.get("overrides") or {})
    # Later fields enter the config only when set, so the ids of specs that do not use them stay.
    extra.update({k: as_json(f[k]) for k in TRAINING_EXTRAS if f.get(k) is not None})
    if unit.kind in MODEL_KINDS:  # after its select protocol was added: the rule reads it
        extra["prompt"] = training_prompt(planner, unit, protocols)
    if unit.kind in MODEL_KINDS and planner.spec.tracking is not None:
        extra["tracking"] = as_json(planner.spec.tracking)
    if harvest is not None:
        extra["flywheel"] = _flywheel_config(planner, unit, *harvest)
    if unit.name in planner.harvested:  # it keeps every judged rollout for the flywheel
        extra["harvested"] = True
    flows = ["checkpoint", "pairs"] if unit.kind == PhaseKind.dpo else ["checkpoint"]
    return _make_run(planner, unit, kind=unit.kind, seed=seed, trainer=trainer, schedule=None,
                     parent=parent, flows=flows, evaluates=None, uses=uses, protocols=protocols,
                     extra=extra, harvest_from=harvest[1] if harvest else None)


TRAINING_EXTRAS = ("pairs", "select_metric", "early_stop", "cycles", "samples_per_prompt", "repair_return",
                   "round_penalty", "traces", "without_public")


def _add_training_evaluation(spec: Spec, unit: Unit, uses: dict[str, list[str]],
                             protocols: dict[str, str | ProtocolSpec]) -> None:
    """What a training run evaluates itself with: its checkpoints on `select_on` / `early_stop_on`
    (plus the regression sets, watched at every checkpoint) with the every-phase protocol, and,
    for dpo, the sampling protocol its pairs come from."""
    every = spec.evaluate.every_phase
    if unit.fields.get("select_on") or unit.fields.get("early_stop_on"):
        protocols["select"] = every.protocol if every else DEFAULT_SELECT_PROTOCOL
        for name in every.datasets if every else ():
            if spec.datasets[name].role.value == "regression":
                uses.setdefault(name, []).append("monitor")
    if unit.kind == PhaseKind.dpo and not unit.fields.get("rollout"):
        base = _protocol(spec, every.protocol, unit.name) if every else DEFAULT_SELECT_PROTOCOL
        k = (unit.fields.get("pairs") or PairsSpec()).k
        protocols["rollout"] = base.model_copy(update={"temperature": 1.0, "n": k, "top_p": base.top_p or 1.0})


def training_prompt(planner: _Planner, unit: Unit, protocols: dict[str, str | ProtocolSpec]) -> dict[str, Any]:
    """The template a trained unit trains and samples on, and where the spec says so (the rule in
    the module docstring; never whether `select_on` happens to be set)."""
    spec = planner.spec
    if unit.fields.get("prompt"):
        name = unit.fields["prompt"]
        if planner.registry is not None and name not in planner.registry.prompts:
            raise UserError(f"{unit.name}: unknown prompt template {name!r}; registry/prompts.yaml has: "
                            f"{', '.join(n for n in planner.registry.prompts if not n.startswith('_'))}")
        own = unit.variant and spec.variants[unit.variant].prompt
        where = f"variants.{unit.variant}" if own else f"phases.{unit.phase}"
        return {"template": name, "from": f"{where}.prompt"}
    candidates: list[tuple[str, str | ProtocolSpec]] = [
        (f"its {use} protocol", protocols[use]) for use in ("rollout", "select") if use in protocols]
    candidates += [(f"evaluate.{name}", schedule.protocol) for name in ("every_phase", "final")
                   if (schedule := getattr(spec.evaluate, name)) is not None]
    for what, protocol in candidates:
        resolved = protocol if isinstance(protocol, ProtocolSpec) else _protocol(spec, protocol, unit.name)
        if resolved.prompt:
            named = f" `{protocol}`" if isinstance(protocol, str) else ""
            return {"template": resolved.prompt, "from": f"{what}{named}"}
    return {"template": None, "from": "no protocol names a prompt: the model's default templates"}


def prompt_warnings(validated: ValidatedSpec, runs: list[Run]) -> list[str]:
    """A trained unit whose training template none of its evaluations uses: it would be scored on
    prompts it never trained on (the warning names the spec line and the fix)."""
    loaded = validated.loaded
    out: list[str] = []
    seen: set[tuple[str, Optional[str]]] = set()
    for run in runs:
        if run.kind not in MODEL_KINDS or (run.phase, run.variant) in seen:
            continue
        seen.add((run.phase, run.variant))
        trained = run.config.get("prompt") or {}
        template = trained.get("template")
        evaluations = [r for r in runs if r.evaluates == run.id]
        used = {r.protocols[next(iter(r.protocols))].prompt: f"{r.schedule}" for r in evaluations if r.protocols}
        if not used or template in used:
            continue
        keys: tuple[str, ...] = ("variants", run.variant) if run.variant else ("phases", run.phase)
        source = trained.get("from") or ""
        if source.endswith(".prompt"):  # the line that set it
            keys = (*source.split(".")[:2], "prompt")
        line, col = loaded.locate(*keys)
        named = ", ".join(f"`{t or 'the model default'}` ({s})" for t, s in used.items())
        label = f"{keys[0]}.{keys[1]}"
        out.append(f"{loaded.path}:{line}:{col}: {label} trains on prompt template `{template or 'the model default'}` "
                   f"({trained.get('from')}), but its evaluations use {named}: it is scored on prompts it never "
                   f"trained on\n  fix: set `prompt: {next(iter(used)) or '...'}` on {label}, or name the same "
                   "template in its evaluation protocol")
    return out


# Without evaluate.every_phase, checkpoints are selected greedily at this length.
DEFAULT_SELECT_PROTOCOL = ProtocolSpec(temperature=0.0, top_p=1.0, max_tokens=512, n=1)


def _schedules(spec: Spec, unit: Unit) -> list[tuple[str, EvalSchedule]]:
    out: list[tuple[str, EvalSchedule]] = []
    if unit.fields.get("evaluate"):
        protocol = unit.fields.get("protocol") or _default_eval_protocol(spec)
        if protocol is None:
            raise UserError(f"{unit.name}: `evaluate:` needs a `protocol:` (or an evaluate.every_phase protocol)")
        out.append(("phase", EvalSchedule(datasets=list(unit.fields["evaluate"]), protocol=protocol)))
    for name in ("every_phase", "final"):
        schedule = getattr(spec.evaluate, name)
        if schedule is not None and schedule.datasets:
            out.append((name, schedule))
    return out


def _default_eval_protocol(spec: Spec) -> Optional[str]:
    every = spec.evaluate.every_phase
    return every.protocol if every else None


def _schedule_datasets(spec: Spec, unit: Unit) -> list[str]:
    names: list[str] = []
    for _, schedule in _schedules(spec, unit):
        names.extend(n for n in schedule.datasets if n not in names)
    return names


def _attach_evaluations(planner: _Planner, unit: Unit, target: Optional[str], seed: int,
                        evaluated_kind: Optional[PhaseKind]) -> None:
    """Evaluation runs of `target` (a run id, or None for the base model)."""
    spec = planner.spec
    flows = ["samples"] if evaluated_kind == PhaseKind.best_of_n else ["checkpoint"]
    for schedule_name, schedule in _schedules(spec, unit):
        protocol = _protocol(spec, schedule.protocol, unit.name)
        eval_seed = seed if target is not None or _samples(protocol) else None
        uses = {name: ["evaluate"] for name in schedule.datasets}
        # Entered only when set, so the ids of specs that do not use them stay; an endpoint's served
        # model is part of the run's identity, its address is not (`plan.model.identity_config`).
        extra = {"generation": as_json(schedule.generation)} if schedule.generation else {}
        if unit.fields.get("endpoint"):
            extra["endpoint"] = as_json(unit.fields["endpoint"])
        run = _make_run(planner, unit, kind=PhaseKind.eval, seed=eval_seed, trainer=None,
                        schedule=schedule_name, parent=target, flows=flows, evaluates=target,
                        uses=uses, protocols={"evaluate": schedule.protocol}, extra=extra,
                        resources=schedule.resources or _eval_resources(unit))
        planner.add(run)


def _samples(protocol: ProtocolSpec) -> bool:
    return protocol.temperature is None or protocol.temperature > 0 or (protocol.n or 1) > 1


def _protocol(spec: Spec, name: str, where: str) -> ProtocolSpec:
    try:
        return spec.protocols[name]
    except KeyError:
        raise UserError(f"{where}: unknown protocol {name!r} (declared: {', '.join(spec.protocols)})") from None


def _eval_resources(unit: Unit) -> Resources:
    """An evaluation's default allocation: one GPU if its phase uses any, CPU otherwise."""
    phase = unit.fields.get("resources") or Resources()
    return Resources(gpus=min(phase.gpus, 1), cpus=phase.cpus)


def _make_run(planner: _Planner, unit: Unit, *, kind: PhaseKind, seed: Optional[int],
              trainer: Optional[str], schedule: Optional[str], parent: Optional[str],
              flows: list[str], evaluates: Optional[str], uses: dict[str, list[str]],
              protocols: dict[str, str | ProtocolSpec], extra: dict[str, Any],
              resources: Optional[Resources] = None, harvest_from: Optional[str] = None) -> Run:
    """`harvest_from`: a second parent, the run whose failures this one harvests (the flywheel);
    its id is then part of this run's, like the parent whose model it starts from."""
    spec = planner.spec
    datasets = _run_datasets(planner, uses, unit.name)
    resolved_protocols = {_protocol_name(p, use): p if isinstance(p, ProtocolSpec) else _protocol(spec, p, unit.name)
                          for use, p in protocols.items()}
    names = {use: _protocol_name(p, use) for use, p in protocols.items()}
    resources = resources or unit.fields.get("resources") or Resources()
    config = {
        "spec": spec.name, "phase": unit.phase, "variant": unit.variant, "kind": kind.value,
        "schedule": schedule, "seed": seed, "trainer": trainer,
        "base_model": as_json(spec.base_model),
        "init": "parent" if parent else "base_model",
        "datasets": {n: {**as_json(spec.datasets[n]), **d.model_dump(exclude={"role"}), **planner.files.get(n, {})}
                     for n, d in datasets.items()},
        "protocols": {use: frozen_protocol(name, resolved_protocols[name]) for use, name in names.items()},
        "judge": as_json(spec.judge),
        "resources": resources.model_dump(exclude_none=True),
        **extra,
    }
    if planner.registry is not None:
        trains_on = (extra.get("prompt") or {}).get("template")
        config["registry"] = frozen_registry(planner.registry, spec, datasets, resolved_protocols.values(),
                                             templates=[trains_on] if trains_on else [])
    parents = [parent] if parent else []
    flows_of = {p: list(flows) for p in parents}
    if harvest_from is not None:
        flows_of.setdefault(harvest_from, []).append("failures")
        parents = list(flows_of)
    rid = run_id(config, parents)
    return Run(id=rid, spec_name=spec.name, phase=unit.phase, variant=unit.variant, seed=seed,
               kind=kind, trainer=trainer, schedule=schedule, parents=parents,
               edges=[Edge(parent=p, child=rid, flows=flows_of[p]) for p in parents], evaluates=evaluates,
               datasets=datasets, protocols=resolved_protocols,
               idlist_hashes={n: d.ids_sha256 for n, d in datasets.items() if d.ids_sha256},
               resources=resources, config=config)


def _protocol_name(protocol: str | ProtocolSpec, use: str) -> str:
    return protocol if isinstance(protocol, str) else f"{use}-derived"


def _run_datasets(planner: _Planner, uses: dict[str, list[str]], where: str) -> dict[str, RunDataset]:
    out: dict[str, RunDataset] = {}
    for name, use in uses.items():
        ds = planner.spec.datasets.get(name)
        if ds is None:
            raise UserError(f"{where}: unknown dataset {name!r} (declared: {', '.join(planner.spec.datasets)})")
        out[name] = RunDataset(role=ds.role.value, uses=use, ids_sha256=planner.idlist_hashes.get(name),
                               fingerprint=planner.fingerprints.get(name))
    return out
