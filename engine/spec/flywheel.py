"""The failure-driven data flywheel as the spec declares it: which run's failures feed a phase.

Two declarations: a dpo phase's `pairs_from: {failures: [...], of: U}` (hard-negative pairs) and an
sft phase's `mix: {repair_of: U, classes: [...], share: s}` (format-repair rows). Either harvests
the judged samples unit U's runs made on their TRAINING problems; this module says which unit,
which classes, and which datasets those samples come from, for the reference checks, the
isolation rules and the planner alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from engine.spec.model import PhaseKind, Spec
from engine.spec.phases import FailuresSpec, PhaseFields

# Where a unit's runs leave judged samples of their own training problems, and from which field's
# dataset: rollout traces (grpo, repair), the samples its pairs came from (dpo), raft's cycles.
HARVESTABLE: dict[PhaseKind, str] = {PhaseKind.grpo: "train", PhaseKind.repair: "train",
                                     PhaseKind.raft: "train", PhaseKind.dpo: "pairs_from"}


@dataclass(frozen=True, kw_only=True)
class Flywheel:
    field: str  # pairs_from | mix
    of: str  # the phase or variant whose failures are harvested
    of_key: str  # the key naming it inside `field` (for spec lines)
    on: Optional[str]  # a harvest pass over this dataset instead of the unit's own samples
    classes: tuple[str, ...]

    @property
    def use(self) -> str:
        return "hard negatives" if self.field == "pairs_from" else "format-repair rows"


def overlay(phase: PhaseFields, variant: PhaseFields) -> PhaseFields:
    """The fields a variant's runs use: its phase's, with what the variant names replaced."""
    changed = {k: getattr(variant, k) for k in variant.model_fields_set if k in PhaseFields.model_fields}
    return phase.model_copy(update=changed)


def unit_fields(spec: Spec, name: str) -> Optional[tuple[PhaseKind, PhaseFields]]:
    """A phase's or a variant's kind and effective fields (None: no such unit)."""
    if name in spec.phases:
        return spec.phases[name].kind, spec.phases[name]
    variant = spec.variants.get(name)
    phase = spec.phases.get(variant.phase) if variant else None
    if variant is None or phase is None:
        return None
    return phase.kind, overlay(phase, variant)


def flywheel(fields: PhaseFields) -> Optional[Flywheel]:
    """What a phase's (or variant's effective) fields harvest, if anything."""
    if isinstance(fields.pairs_from, FailuresSpec):
        p = fields.pairs_from
        return Flywheel(field="pairs_from", of=p.of, of_key="of", on=p.on, classes=tuple(p.failures))
    if fields.mix is not None:
        m = fields.mix
        return Flywheel(field="mix", of=m.repair_of, of_key="repair_of", on=None, classes=tuple(m.classes))
    return None


def pairs_dataset(fields: PhaseFields) -> Optional[str]:
    """`pairs_from` when it names a dataset (not failures)."""
    return fields.pairs_from if isinstance(fields.pairs_from, str) else None


def harvested(spec: Spec, wheel: Flywheel) -> list[str]:
    """The datasets whose problems the harvest's samples are on: `on`, else the unit's own
    training-sample dataset (empty when the unit is unknown or leaves no judged samples)."""
    if wheel.on is not None:
        return [wheel.on]
    found = unit_fields(spec, wheel.of)
    if found is None or found[0] not in HARVESTABLE:
        return []
    kind, fields = found
    used = getattr(fields, HARVESTABLE[kind])
    return [used] if isinstance(used, str) else []  # a dpo of hard negatives judges no samples itself
