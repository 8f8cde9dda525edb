"""The spec's phases and variants as units: a variant is its phase with its overrides applied
(hparams and overrides merged key by key), each unit's flywheel, and the order that plans a
unit after the one it starts from and the one it harvests."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from pydantic import BaseModel

from engine.errors import UserError
from engine.plan.model import BASE
from engine.spec.flywheel import Flywheel, flywheel
from engine.spec.model import PhaseKind, Spec
from engine.spec.phases import PhaseFields


@dataclass(kw_only=True)
class Unit:
    """A phase or a variant with its variant overrides applied."""

    name: str
    phase: str
    variant: Optional[str]
    kind: PhaseKind
    fields: dict[str, Any]  # resolved PhaseFields values, by python field name


def resolve_units(spec: Spec) -> dict[str, Unit]:
    units: dict[str, Unit] = {}
    for name, phase in spec.phases.items():
        units[name] = Unit(name=name, phase=name, variant=None, kind=phase.kind,
                           fields=_fields(phase))
    for name, variant in spec.variants.items():
        base = spec.phases.get(variant.phase)
        if base is None:
            raise UserError(f"variant {name!r} names unknown phase {variant.phase!r}")
        merged = _fields(base)
        for key, value in _fields(variant, only_set=True).items():
            if key in ("hparams", "overrides") and isinstance(merged.get(key), dict) and value is not None:
                merged[key] = _deep_merge(merged[key], value)
            else:
                merged[key] = value
        units[name] = Unit(name=name, phase=variant.phase, variant=name, kind=base.kind, fields=merged)
    return units


def _fields(model: BaseModel, only_set: bool = False) -> dict[str, Any]:
    names = model.model_fields_set if only_set else type(model).model_fields
    skip = {"kind", "phase"}
    return {k: getattr(model, k) for k in names if k not in skip}


def _deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def unit_order(units: dict[str, Unit]) -> list[Unit]:
    """Units with their `from:` unit first (spec order otherwise); cycles are a UserError."""
    order: list[Unit] = []
    state: dict[str, int] = {}

    def visit(name: str, chain: tuple[str, ...]) -> None:
        if state.get(name) == 2:
            return
        if state.get(name) == 1:
            raise UserError(f"cycle in from: {' -> '.join(chain + (name,))}")
        state[name] = 1
        wheel = unit_flywheel(units[name])
        for parent in (units[name].fields.get("from_"), wheel.of if wheel else None):
            if parent and parent != BASE:
                if parent not in units:
                    raise UserError(f"{name}: {parent!r} is neither `base`, a phase, nor a variant")
                visit(parent, chain + (name,))
        state[name] = 2
        order.append(units[name])

    for name in units:
        visit(name, ())
    return order


def unit_flywheel(unit: Unit) -> Optional[Flywheel]:
    return flywheel(PhaseFields.model_construct(**{k: v for k, v in unit.fields.items() if k in PhaseFields.model_fields}))
