"""Cross-references inside a spec: names, `from:` cycles, seeds, what each phase kind needs,
and no dataset evaluated twice under one protocol.

Works on a typed Spec (possibly a partial one salvaged from a spec with schema
errors) and the names the spec declares as written, so dangling references are
reported together with schema errors instead of one round later.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

from engine.errors import Diagnostic
from engine.spec.flywheel import HARVESTABLE, flywheel, overlay, unit_fields
from engine.spec.model import TRAINED_KINDS, ExecutorKind, PhaseKind, Spec, Transfer
from engine.spec.phases import FailuresSpec, PhaseFields
from engine.spec.schema_errors import did_you_mean

Key = str | int
At = Callable[..., Diagnostic]  # (keys, message, fix, at_value=...) → Diagnostic

# Phase fields that name a dataset, in the order users read them.
DATASET_USES = ("train", "pairs_from", "select_on", "early_stop_on")
PROTOCOL_USES = ("rollout", "protocol")

# What each kind must declare, and what it must not (it would be silently ignored).
REQUIRED: dict[PhaseKind, tuple[str, ...]] = {
    PhaseKind.eval: (),
    PhaseKind.best_of_n: ("n", "protocol"),
    PhaseKind.sft: ("trainer", "train"),
    PhaseKind.dpo: ("trainer", "pairs_from"),
    PhaseKind.grpo: ("trainer", "train", "reward", "rollout"),
    PhaseKind.repair: ("trainer", "train", "reward", "rollout", "rounds"),
    PhaseKind.raft: ("train", "rollout"),
}
_TRAINING_ONLY = ("trainer", "train", "pairs_from", "select_on", "early_stop_on", "reward", "rollout", "prompt",
                  "curriculum", "hparams", "overrides", "select_metric", "early_stop", "traces")
_RAFT_ONLY = ("cycles", "samples_per_prompt")
_REPAIR_ONLY = ("repair_return", "round_penalty")
FORBIDDEN: dict[PhaseKind, tuple[str, ...]] = {
    PhaseKind.eval: (*_TRAINING_ONLY, *_RAFT_ONLY, *_REPAIR_ONLY, "n", "rounds", "mix", "without_public"),
    PhaseKind.best_of_n: (*_TRAINING_ONLY, *_RAFT_ONLY, *_REPAIR_ONLY, "rounds", "mix", "endpoint"),
    PhaseKind.sft: ("pairs_from", "reward", "rollout", "n", "rounds", *_RAFT_ONLY, *_REPAIR_ONLY, "without_public",
                    "endpoint"),
    PhaseKind.dpo: ("train", "reward", "n", "rounds", "mix", *_RAFT_ONLY, *_REPAIR_ONLY, "without_public", "endpoint"),
    PhaseKind.grpo: ("pairs_from", "n", "rounds", "mix", *_RAFT_ONLY, *_REPAIR_ONLY, "without_public", "endpoint"),
    PhaseKind.repair: ("pairs_from", "n", "mix", *_RAFT_ONLY, "without_public", "endpoint"),
    PhaseKind.raft: ("pairs_from", "n", "rounds", "mix", *_REPAIR_ONLY, "without_public", "endpoint"),
}
_EXAMPLE = {"trainer": "verl", "train": "<a train dataset>", "pairs_from": "<a train dataset>",
            "reward": "dense", "rollout": "<a protocol, e.g. rollout>", "protocol": "<a protocol>",
            "n": "8", "rounds": "2"}


@dataclass(kw_only=True)
class Names:
    """Names declared in the spec as written (including entries with schema errors)."""

    datasets: set[str]
    protocols: set[str]  # the spec's own protocols plus registry presets
    phases: set[str]
    variants: set[str]

    @classmethod
    def of(cls, data: Any, presets: set[str]) -> "Names":
        def keys(section: str) -> set[str]:
            value = data.get(section) if isinstance(data, dict) else None
            return {str(k) for k in value} if isinstance(value, dict) else set()
        return cls(datasets=keys("datasets"), protocols=keys("protocols") | presets,
                   phases=keys("phases"), variants=keys("variants"))


def _dangling(at: At, keys: tuple[Key, ...], value: str, known: set[str], what: str) -> Optional[Diagnostic]:
    if value in known:
        return None
    hint = did_you_mean(value, known)
    listed = ", ".join(sorted(known)) or "none declared"
    return at(keys, f"unknown {what} {value!r}{hint}", f"use a {what} declared in the spec ({listed})",
              at_value=True)


def _field_refs(section: str, name: str, fields: PhaseFields, names: Names, at: At) -> Iterator[Diagnostic]:
    for use in DATASET_USES:
        value = getattr(fields, use)
        if isinstance(value, FailuresSpec):
            if value.on is not None:
                yield from filter(None, [_dangling(at, (section, name, use, "on"), value.on, names.datasets, "dataset")])
        elif value is not None:
            yield from filter(None, [_dangling(at, (section, name, use), value, names.datasets, "dataset")])
    for i, value in enumerate(fields.evaluate or []):
        yield from filter(None, [_dangling(at, (section, name, "evaluate", i), value, names.datasets, "dataset")])
    for use in PROTOCOL_USES:
        value = getattr(fields, use)
        if value is not None:
            yield from filter(None, [_dangling(at, (section, name, use), value, names.protocols, "protocol")])
    if fields.from_ is not None and fields.from_ not in names.phases and fields.from_ != "base":
        hint = did_you_mean(fields.from_, names.phases | {"base"})
        yield at((section, name, "from"), f"unknown phase {fields.from_!r}{hint}",
                 f"name a phase ({', '.join(sorted(names.phases))}) or `base` for the base model", at_value=True)


def _reference_errors(spec: Spec, names: Names, at: At) -> Iterator[Diagnostic]:
    for name, phase in spec.phases.items():
        yield from _field_refs("phases", name, phase, names, at)
    for name, variant in spec.variants.items():
        if variant.phase not in names.phases:
            yield at(("variants", name, "phase"), f"unknown phase {variant.phase!r}{did_you_mean(variant.phase, names.phases)}",
                     f"a variant overrides one phase: use one of {', '.join(sorted(names.phases))}", at_value=True)
        yield from _field_refs("variants", name, variant, names, at)
    for when in ("every_phase", "final"):
        schedule = getattr(spec.evaluate, when)
        if schedule is None:
            continue
        for i, value in enumerate(schedule.datasets):
            yield from filter(None, [_dangling(at, ("evaluate", when, "datasets", i), value, names.datasets, "dataset")])
        yield from filter(None, [_dangling(at, ("evaluate", when, "protocol"), schedule.protocol, names.protocols, "protocol")])
    yield from _waiver_refs(spec, names, at)


def _flywheel_errors(spec: Spec, names: Names, at: At) -> Iterator[Diagnostic]:
    """`of` / `repair_of` names a trained unit that leaves judged training samples, and not one
    that (through `from:` or its own flywheel) depends on the phase that harvests it."""
    units = names.phases | names.variants
    for section, name, own in [*(("phases", n, p) for n, p in spec.phases.items()),
                               *(("variants", n, v) for n, v in spec.variants.items())]:
        wheel = flywheel(own)
        if wheel is None:
            continue
        keys = (section, name, wheel.field, wheel.of_key)
        if wheel.of not in units:
            hint = did_you_mean(wheel.of, units)
            yield at(keys, f"unknown phase or variant {wheel.of!r}{hint}",
                     f"name the trained phase or variant whose failures feed this one ({', '.join(sorted(units))})",
                     at_value=True)
            continue
        found = unit_fields(spec, wheel.of)
        if found is None:
            continue
        kind, _ = found
        if wheel.of == name:
            yield at(keys, f"{name!r} would harvest its own failures before it has run",
                     "harvest a phase that runs before this one", at_value=True)
            continue
        if kind not in TRAINED_KINDS:
            yield at(keys, f"{wheel.of!r} is {_article(kind)} phase: it has no policy whose training failures "
                     "could be harvested", "name a trained phase or variant (grpo, repair, dpo, raft)", at_value=True)
        elif wheel.on is None and kind not in HARVESTABLE:
            kinds = " / ".join(k.value for k in HARVESTABLE)
            yield at(keys, f"{_article(kind)} run judges no samples of its own training problems, so "
                     f"{wheel.of!r} has no failures to harvest",
                     (f"add `on: <a train dataset>` for a harvest pass of its model, or harvest a {kinds} phase"
                      if wheel.field == "pairs_from" else f"harvest a {kinds} phase"), at_value=True)
        elif wheel.on is None and kind is PhaseKind.dpo and isinstance(found[1].pairs_from, FailuresSpec):
            yield at(keys, f"{wheel.of!r} builds its pairs from harvested failures and judges no samples itself",
                     "harvest the run its failures came from, or add `on: <a train dataset>`", at_value=True)
        if name in _ancestors(spec, wheel.of):
            yield at(keys, f"{wheel.of!r} depends on {name!r} (through `from:` or its own failures), so "
                     f"{name!r} cannot wait for its failures", "harvest a phase that runs before this one",
                     at_value=True)


def _ancestors(spec: Spec, unit: str) -> set[str]:
    """Every unit `unit`'s runs wait for: its `from:` chain and the units its flywheel harvests."""
    seen: set[str] = set()
    todo = [unit]
    while todo:
        found = unit_fields(spec, todo.pop())
        if found is None:
            continue
        wheel = flywheel(found[1])
        for dep in (found[1].from_, wheel.of if wheel else None):
            if dep and dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def _waiver_refs(spec: Spec, names: Names, at: At) -> Iterator[Diagnostic]:
    for i, waiver in enumerate(spec.allow):
        if waiver.dataset is not None:
            yield from filter(None, [_dangling(at, ("allow", i, "dataset"), waiver.dataset, names.datasets, "dataset")])
        for j, value in enumerate(waiver.datasets or []):
            yield from filter(None, [_dangling(at, ("allow", i, "datasets", j), value, names.datasets, "dataset")])
        if waiver.phase is not None:
            yield from filter(None, [_dangling(at, ("allow", i, "phase"), waiver.phase,
                                               names.phases | names.variants, "phase or variant")])
        if waiver.dataset is None and waiver.datasets is None and waiver.phase is None:
            yield at(("allow", i), f"this waiver of rule {waiver.rule} names nothing, so it would waive every violation",
                     "name the `dataset:` (or `datasets:` pair for rule 3) and/or the `phase:` it waives")


def _cycle_errors(spec: Spec, at: At) -> Iterator[Diagnostic]:
    """A `from:` chain that comes back to where it started (reported once per cycle)."""
    reported: set[frozenset[str]] = set()
    for start in spec.phases:
        chain, current = [start], spec.phases[start].from_
        while current in spec.phases and current not in chain:
            chain.append(current)
            current = spec.phases[current].from_
        if current in chain and frozenset(chain[chain.index(current):]) not in reported:
            cycle = chain[chain.index(current):]
            reported.add(frozenset(cycle))
            path = " → ".join([*cycle, current])
            yield at(("phases", cycle[-1], "from"), f"`from:` forms a cycle: {path}",
                     f"a phase must start from an earlier phase or `base`; break the cycle at {cycle[-1]}.from",
                     at_value=True)
    for name, variant in spec.variants.items():
        if variant.from_ is not None and variant.from_ == variant.phase:
            yield at(("variants", name, "from"), f"variant starts from its own phase {variant.phase!r}",
                     "start from the phase's parent or another earlier phase", at_value=True)


def _kind_errors(section: str, name: str, kind: PhaseKind, fields: PhaseFields, own: PhaseFields,
                 at: At) -> Iterator[Diagnostic]:
    """`fields`: what the run will use (a variant overlays its phase); `own`: what this entry wrote."""
    for req in REQUIRED[kind]:
        if getattr(fields, req) is None:
            yield at((section, name), f"{_article(kind)} phase needs `{req}`",
                     f"add `{req}: {_EXAMPLE[req]}`")
    for bad in FORBIDDEN[kind]:
        if getattr(own, bad) is not None:
            yield at((section, name, bad), f"`{bad}` has no meaning for {_article(kind)} phase and would be ignored",
                     f"remove `{bad}` (or change the phase's kind)")
    if own.endpoint is not None and fields.from_ is not None:
        yield at((section, name, "endpoint"), f"an eval phase with an endpoint evaluates the model the endpoint "
                 f"serves, not phase {fields.from_!r}", "remove `from:` (or the endpoint)")
    if kind in (PhaseKind.dpo, PhaseKind.raft) and fields.trainer == "verl":
        what = "offline DPO" if kind == PhaseKind.dpo else "RAFT"
        yield at((section, name, "trainer"), f"verl has no {what} trainer", f"use `trainer: trl` for {kind.value}",
                 at_value=True)


def _article(kind: PhaseKind) -> str:
    return f"{'an' if kind.value[0] in 'aeiou' else 'a'} {kind.value}"


def _seed_errors(spec: Spec, at: At) -> Iterator[Diagnostic]:
    seen: dict[int, int] = {}
    for i, seed in enumerate(spec.seeds):
        if seed in seen:
            yield at(("seeds", i), f"seed {seed} is listed twice (also seeds[{seen[seed]}])",
                     "list each seed once: a repeated seed would repeat identical runs", at_value=True)
        seen.setdefault(seed, i)


def _same_protocol(spec: Spec, a: Optional[str], b: Optional[str]) -> bool:
    """One protocol under two names counts as one: the pages compare numbers by what generated them."""
    if a is None or b is None:
        return False
    return a == b or (a in spec.protocols and b in spec.protocols
                      and spec.protocols[a].model_dump() == spec.protocols[b].model_dump())


def _schedule_errors(spec: Spec, at: At) -> Iterator[Diagnostic]:
    """A dataset in two evaluation schedules under one protocol would evaluate every model on it
    twice, and its cells would count each seed twice (a smaller std, a narrower interval, a
    detectable difference that is not): refused, at the second schedule's entry."""
    every, final = spec.evaluate.every_phase, spec.evaluate.final
    if every is not None and final is not None and _same_protocol(spec, every.protocol, final.protocol):
        for i, name in enumerate(final.datasets):
            if name in every.datasets:
                yield at(("evaluate", "final", "datasets", i),
                         f"{name} is in evaluate.every_phase and evaluate.final under one protocol "
                         f"({final.protocol}): every model would be evaluated on it twice and each cell would "
                         "count every seed twice",
                         f"list {name} in one schedule only (every_phase already evaluates every phase's model), "
                         "or give evaluate.final another protocol", at_value=True)
    schedules = [(when, sched) for when, sched in (("every_phase", every), ("final", final)) if sched is not None]
    units = [("phases", name, phase, phase) for name, phase in spec.phases.items()]
    units += [("variants", name, variant, overlay(spec.phases[variant.phase], variant))
              for name, variant in spec.variants.items() if variant.phase in spec.phases]
    for section, name, written, fields in units:
        own = written.model_fields_set & {"evaluate", "protocol"} if section == "variants" else {"evaluate"}
        if not fields.evaluate or not own:
            continue  # a variant that writes neither: its phase's entry says it
        protocol = fields.protocol or (every.protocol if every else None)
        for i, dataset in enumerate(fields.evaluate):
            twin = next((when for when, sched in schedules
                         if dataset in sched.datasets and _same_protocol(spec, protocol, sched.protocol)), None)
            if twin is None:
                continue
            keys = (section, name, "evaluate", i) if "evaluate" in own else (section, name, "protocol")
            same = schedules[[w for w, _ in schedules].index(twin)][1].protocol
            alias = f", the same settings as {same}" if same != protocol else ""
            yield at(keys, f"{dataset} is in {section}.{name}.evaluate and evaluate.{twin} under one protocol "
                           f"({protocol}{alias}): the {name} model would be evaluated on it twice and its cell would count "
                           "every seed twice",
                     f"remove {dataset} from {name}'s `evaluate:` (evaluate.{twin} already evaluates it), "
                     f"or give {name} another `protocol:`", at_value=True)


def _all_kind_errors(spec: Spec, at: At) -> Iterator[Diagnostic]:
    for name, phase in spec.phases.items():
        yield from _kind_errors("phases", name, phase.kind, phase, phase, at)
    for name, variant in spec.variants.items():
        if name in spec.phases:
            yield at(("variants", name), f"variant {name!r} has the same name as a phase",
                     "rename the variant: runs are named by phase or variant")
        phase = spec.phases.get(variant.phase)
        if phase is not None:
            yield from _kind_errors("variants", name, phase.kind, overlay(phase, variant), variant, at)


SLURM_KEYS = ("partition", "account", "qos", "time_limit_h", "sbatch_args")
# sbatch options the Slurm executor sets or relies on (docs/executors.md): given in sbatch_args,
# they would come after its own and win, losing the job's name (how a restarted runner finds it),
# its log, its run directory, the exit file, or running it once; nor what changes where or when the
# job runs, which the refusal checks before submitting (its partition, its one node and task, its
# time) and the runner follows (a held, delayed, test-only or other cluster's job never comes, or
# never answers `squeue`). By long name, with its short form.
RESERVED_SBATCH = {"--job-name": "-J", "--output": "-o", "--error": "-e", "--chdir": "-D", "--requeue": None,
                   "--array": "-a", "--export": None, "--export-file": None, "--open-mode": None, "--parsable": None,
                   "--wait": "-W", "--dependency": "-d", "--wrap": None, "--nodes": "-N", "--ntasks": "-n",
                   "--hold": "-H", "--test-only": None, "--begin": "-b", "--deadline": None, "--immediate": "-I",
                   "--clusters": "-M", "--partition": "-p", "--time": "-t"}


def reserved_sbatch_option(arg: str) -> Optional[str]:
    """The reserved option `arg` is (by its long name), if any: `--chdir=/x`, `-D/x`, and an
    abbreviation sbatch would take for it (`--job=x`: getopt accepts unambiguous prefixes)."""
    if arg.startswith("--"):
        name = arg.split("=", 1)[0]
        exact = [o for o in RESERVED_SBATCH if o == name]
        return (exact or [o for o in RESERVED_SBATCH if len(name) > 3 and o.startswith(name)] or [None])[0]
    if arg.startswith("-") and len(arg) >= 2:
        return next((o for o, short in RESERVED_SBATCH.items() if short == arg[:2]), None)
    return None


def _executor_errors(spec: Spec, at: At) -> Iterator[Diagnostic]:
    executor = spec.executor
    if executor.kind is not ExecutorKind.slurm:
        for key in SLURM_KEYS:
            if getattr(executor, key):
                yield at(("executor", key), f"`{key}` is a Slurm setting but the executor is {executor.kind.value}",
                         "add `kind: slurm` to submit runs as Slurm jobs, or remove the key")
    if executor.kind is ExecutorKind.local:
        for key in ("address", "transfer", "shared_dir"):
            if getattr(executor, key) is not None:
                yield at(("executor", key), f"`{key}` is a Ray setting but the executor is local",
                         "add `kind: ray` to use a Ray cluster, or remove the key")
        return
    if executor.kind is ExecutorKind.slurm:
        kinds = [k.value for k in PhaseKind]
        for kind in executor.time_limit_h:
            if kind not in kinds:
                yield at(("executor", "time_limit_h", kind), f"{kind!r} is not a run kind",
                         f"use one of: {', '.join(kinds)}")
        for i, arg in enumerate(executor.sbatch_args):
            if (option := reserved_sbatch_option(arg)) is not None:
                yield at(("executor", "sbatch_args", i), f"sbatch_args sets {arg!r}"
                         + ("" if arg.startswith(option) else f" ({option})") + ", which the Slurm executor sets itself: the job's name, log, directory, exit file and single run depend on it",
                         "remove it (docs/executors.md lists what every job gets)", at_value=True)
        for key in ("address", "transfer"):
            if getattr(executor, key) is not None:
                yield at(("executor", key), f"`{key}` is a Ray setting but the executor is slurm (its jobs read "
                         "and write their run directories on the shared storage)",
                         "remove the key; set `shared_dir` to the storage every node mounts")
    address = executor.address or ""
    if address.startswith("ray://") or (address and "://" in address and not address.startswith(("http://", "https://"))):
        yield at(("executor", "address"), f"{address!r} is not the Ray dashboard's HTTP address",
                 "use the Jobs API address, e.g. http://head-node:8265 (not the ray:// client port)", at_value=True)
    if executor.shared_dir is not None and not executor.shared_dir.startswith("/"):
        yield at(("executor", "shared_dir"), f"shared_dir {executor.shared_dir!r} is not an absolute path",
                 "give the path every node mounts the shared storage at, e.g. /shared/rlvr", at_value=True)
    if executor.transfer is Transfer.working_dir:
        yield from _working_dir_errors(spec, at)


def _working_dir_errors(spec: Spec, at: At) -> Iterator[Diagnostic]:
    if spec.executor.shared_dir is not None:
        yield at(("executor", "shared_dir"), "shared_dir names shared storage but `transfer: working_dir` "
                 "sends each run directory with its job", "remove shared_dir, or use `transfer: shared`")
    # A job's working_dir is one run directory (at most ~500 MiB through Ray's GCS); a run
    # reading another run's checkpoint or samples would find nothing on its node.
    for name, phase in spec.phases.items():
        if phase.kind is not PhaseKind.eval:
            yield at(("phases", name, "kind"), f"{phase.kind.value} runs hand their outputs to other runs, which "
                     "`transfer: working_dir` cannot carry between nodes (it sends one run directory per job)",
                     "use `transfer: shared` with a shared_dir every node mounts", at_value=True)


def check_references(spec: Spec, names: Names, at: At) -> list[Diagnostic]:
    """Every reference, cycle, seed, phase-kind and executor problem in `spec`."""
    return [*_reference_errors(spec, names, at), *_flywheel_errors(spec, names, at), *_cycle_errors(spec, at),
            *_seed_errors(spec, at), *_all_kind_errors(spec, at), *_executor_errors(spec, at),
            *_schedule_errors(spec, at)]
