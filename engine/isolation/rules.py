"""Isolation rules 1, 2, 4 and 5 (docs/architecture.md lists all five), checked on the spec's roles and uses.

Rule 3 (content leakage) lives in `engine.isolation.content.check_content`, which
returns a `RuleReport` like the checks here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Optional

from engine.errors import Diagnostic
from engine.spec.flywheel import flywheel, harvested, overlay
from engine.spec.model import PhaseKind, Role, Waiver
from engine.spec.phases import PhaseFields
from engine.spec.resolve import find_file
from engine.spec.validated import AppliedWaiver, RuleReport, ValidatedSpec


@dataclass(frozen=True, kw_only=True)
class Violation:
    rule: int
    keys: tuple[str | int, ...]  # where in the spec
    message: str
    fix: str
    dataset: Optional[str] = None  # the dataset as written at `keys`
    phase: Optional[str] = None  # the phase or variant it happens in


RULES = {
    1: "1: a test/test-only dataset never trains, builds pairs, selects checkpoints or stops early",
    2: "2: a valid dataset never trains or builds pairs",
    4: "4: regression and evaluation sets are frozen id lists",
    5: "5: compared runs share the evaluation protocol exactly",
}
USE_WORDS = {"train": "to train", "pairs_from": "to build preference pairs",
             "select_on": "to select checkpoints", "early_stop_on": "for early stopping"}


class Datasets:
    """Roles of the spec's datasets, seen through aliases (same source + split, or same local file)."""

    def __init__(self, v: ValidatedSpec) -> None:
        self.spec = v.spec
        self.v = v
        self._groups: dict[tuple[object, ...], list[str]] = {}
        for name, ds in v.spec.datasets.items():
            self._groups.setdefault(self.identity(name), []).append(name)

    def identity(self, name: str) -> tuple[object, ...]:
        ds = self.spec.datasets[name]
        if ds.path is not None:
            path = resolve_path(self.v, ds.path)
            return (ds.source, str(path) if path else ds.path)
        return (ds.source, ds.split)

    def evaluation_only(self, name: str) -> bool:
        ds = self.spec.datasets[name]
        return ds.test_only or ds.role in (Role.test, Role.regression)

    def restricted(self, name: str, test: bool) -> Optional[str]:
        """The dataset (itself or an alias) that makes `name` evaluation-only (test) / valid."""
        for other in [name, *self._groups[self.identity(name)]]:
            if (self.evaluation_only(other) if test else self.spec.datasets[other].role == Role.valid):
                return other
        return None

    def describe(self, name: str, culprit: str) -> str:
        ds = self.spec.datasets[culprit]
        kind = "test-only" if ds.test_only else ds.role.value
        if culprit == name:
            return f"{kind} dataset {name!r}"
        where = f"{ds.source} {ds.path or ds.split}"
        return f"{name!r}, the same data ({where}) as {kind} dataset {culprit!r},"


def resolve_path(v: ValidatedSpec, written: str) -> Optional[Path]:
    return find_file(v.loaded, v.registry, written)


def _entries(v: ValidatedSpec) -> Iterator[tuple[str, str, PhaseFields]]:
    """(section, name, fields as written) for every phase and variant."""
    for name, phase in v.spec.phases.items():
        yield "phases", name, phase
    for name, variant in v.spec.variants.items():
        yield "variants", name, variant


def _waive_hint(rule: int, dataset: Optional[str], phase: Optional[str]) -> str:
    named = "".join(f", {k}: {x}" for k, x in (("dataset", dataset), ("phase", phase)) if x)
    return f"or, if this is deliberate, waive it: `allow: [{{rule: {rule}{named}, reason: ...}}]`"


def _use_violations(v: ValidatedSpec, ds: Datasets) -> Iterator[Violation]:
    """Rules 1 and 2 on every dataset use of every phase and variant (aliases included)."""
    for section, name, fields in _entries(v):
        for use in ("train", "pairs_from", "select_on", "early_stop_on"):
            used = getattr(fields, use)
            if not isinstance(used, str) or used not in v.spec.datasets:
                continue
            culprit, rule = ds.restricted(used, test=True), 1
            if culprit is None and use in ("train", "pairs_from"):
                culprit, rule = ds.restricted(used, test=False), 2
            if culprit is None:
                continue
            better = "a train dataset" if use in ("train", "pairs_from") else "a valid dataset"
            yield Violation(rule=rule, keys=(section, name, use), dataset=used, phase=name,
                            message=f"{ds.describe(used, culprit)} is used {USE_WORDS[use]}",
                            fix=f"use {better} for `{use}` {_waive_hint(rule, used, name)}")


def _flywheel_violations(v: ValidatedSpec, ds: Datasets) -> Iterator[Violation]:
    """Rules 1 and 2 for the flywheel: only training problems feed it. The samples it harvests
    (`on:`, or the harvested unit's own training-sample dataset) must be on a train dataset, even
    when that unit's own use was waived: a waiver covers the phase it names, not its children."""
    for section, name, fields in _entries(v):
        wheel = flywheel(fields)
        if wheel is None:
            continue
        where = (section, name, wheel.field, "on") if wheel.on is not None else (section, name, wheel.field, wheel.of_key)
        for used in harvested(v.spec, wheel):
            if used not in v.spec.datasets:
                continue
            culprit, rule = ds.restricted(used, test=True), 1
            if culprit is None:
                culprit, rule = ds.restricted(used, test=False), 2
            if culprit is None:
                continue
            how = f"a harvest pass over {ds.describe(used, culprit)}" if wheel.on is not None else (
                f"the judged samples of {wheel.of!r} on {ds.describe(used, culprit)}")
            yield Violation(rule=rule, keys=where, dataset=used, phase=name,
                            message=f"the flywheel would build {wheel.use} from {how}: only training problems "
                                    "may feed it",
                            fix=f"harvest a phase that samples a train dataset, or set `on:` to one; "
                                f"{_waive_hint(rule, used, name)}")


def _registry_role_violations(v: ValidatedSpec) -> Iterator[Violation]:
    """Rule 1 at the source: a test-only registry split declared with a training-side role."""
    for name, ds in v.spec.datasets.items():
        source = v.sources.get(name)
        split = source.splits.get(ds.split or "") if source else None
        if split is not None and split.test_only and ds.role != Role.test:
            yield Violation(rule=1, keys=("datasets", name, "role"), dataset=name,
                            message=f"{ds.source} {ds.split} is a test-only benchmark but is declared role {ds.role.value!r}",
                            fix=f"declare it `role: test` and use it only in final evaluation {_waive_hint(1, name, None)}")


def registry_role_errors(v: ValidatedSpec) -> list[Diagnostic]:
    """A role the registry does not allow for a split that is not test-only (not an isolation rule)."""
    out = []
    for name, ds in v.spec.datasets.items():
        source = v.sources.get(name)
        split = source.splits.get(ds.split or "") if source else None
        allowed = split.roles if split is not None else (source.roles if source and source.local else None)
        if allowed and ds.role not in allowed and not (split and split.test_only):
            out.append(v.loaded.diagnostic(
                ("datasets", name, "role"), f"registry/datasets.yaml does not allow role {ds.role.value!r} for {ds.source} {ds.split or ''}".rstrip(),
                f"use one of: {', '.join(r.value for r in allowed)}", at_value=True))
    return out


def _evaluated(v: ValidatedSpec) -> dict[str, tuple[str | int, ...]]:
    """Datasets used for evaluation of any kind → where they are first named for it."""
    out: dict[str, tuple[str | int, ...]] = {}
    for when in ("every_phase", "final"):
        schedule = getattr(v.spec.evaluate, when)
        for i, name in enumerate(schedule.datasets if schedule else []):
            out.setdefault(name, ("evaluate", when, "datasets", i))
    for section, name, fields in _entries(v):
        for i, used in enumerate(fields.evaluate or []):
            out.setdefault(used, (section, name, "evaluate", i))
        for use in ("select_on", "early_stop_on"):
            if getattr(fields, use) is not None:
                out.setdefault(getattr(fields, use), (section, name, use))
    for name, ds in v.spec.datasets.items():
        if ds.role != Role.train:
            out.setdefault(name, ("datasets", name, "role"))
    return {k: keys for k, keys in out.items() if k in v.spec.datasets}


def _frozen_violations(v: ValidatedSpec) -> Iterator[Violation]:
    """Rule 4: what is evaluated is a frozen set: an `ids:` list, or a split the publisher fixed."""
    for name in _evaluated(v):
        ds = v.spec.datasets[name]
        if ds.ids is not None:
            continue
        source = v.sources.get(name)
        split = source.splits.get(ds.split or "") if source else None
        fixed = split is not None and split.fixed
        if ds.role == Role.regression or not fixed:
            why = ("a regression set is monitored across runs and must be a frozen id list" if ds.role == Role.regression
                   else f"{ds.source} {ds.path or ds.split or ''} is not a fixed split: its problems can change".rstrip())
            yield Violation(rule=4, keys=("datasets", name), dataset=name,
                            message=f"{name!r} is used for evaluation without `ids:`; {why}",
                            fix=f"add `ids: registry/idlists/{name}.txt` (`rlvr-run data idlist` writes one) "
                                f"{_waive_hint(4, name, None)}")


def _protocol_violations(v: ValidatedSpec) -> Iterator[Violation]:
    """Rule 5: every run compared on a dataset is evaluated with the same protocol."""
    schedule = v.spec.evaluate.every_phase
    reference = v.spec.protocols.get(schedule.protocol) if schedule else None
    for name, variant in v.spec.variants.items():
        phase = v.spec.phases.get(variant.phase)
        if phase is not None and phase.kind == PhaseKind.eval and "protocol" in variant.model_fields_set:
            yield Violation(rule=5, keys=("variants", name, "protocol"), phase=name,
                            message=f"variant {name!r} changes the evaluation protocol of eval phase {variant.phase!r}",
                            fix=f"declare a separate eval phase for the other protocol {_waive_hint(5, None, name)}")
    for name, phase in v.spec.phases.items():
        proto = v.spec.protocols.get(phase.protocol or "")
        if phase.kind == PhaseKind.eval and proto is not None and reference is not None and proto != reference:
            yield Violation(rule=5, keys=("phases", name, "protocol"), phase=name,
                            message=f"eval phase {name!r} uses protocol {phase.protocol!r}, other phases are "
                                    f"evaluated with {schedule.protocol!r} (evaluate.every_phase)",
                            fix=f"drop `protocol:` or use {schedule.protocol!r} {_waive_hint(5, None, name)}")
    for section, name, fields in _entries(v):
        yield from _best_of_n_cost(v, section, name, fields)


def _best_of_n_cost(v: ValidatedSpec, section: str, name: str, fields: PhaseFields) -> Iterator[Violation]:
    """best-of-n is compared at matched cost: the samples it states are the samples it draws."""
    phase = v.spec.phases.get(name if section == "phases" else getattr(fields, "phase", ""))
    if phase is None or phase.kind != PhaseKind.best_of_n:
        return
    effective = overlay(phase, fields) if section == "variants" else fields
    proto = v.spec.protocols.get(effective.protocol or "")
    if proto is not None and effective.n is not None and proto.n != effective.n:
        yield Violation(rule=5, keys=(section, name, "n"), phase=name,
                        message=f"best-of-n states n={effective.n} but protocol {effective.protocol!r} draws "
                                f"n={proto.n}: the matched-cost comparison would be wrong",
                        fix=f"make them equal (set the protocol's `n: {effective.n}`) {_waive_hint(5, None, name)}")


def _matches(waiver: Waiver, violation: Violation) -> bool:
    if waiver.rule != violation.rule:
        return False
    if waiver.phase is not None and waiver.phase != violation.phase:
        return False
    named = {waiver.dataset, *(waiver.datasets or [])} - {None}
    return not named or violation.dataset in named


def _where(v: ValidatedSpec, keys: tuple[str | int, ...]) -> str:
    line, col = v.loaded.locate(*keys)
    return f"{v.loaded.path}:{line}:{col}"


def apply_waivers(v: ValidatedSpec, violations: Iterable[Violation]) -> RuleReport:
    """Waived violations become AppliedWaivers, the rest errors; an `allow:` entry that waives
    nothing is a warning (rule-3 entries are left to the content check)."""
    report, used = RuleReport(), set()
    for violation in violations:
        index = next((i for i, w in enumerate(v.spec.allow) if _matches(w, violation)), None)
        if index is None:
            report.errors.append(v.loaded.diagnostic(violation.keys, violation.message, violation.fix,
                                                     rule=RULES[violation.rule]))
            continue
        used.add(index)
        report.waivers.append(AppliedWaiver(
            rule=violation.rule, what=violation.message, reason=v.spec.allow[index].reason,
            where=_where(v, violation.keys), waiver_at=_where(v, ("allow", index)), index=index))
    for i, waiver in enumerate(v.spec.allow):
        if i not in used and waiver.rule != 3:
            report.warnings.append(f"{_where(v, ('allow', i))}: allow[{i}] (rule {waiver.rule}) waives nothing; remove it")
    return report


def check_isolation(v: ValidatedSpec) -> RuleReport:
    """Rules 1, 2, 4 and 5 on roles and uses, with the spec's waivers applied."""
    ds = Datasets(v)
    violations = [*_registry_role_violations(v), *_use_violations(v, ds), *_flywheel_violations(v, ds),
                  *_frozen_violations(v),
                  *_protocol_violations(v)]
    report = apply_waivers(v, violations)
    report.errors[:0] = registry_role_errors(v)
    return report
