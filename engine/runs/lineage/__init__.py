"""`runs/lineage.sqlite`: the record of specs, runs, edges, data, metrics and state changes.

`records` holds the rows, `migrations` the schema, `connect` opens (and upgrades) the database,
`store` the only writer (`Lineage`), `from_plan` turns a plan into rows, `timing` reads each run's
attempts back from its events. The names below are the package's public surface.
"""

from engine.runs.lineage.records import (
    FINISHED,
    UNCHANGED,
    TRANSITIONS,
    ArtifactRecord,
    AttemptRecord,
    DatasetRecord,
    EdgeRecord,
    Event,
    IllegalTransition,
    LeakRecord,
    Metric,
    PlanRecords,
    ProtocolRecord,
    RunDatasetRecord,
    RunProtocolRecord,
    RunRecord,
    RunState,
    SpecRecord,
    WaiverRecord,
    now_iso,
    parse_iso,
)
from engine.runs.lineage.connect import LINEAGE_FILE, open_lineage
from engine.runs.lineage.store import Lineage
from engine.runs.lineage.timing import Attempt, RunTime, began_reason, run_times, running_reason

__all__ = [
    "FINISHED", "UNCHANGED", "TRANSITIONS", "ArtifactRecord", "AttemptRecord", "DatasetRecord", "EdgeRecord", "Event", "IllegalTransition",
    "LeakRecord", "Metric", "PlanRecords", "ProtocolRecord", "RunDatasetRecord", "RunProtocolRecord", "RunRecord", "RunState",
    "SpecRecord", "WaiverRecord", "now_iso", "parse_iso", "LINEAGE_FILE", "Lineage", "open_lineage",
    "Attempt", "RunTime", "began_reason", "run_times", "running_reason",
]
