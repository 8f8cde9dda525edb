"""`runs/lineage.sqlite`: the record of specs, runs, edges, data, metrics and state changes.

`Lineage` is the only writer of the lineage database. Every write runs in an
explicit `BEGIN IMMEDIATE` transaction (the runner's main thread and its
heartbeat thread write concurrently; an immediate lock avoids the WAL
"busy snapshot" upgrade failure of deferred transactions).
"""

from __future__ import annotations

import contextlib
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping, Optional

from engine.runs.lineage.sqlite import Database

from engine.runs.lineage.migrations import MIGRATIONS
from engine.runs.lineage.timing import RunTime, run_times
from engine.runs.lineage.records import (
    FINISHED,
    TRANSITIONS,
    ArtifactRecord,
    AttemptRecord,
    DatasetRecord,
    Event,
    IllegalTransition,
    LeakRecord,
    Metric,
    PlanRecords,
    RunRecord,
    RunState,
    SpecRecord,
    WaiverRecord,
    now_iso,
)

if TYPE_CHECKING:  # reading a lineage (status, report) needs neither the spec's schema nor the plan's
    from engine.plan.model import Plan
    from engine.spec.validated import ValidatedSpec


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
        from engine.runs.lineage.from_plan import leak_records, plan_records, spec_record, waiver_records

        self.record_spec(spec_record(validated))
        self.record_waivers(waiver_records(validated))
        self.record_leaks(validated.spec.name, leak_records(validated))
        return self.record_plan_records(plan_records(plan, validated, run_dirs or {}))

    def record_plan_records(self, records: PlanRecords) -> list[str]:
        """Insert new runs as `planned`; refresh descriptive columns of known ones, never their state.
        The runs are each spec's plan now: the spec's runs not among them are of an older plan.

        Returns the ids of the runs that were new.
        """
        new: list[str] = []
        with self._write() as db:
            for spec_name in dict.fromkeys(run.spec_name for run in records.runs):
                db["plan_runs"].delete_where("spec_name = ?", [spec_name])
                db["plan_runs"].insert_all([{"spec_name": spec_name, "run_id": run.id, "position": i}
                                            for i, run in enumerate(records.runs) if run.spec_name == spec_name])
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

    def record_leaks(self, spec_name: str, leaks: list[LeakRecord]) -> None:
        """Replace the spec's rule-3 findings with those of its latest validation."""
        with self._write() as db:
            db["leaks"].delete_where("spec_name = ?", [spec_name])
            db["leaks"].insert_all([leak.model_dump() for leak in leaks], pk=(
                "spec_name", "train", "evaluation", "train_id", "eval_id"), replace=True)

    # ------------------------------------------------------------ life cycle
    def set_state(self, run_id: str, to_state: RunState, reason: str = "", *, at: Optional[str] = None,
                  leader: Optional[str] = None, queued: bool = False, **fields: Any) -> RunRecord:
        """Move a run to `to_state` (validated) and record the event, in one transaction.

        `fields` updates other run columns in the same transaction (pid, exit_code, ...). `at`: when
        the change happened, when that was before now (a dead runner's run ended at its last
        heartbeat, not when the next runner found it: the attempt's time must not hold the gap).
        A move to `running` with an `attempt` records that attempt (`attempts`): `leader`, the run
        whose process does its work when not its own; `queued`, submitted to an executor's queue.
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
            stamp = now_iso() if at is None else max(at, row.get("started_at") or at)
            if to_state is RunState.running:
                update.update(started_at=stamp, finished_at=None, exit_code=None, heartbeat_at=stamp)
                update.setdefault("host", socket.gethostname())
                if fields.get("attempt"):
                    db["attempts"].upsert({"run_id": run_id, "attempt": fields["attempt"], "leader": leader,
                                           "queued": int(queued), "submitted_at": stamp, "job_id": None, "pid": None,
                                           "queue_state": None, "began_at": None}, pk=("run_id", "attempt"))
            elif to_state in FINISHED:
                update["finished_at"] = stamp
            db["runs"].update(run_id, update)
            self._event(run_id, from_state, to_state, reason, stamp)
        return self.run(run_id)

    def record_launch(self, run_id: str, pid: Optional[int], job_id: Optional[str] = None) -> None:
        """The process-group leader (or the executor's job id) of a run that `set_state(running)` just started."""
        with self._write() as db:
            db["runs"].update(run_id, {"pid": pid, "job_id": job_id})
            db.execute("UPDATE attempts SET pid = ?, job_id = ? WHERE run_id = ? AND attempt = "
                       "(SELECT attempt FROM runs WHERE id = ?)", [pid, job_id, run_id, run_id])

    def record_queue_state(self, run_id: str, state: str) -> None:
        """Slurm's state of the current attempt's job ("PENDING (Resources)", "RUNNING"), as last seen."""
        with self._write() as db:
            db.execute("UPDATE attempts SET queue_state = ? WHERE run_id = ? AND attempt = "
                       "(SELECT attempt FROM runs WHERE id = ?)", [state, run_id, run_id])

    def record_began(self, run_id: str, at: str, reason: str) -> None:
        """A running attempt that waited in the executor's queue began at `at`: its `running` →
        `running` event, from which `timing` counts its time; `started_at` moves there (the ETA's
        pace). Said again (a re-attached job), it changes nothing."""
        with self._write() as db:
            row = self._row(run_id)
            if row is None or row["state"] != RunState.running.value or row.get("started_at") == at:
                return
            db["runs"].update(run_id, {"started_at": at})
            db.execute("UPDATE attempts SET began_at = ? WHERE run_id = ? AND attempt = ?", [at, run_id, row["attempt"]])
            self._event(run_id, RunState.running, RunState.running, reason, at)

    def heartbeat(self, run_ids: list[str]) -> None:
        if not run_ids:
            return
        marks = ",".join("?" for _ in run_ids)
        with self._write() as db:
            db.execute(
                f"UPDATE runs SET heartbeat_at = ? WHERE state = 'running' AND id IN ({marks})",
                [now_iso(), *run_ids],
            )

    def record_outputs(self, metrics: Iterable[Metric] = (), artifacts: Iterable[ArtifactRecord] = ()) -> None:
        """A run's metrics and artifacts, in one transaction (a 300-step training run has
        thousands of curve points: one fsynced commit each held the scheduling loop)."""
        stamp = now_iso()
        metric_rows = [m.model_dump() for m in metrics]
        artifact_rows = [{**a.model_dump(), "created_at": a.created_at or stamp} for a in artifacts]
        with self._write() as db:
            if metric_rows:
                db["metrics"].upsert_all(metric_rows, pk=("run_id", "dataset", "protocol", "name", "step"))
            if artifact_rows:
                db["artifacts"].upsert_all(artifact_rows, pk=("run_id", "path"))

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

    def run_states(self, spec_name: str) -> dict[str, str]:
        """Each run's state by id: columns of the first schema, readable before an upgrade."""
        return {r["id"]: r["state"] for r in self.db.query("SELECT id, state FROM runs WHERE spec_name = ?", [spec_name])}

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

    def plan_runs(self, spec_name: str) -> list[RunRecord]:
        """The runs of the spec's latest recorded plan, in the order of `runs`; the spec's other
        runs are of an older plan (an edit dropped or changed them)."""
        rows = self.db.query("SELECT runs.* FROM runs JOIN plan_runs ON plan_runs.run_id = runs.id AND "
                             "plan_runs.spec_name = runs.spec_name WHERE runs.spec_name = ? "
                             "ORDER BY runs.created_at, runs.rowid", [spec_name])
        return [RunRecord.model_validate(r) for r in rows]

    def attempts(self, run_ids: Optional[Iterable[str]] = None) -> list[AttemptRecord]:
        """Every attempt recorded (of `run_ids`), by run and number: each job ever submitted for them."""
        if run_ids is None:
            rows = list(self.db["attempts"].rows_where(order_by="run_id, attempt"))
        else:
            rows = []
            for chunk in _chunks(_strings(run_ids, "run_ids")):
                rows += self.db["attempts"].rows_where(f"run_id IN ({','.join('?' * len(chunk))})", chunk,
                                                       order_by="run_id, attempt")
        return [AttemptRecord.model_validate({**r, "queued": bool(r["queued"])}) for r in rows]

    def attempt(self, run_id: str, number: int) -> Optional[AttemptRecord]:
        rows = list(self.db["attempts"].rows_where("run_id = ? AND attempt = ?", [run_id, number]))
        return AttemptRecord.model_validate({**rows[0], "queued": bool(rows[0]["queued"])}) if rows else None

    def events(self, run_id: Optional[str] = None) -> list[Event]:
        rows = self.db["events"].rows_where("run_id = ?" if run_id else None, [run_id] if run_id else [], order_by="id")
        return [Event.model_validate(r) for r in rows]

    def run_times(self, run_ids: Optional[Iterable[str]] = None) -> dict[str, RunTime]:
        """Each run's attempts and total time (`timing`); with `run_ids`, only theirs."""
        if run_ids is None:
            return run_times(self.events(), self.attempts())
        ids = _strings(run_ids, "run_ids")
        events: list[Event] = []
        for chunk in _chunks(ids):
            rows = self.db["events"].rows_where(f"run_id IN ({','.join('?' * len(chunk))})", chunk, order_by="id")
            events += [Event.model_validate(r) for r in rows]
        return run_times(events, self.attempts(ids))  # a run's events are in one chunk, in the order recorded

    def metrics(self, run_id: str) -> list[Metric]:
        return [Metric.model_validate(r) for r in self.db["metrics"].rows_where("run_id = ?", [run_id])]

    def artifacts(self, run_id: str) -> list[ArtifactRecord]:
        return [ArtifactRecord.model_validate(r) for r in self.db["artifacts"].rows_where("run_id = ?", [run_id])]

    def waivers(self, spec_name: str) -> list[WaiverRecord]:
        return [WaiverRecord.model_validate(r) for r in self.db["waivers"].rows_where("spec_name = ?", [spec_name])]

    def leaks(self, spec_name: str) -> list[LeakRecord]:
        return [LeakRecord.model_validate(r) for r in self.db["leaks"].rows_where("spec_name = ?", [spec_name])]

    def spec(self, name: str) -> Optional[SpecRecord]:
        """The spec as last recorded under `name` (its text, path and hash)."""
        rows = list(self.db["specs"].rows_where("name = ?", [name], order_by="recorded_at desc", limit=1))
        return SpecRecord.model_validate(rows[0]) if rows else None

    def datasets(self, spec_name: str) -> list[DatasetRecord]:
        return [DatasetRecord.model_validate(r) for r in self.db["datasets"].rows_where("spec_name = ?", [spec_name])]

    def all_metrics(self, run_ids: list[str], names: Optional[Iterable[str]] = None) -> list[Metric]:
        """The metrics of many runs (the report reads a whole study); with `names`, only those
        (status reads each run's headline, not its training curves)."""
        names = _strings(names, "names") if names is not None else None
        found = []
        for ids in _chunks(_strings(run_ids, "run_ids")):
            where, args = f"run_id IN ({','.join('?' * len(ids))})", list(ids)
            if names is not None:
                where += f" AND name IN ({','.join('?' * len(names))})"
                args += names
            found += [Metric.model_validate(r) for r in self.db["metrics"].rows_where(where, args)]
        return found

    def spec_names(self) -> list[str]:
        return sorted({r["spec_name"] for r in self.db.query("SELECT DISTINCT spec_name FROM runs")})

    def evaluated_datasets(self, run_ids: list[str]) -> dict[str, list[str]]:
        """The datasets each of `run_ids` evaluates, in the run's order."""
        run_ids = _strings(run_ids, "run_ids")
        found: dict[str, list[str]] = {run_id: [] for run_id in run_ids}
        for ids in _chunks(run_ids):
            rows = self.db["run_datasets"].rows_where(
                f"run_id IN ({','.join('?' * len(ids))}) AND use = 'evaluate'", ids, order_by="run_id, position")
            for r in rows:
                found[r["run_id"]].append(r["dataset"])
        return found


# SQLite builds before 3.32 bind at most 999 parameters a statement: a study may have more runs.
CHUNK = 500


def _chunks(ids: list[str]) -> Iterator[list[str]]:
    for start in range(0, len(ids), CHUNK):
        yield ids[start:start + CHUNK]


def _strings(values: Iterable[str], what: str) -> list[str]:
    """A list of strings; a lone string is refused (it would be read as its characters)."""
    if isinstance(values, str):
        raise TypeError(f"{what} must be a list of strings, not the string {values!r}")
    return list(values)
