"""`runs/lineage.sqlite`: the record of specs, runs, edges, data, metrics and state changes.

This module is the only writer of the lineage database. Every write runs in an
explicit `BEGIN IMMEDIATE` transaction (the runner's main thread and its
heartbeat thread write concurrently; an immediate lock avoids the WAL
"busy snapshot" upgrade failure of deferred transactions). The schema evolves
through named, ordered migrations (sqlite-utils `Migrations`), each applied in
a transaction together with its record, so an old database opens and upgrades.
"""

from __future__ import annotations

import contextlib
import json
import socket
import sqlite3
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path
from typing import Any, Iterator, Mapping, Optional

from pydantic import BaseModel
from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

from engine.errors import UserError
from engine.plan.model import Plan
from engine.spec.validated import ValidatedSpec

LINEAGE_FILE = "lineage.sqlite"
MIGRATIONS = Migrations("rlvr-run-lineage")


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


class IllegalTransition(RuntimeError):
    """A state change the run life cycle does not allow (a bug in the caller)."""


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def parse_iso(text: Optional[str]) -> Optional[datetime]:
    return datetime.fromisoformat(text) if text else None


# ---------------------------------------------------------------- records
class SpecRecord(BaseModel):
    name: str
    path: str
    sha256: str
    text: str
    recorded_at: str = ""


class RunRecord(BaseModel):
    id: str
    spec_name: str
    phase: str
    variant: Optional[str] = None
    seed: Optional[int] = None
    kind: str
    trainer: Optional[str] = None
    state: RunState = RunState.planned
    config_json: str = "{}"
    run_dir: Optional[str] = None
    created_at: Optional[str] = None
    started_at: Optional[str] = None
    finished_at: Optional[str] = None
    pid: Optional[int] = None
    host: Optional[str] = None
    heartbeat_at: Optional[str] = None
    exit_code: Optional[int] = None
    reason: Optional[str] = None
    attempt: int = 0


class EdgeRecord(BaseModel):
    parent: str
    child: str
    flows: str = ""


class DatasetRecord(BaseModel):
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


class RunDatasetRecord(BaseModel):
    run_id: str
    dataset: str
    use: str  # train | pairs_from | select_on | early_stop_on | evaluate
    position: int = 0  # order within the run's uses; the headline metric takes the first evaluated


class ProtocolRecord(BaseModel):
    sha256: str
    name: str
    json_text: str


class RunProtocolRecord(BaseModel):
    run_id: str
    protocol: str
    sha256: str
    use: str  # evaluate | rollout | generate


class ArtifactRecord(BaseModel):
    run_id: str
    kind: str
    path: str
    sha256: Optional[str] = None
    created_at: str = ""


class Metric(BaseModel):
    run_id: str
    dataset: str
    protocol: str = ""
    seed: Optional[int] = None
    name: str
    value: float
    step: int = -1  # -1: the run's final value


class Event(BaseModel):
    run_id: str
    time: str
    from_state: Optional[RunState]
    to_state: RunState
    reason: str = ""


class WaiverRecord(BaseModel):
    spec_name: str
    rule: int
    what: str
    reason: str
    spec_line: Optional[int] = None


class PlanRecords(BaseModel):
    """Everything a plan contributes to lineage, in lineage's own terms."""

    runs: list[RunRecord]
    edges: list[EdgeRecord] = []
    datasets: list[DatasetRecord] = []
    run_datasets: list[RunDatasetRecord] = []
    protocols: list[ProtocolRecord] = []
    run_protocols: list[RunProtocolRecord] = []


# ---------------------------------------------------------------- schema
@MIGRATIONS(name="m001_runs_and_events")
def _m001(db: Database) -> None:
    db["specs"].create(
        {"name": str, "sha256": str, "path": str, "text": str, "recorded_at": str},
        pk=("name", "sha256"),
    )
    db["runs"].create(
        {
            "id": str, "spec_name": str, "phase": str, "variant": str, "seed": int,
            "kind": str, "trainer": str, "state": str, "config_json": str, "run_dir": str,
            "created_at": str, "started_at": str, "finished_at": str, "pid": int,
            "host": str, "heartbeat_at": str, "exit_code": int, "reason": str,
        },
        pk="id",
        not_null={"spec_name", "phase", "kind", "state"},
    )
    db["runs"].create_index(["spec_name"])
    db["edges"].create({"parent": str, "child": str, "flows": str}, pk=("parent", "child"))
    db["events"].create(
        {"id": int, "run_id": str, "time": str, "from_state": str, "to_state": str, "reason": str},
        pk="id",
    )
    db["events"].create_index(["run_id"])


@MIGRATIONS(name="m002_data_metrics_waivers")
def _m002(db: Database) -> None:
    db["datasets"].create(
        {
            "spec_name": str, "name": str, "source": str, "split": str, "role": str,
            "fingerprint": str, "idlist_path": str, "idlist_sha256": str,
        },
        pk=("spec_name", "name"),
    )
    db["run_datasets"].create(
        {"run_id": str, "dataset": str, "use": str, "position": int},
        pk=("run_id", "dataset", "use"),
    )
    db["protocols"].create({"sha256": str, "name": str, "json_text": str}, pk="sha256")
    db["run_protocols"].create(
        {"run_id": str, "protocol": str, "sha256": str, "use": str},
        pk=("run_id", "protocol", "use"),
    )
    db["artifacts"].create(
        {"run_id": str, "kind": str, "path": str, "sha256": str, "created_at": str},
        pk=("run_id", "path"),
    )
    db["metrics"].create(
        {
            "run_id": str, "dataset": str, "protocol": str, "seed": int,
            "name": str, "value": float, "step": int,
        },
        pk=("run_id", "dataset", "protocol", "name", "step"),
    )
    db["waivers"].create(
        {"spec_name": str, "rule": int, "what": str, "reason": str, "spec_line": int},
        pk=("spec_name", "rule", "what"),
    )


@MIGRATIONS(name="m003_run_attempts")
def _m003(db: Database) -> None:
    # Resume re-runs failed runs: each execution is a numbered attempt with its own log.
    db["runs"].add_column("attempt", int, not_null_default=0)


@MIGRATIONS(name="m004_dataset_content")
def _m004(db: Database) -> None:
    # What was actually loaded, not just what pins it: a re-uploaded dataset shows up here.
    db["datasets"].add_column("content_fingerprint", str)
    db["datasets"].add_column("problems", int)


def _connect(path: Path, *, readonly: bool) -> Database:
    # A reader opens read-write but query-only: a mode=ro connection to a WAL database
    # leaves -wal/-shm files behind, while a read-write one removes them when it closes last.
    conn = sqlite3.connect(f"file:{path}?mode={'rw' if readonly else 'rwc'}", uri=True, timeout=30, check_same_thread=False)
    if readonly:
        conn.execute("PRAGMA query_only = ON")
    return Database(conn)


def _check_known_migrations(db: Database, path: Path) -> None:
    # Every registered migration is pending on an empty database: that is the known set.
    known = {m.name for m in MIGRATIONS.pending(Database(memory=True))}
    unknown = [m.name for m in MIGRATIONS.applied(db) if m.name not in known]
    if unknown:
        raise UserError(
            f"{path} was written by a newer rlvr-run (schema migrations {', '.join(unknown)} "
            "are unknown here); upgrade rlvr-run or use another runs directory"
        )


def open_lineage(path: Path | str, *, readonly: bool = False) -> "Lineage":
    """Open (creating and migrating unless `readonly`) the lineage database at `path`."""
    path = Path(path)
    if readonly and not path.exists():
        raise UserError(f"no lineage at {path}: nothing has run yet")
    if not readonly:
        path.parent.mkdir(parents=True, exist_ok=True)
    db = _connect(path, readonly=readonly)
    _check_known_migrations(db, path)
    if readonly:
        pending = [m.name for m in MIGRATIONS.pending(db)]
        if pending:
            raise UserError(
                f"{path} uses an older lineage schema (pending: {', '.join(pending)}); "
                "run `rlvr-run SPEC` once to upgrade it"
            )
    else:
        db.enable_wal()
        MIGRATIONS.apply(db)
    return Lineage(db=db, path=path, readonly=readonly)


# ---------------------------------------------------------------- the handle
class Lineage:
    """A connection to one lineage database. Not thread-safe: open one per thread."""

    def __init__(self, *, db: Database, path: Path, readonly: bool) -> None:
        self.db = db
        self.path = path
        self.readonly = readonly

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> "Lineage":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def schema_version(self) -> int:
        return len(MIGRATIONS.applied(self.db))

    @contextlib.contextmanager
    def _write(self) -> Iterator[Database]:
        if self.readonly:
            raise RuntimeError("lineage opened read-only")
        self.db.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            self.db.rollback()
            raise
        self.db.conn.execute("COMMIT")

    # ------------------------------------------------------------ specs, plans, waivers
    def record_spec(self, spec: SpecRecord) -> None:
        row = spec.model_dump()
        row["recorded_at"] = spec.recorded_at or now_iso()
        with self._write() as db:
            db["specs"].upsert(row, pk=("name", "sha256"))

    def record_plan(
        self, plan: Plan, validated: ValidatedSpec, run_dirs: Optional[Mapping[str, Path]] = None
    ) -> list[str]:
        """Record the spec, its waivers and every run of `plan`; returns the ids of new runs."""
        self.record_spec(spec_record(validated))
        self.record_waivers(waiver_records(validated))
        return self.record_plan_records(plan_records(plan, validated, run_dirs or {}))

    def record_plan_records(self, records: PlanRecords) -> list[str]:
        """Insert new runs as `planned`; refresh descriptive columns of known ones, never their state.

        Returns the ids of the runs that were new.
        """
        new: list[str] = []
        with self._write() as db:
            for run in records.runs:
                if self._row(run.id) is None:
                    row = run.model_dump(mode="json")
                    row.update(state=RunState.planned.value, created_at=run.created_at or now_iso())
                    db["runs"].insert(row)
                    self._event(run.id, None, RunState.planned, "planned")
                    new.append(run.id)
                else:
                    db["runs"].update(run.id, {"config_json": run.config_json, "run_dir": run.run_dir})
            db["edges"].upsert_all([e.model_dump() for e in records.edges], pk=("parent", "child"))
            db["datasets"].upsert_all([d.model_dump() for d in records.datasets], pk=("spec_name", "name"))
            db["run_datasets"].upsert_all(
                [d.model_dump() for d in records.run_datasets], pk=("run_id", "dataset", "use")
            )
            db["protocols"].upsert_all([p.model_dump() for p in records.protocols], pk="sha256")
            db["run_protocols"].upsert_all(
                [p.model_dump() for p in records.run_protocols], pk=("run_id", "protocol", "use")
            )
        return new

    def record_waivers(self, waivers: list[WaiverRecord]) -> None:
        with self._write() as db:
            db["waivers"].upsert_all([w.model_dump() for w in waivers], pk=("spec_name", "rule", "what"))

    # ------------------------------------------------------------ life cycle
    def set_state(self, run_id: str, to_state: RunState, reason: str = "", **fields: Any) -> RunRecord:
        """Move a run to `to_state` (validated) and record the event, in one transaction.

        `fields` updates other run columns in the same transaction (pid, exit_code, ...).
        """
        to_state = RunState(to_state)
        with self._write() as db:
            row = self._row(run_id)
            if row is None:
                raise KeyError(f"unknown run {run_id}")
            from_state = RunState(row["state"])
            if to_state not in TRANSITIONS[from_state]:
                raise IllegalTransition(f"run {run_id}: {from_state.value} -> {to_state.value} is not allowed")
            update: dict[str, Any] = {"state": to_state.value, "reason": reason or None, **fields}
            stamp = now_iso()
            if to_state is RunState.running:
                update.update(started_at=stamp, finished_at=None, exit_code=None, heartbeat_at=stamp)
                update.setdefault("host", socket.gethostname())
            elif to_state in FINISHED:
                update["finished_at"] = stamp
            db["runs"].update(run_id, update)
            self._event(run_id, from_state, to_state, reason, stamp)
        return self.run(run_id)

    def record_launch(self, run_id: str, pid: int) -> None:
        """The process-group leader of a run that `set_state(running)` just started."""
        with self._write() as db:
            db["runs"].update(run_id, {"pid": pid})

    def heartbeat(self, run_ids: list[str]) -> None:
        if not run_ids:
            return
        marks = ",".join("?" for _ in run_ids)
        with self._write() as db:
            db.execute(
                f"UPDATE runs SET heartbeat_at = ? WHERE state = 'running' AND id IN ({marks})",
                [now_iso(), *run_ids],
            )

    def record_metric(self, metric: Metric) -> None:
        with self._write() as db:
            db["metrics"].upsert(metric.model_dump(), pk=("run_id", "dataset", "protocol", "name", "step"))

    def record_artifact(self, artifact: ArtifactRecord) -> None:
        row = artifact.model_dump()
        row["created_at"] = artifact.created_at or now_iso()
        with self._write() as db:
            db["artifacts"].upsert(row, pk=("run_id", "path"))

    def _event(
        self, run_id: str, from_state: Optional[RunState], to_state: RunState, reason: str, stamp: str = ""
    ) -> None:
        self.db["events"].insert(
            {
                "run_id": run_id,
                "time": stamp or now_iso(),
                "from_state": from_state.value if from_state else None,
                "to_state": to_state.value,
                "reason": reason,
            }
        )

    # ------------------------------------------------------------ queries
    def _row(self, run_id: str) -> Optional[dict[str, Any]]:
        rows = list(self.db["runs"].rows_where("id = ?", [run_id]))
        return rows[0] if rows else None

    def run(self, run_id: str) -> RunRecord:
        row = self._row(run_id)
        if row is None:
            raise KeyError(f"unknown run {run_id}")
        return RunRecord.model_validate(row)

    def runs(self, spec_name: Optional[str] = None, state: Optional[RunState] = None) -> list[RunRecord]:
        where, args = [], []
        if spec_name is not None:
            where.append("spec_name = ?")
            args.append(spec_name)
        if state is not None:
            where.append("state = ?")
            args.append(RunState(state).value)
        rows = self.db["runs"].rows_where(" AND ".join(where) or None, args, order_by="created_at, rowid")
        return [RunRecord.model_validate(r) for r in rows]

    def states(self, run_ids: list[str]) -> dict[str, RunState]:
        return {r.id: r.state for r in self.runs() if r.id in set(run_ids)}

    def events(self, run_id: Optional[str] = None) -> list[Event]:
        rows = self.db["events"].rows_where("run_id = ?" if run_id else None, [run_id] if run_id else [], order_by="id")
        return [Event.model_validate(r) for r in rows]

    def metrics(self, run_id: str) -> list[Metric]:
        return [Metric.model_validate(r) for r in self.db["metrics"].rows_where("run_id = ?", [run_id])]

    def artifacts(self, run_id: str) -> list[ArtifactRecord]:
        return [ArtifactRecord.model_validate(r) for r in self.db["artifacts"].rows_where("run_id = ?", [run_id])]

    def edges(self) -> list[EdgeRecord]:
        return [EdgeRecord.model_validate(r) for r in self.db["edges"].rows]

    def waivers(self, spec_name: str) -> list[WaiverRecord]:
        return [WaiverRecord.model_validate(r) for r in self.db["waivers"].rows_where("spec_name = ?", [spec_name])]

    def spec_names(self) -> list[str]:
        return sorted({r["spec_name"] for r in self.db.query("SELECT DISTINCT spec_name FROM runs")})

    def evaluated_datasets(self, run_id: str) -> list[str]:
        rows = self.db["run_datasets"].rows_where(
            "run_id = ? AND use = 'evaluate'", [run_id], order_by="position"
        )
        return [r["dataset"] for r in rows]


# ---------------------------------------------------------------- plan -> records
def spec_record(validated: ValidatedSpec) -> SpecRecord:
    loaded = validated.loaded
    return SpecRecord(name=validated.spec.name, path=str(loaded.path), sha256=loaded.sha256, text=loaded.text)


def waiver_records(validated: ValidatedSpec) -> list[WaiverRecord]:
    out = []
    for waiver in validated.waivers:
        line = int(waiver.waiver_at.rsplit(":", 2)[-2]) if waiver.waiver_at.count(":") >= 2 else None
        out.append(
            WaiverRecord(spec_name=validated.spec.name, rule=waiver.rule, what=waiver.what, reason=waiver.reason, spec_line=line)
        )
    return out


def plan_records(plan: Plan, validated: ValidatedSpec, run_dirs: Mapping[str, Path]) -> PlanRecords:
    spec = validated.spec
    records = PlanRecords(runs=[])
    for name, ds in spec.datasets.items():
        path = validated.idlist_paths.get(name)
        records.datasets.append(
            DatasetRecord(
                spec_name=spec.name, name=name, source=ds.source, split=ds.split, role=ds.role.value,
                fingerprint=validated.dataset_fingerprints.get(name), idlist_path=str(path) if path else None,
                idlist_sha256=validated.idlist_hashes.get(name),
                content_fingerprint=validated.content_fingerprints.get(name),
                problems=validated.dataset_sizes.get(name),
            )
        )
    protocols: dict[str, ProtocolRecord] = {}
    for run in plan.runs:
        run_dir = run_dirs.get(run.id)
        records.runs.append(
            RunRecord(
                id=run.id, spec_name=run.spec_name, phase=run.phase, variant=run.variant, seed=run.seed,
                kind=run.kind.value, trainer=run.trainer, config_json=config_json(run.frozen_config()),
                run_dir=str(run_dir) if run_dir else None,
            )
        )
        records.edges += [EdgeRecord(parent=e.parent, child=e.child, flows=",".join(e.flows)) for e in run.edges]
        for position, (dataset, rd) in enumerate(run.datasets.items()):
            records.run_datasets += [
                RunDatasetRecord(run_id=run.id, dataset=dataset, use=use, position=position) for use in rd.uses
            ]
        for use, proto in run.config.get("protocols", {}).items():
            sha = validated.protocol_hash(proto["name"])
            protocols[sha] = ProtocolRecord(sha256=sha, name=proto["name"], json_text=config_json(proto))
            records.run_protocols.append(RunProtocolRecord(run_id=run.id, protocol=proto["name"], sha256=sha, use=use))
    records.protocols = list(protocols.values())
    return records


def config_json(config: Any) -> str:
    """Canonical JSON (sorted keys) of a config, for the database."""
    return json.dumps(config, sort_keys=True, default=str)
