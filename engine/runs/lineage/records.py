"""The rows of the lineage database, and the run life cycle they record."""

from __future__ import annotations

from datetime import datetime, timezone
from enum import Enum
from typing import Optional

from engine.plan.key import RunKey
from engine.records import Record


class RunState(str, Enum):
    planned = "planned"
    queued = "queued"
    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    blocked = "blocked"
    cancelled = "cancelled"


S = RunState
TRANSITIONS: dict[RunState, frozenset[RunState]] = {
    # planned/queued -> failed: a run refused before it starts (needs more GPUs than exist).
    S.planned: frozenset({S.queued, S.blocked, S.failed}),
    S.queued: frozenset({S.running, S.blocked, S.failed}),
    S.running: frozenset({S.succeeded, S.failed, S.cancelled}),
    S.failed: frozenset({S.queued}),
    S.cancelled: frozenset({S.queued}),
    S.blocked: frozenset({S.queued}),
    S.succeeded: frozenset(),
}
FINISHED = frozenset({S.succeeded, S.failed, S.cancelled})
# marks a succeeded training run's reason when it changed nothing (`runs.completion.unchanged`)
UNCHANGED = "changed nothing: "


class IllegalTransition(RuntimeError):
    """A state change the run life cycle does not allow (a bug in the caller)."""


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def parse_iso(text: Optional[str]) -> Optional[datetime]:
    return datetime.fromisoformat(text) if text else None


class SpecRecord(Record):
    name: str
    path: str
    sha256: str
    text: str
    recorded_at: str = ""
    semantic: Optional[str] = None  # what rule 3's search by meaning did when the spec last ran


class RunRecord(RunKey):
    state: RunState = RunState.planned
    config_json: str = "{}"
    run_dir: Optional[str] = None
    created_at: Optional[str] = None
    started_at: Optional[str] = None
    finished_at: Optional[str] = None
    pid: Optional[int] = None
    job_id: Optional[str] = None  # the executor's id of the current attempt (a Ray submission id)
    host: Optional[str] = None
    heartbeat_at: Optional[str] = None
    exit_code: Optional[int] = None
    reason: Optional[str] = None
    attempt: int = 0


class AttemptRecord(Record):
    """One attempt of a run: what its executor ran it as (every job ever submitted for the run)."""

    run_id: str
    attempt: int
    leader: Optional[str] = None  # the run whose process does this attempt's work, when not its own
    queued: bool = False  # submitted to an executor's queue (Slurm): its time starts when it began
    job_id: Optional[str] = None  # the executor's id (a Slurm job id, a Ray submission id)
    pid: Optional[int] = None  # the process-group leader, where it runs here
    queue_state: Optional[str] = None  # Slurm's last state of its job ("PENDING (Resources)", "RUNNING")
    submitted_at: Optional[str] = None
    began_at: Optional[str] = None


class EdgeRecord(Record):
    parent: str
    child: str
    flows: str = ""


class DatasetRecord(Record):
    spec_name: str
    name: str
    source: str
    split: Optional[str] = None
    role: str
    fingerprint: Optional[str] = None  # what pins its problems (id list or fixed split)
    idlist_path: Optional[str] = None
    idlist_sha256: Optional[str] = None
    content_fingerprint: Optional[str] = None  # sha256 of the normalized problems as loaded
    problems: Optional[int] = None
    verified: Optional[str] = None  # what its `verified:` keeps: "keeps 331 of 390 problems (drops …)"


class RunDatasetRecord(Record):
    run_id: str
    dataset: str
    use: str  # train | pairs_from | select_on | early_stop_on | evaluate
    position: int = 0  # order within the run's uses; the headline metric takes the first evaluated


class ProtocolRecord(Record):
    sha256: str
    name: str
    json_text: str


class RunProtocolRecord(Record):
    run_id: str
    protocol: str
    sha256: str
    use: str  # evaluate | rollout | generate


class ArtifactRecord(Record):
    run_id: str
    kind: str
    path: str
    sha256: Optional[str] = None
    created_at: str = ""
    source_run: Optional[str] = None  # the run whose outputs it was built from (the flywheel's harvest)


class Metric(Record):
    run_id: str
    dataset: str
    protocol: str = ""
    seed: Optional[int] = None
    name: str
    value: float
    step: int = -1  # -1: the run's final value
    protocol_sha256: Optional[str] = None
    idlist_sha256: Optional[str] = None
    judge_version: Optional[str] = None


class Event(Record):
    run_id: str
    time: str
    from_state: Optional[RunState]
    to_state: RunState
    reason: str = ""


class WaiverRecord(Record):
    spec_name: str
    rule: int
    what: str
    reason: str
    spec_line: Optional[int] = None


class LeakRecord(Record):
    """One rule-3 finding that did not refuse the spec: a waived leak or a warning."""

    spec_name: str
    train: str  # dataset names
    evaluation: str
    train_id: str
    eval_id: str
    kind: str
    level: str  # error (waived) | warning
    similarity: float
    scores_json: str = "{}"  # every score measured, by name
    evidence: str = ""  # what running the pair's solutions said
    outcome: str = ""  # waived: <reason> | warning


class PlanRecords(Record):
    """Everything a plan contributes to lineage, in lineage's own terms."""

    runs: list[RunRecord]
    edges: list[EdgeRecord] = []
    datasets: list[DatasetRecord] = []
    run_datasets: list[RunDatasetRecord] = []
    protocols: list[ProtocolRecord] = []
    run_protocols: list[RunProtocolRecord] = []
