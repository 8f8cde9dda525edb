"""Who a run is, apart from the plan's models: the run records import it without the spec's schema."""

from __future__ import annotations

from typing import Optional

from engine.records import Record
from engine.spec.kinds import PhaseKind


class RunKey(Record):
    """Who a run is: its id and the coordinates a person reads (lineage and exports reuse it)."""

    id: str
    spec_name: str
    phase: str
    variant: Optional[str] = None
    seed: Optional[int] = None
    kind: PhaseKind
    trainer: Optional[str] = None
