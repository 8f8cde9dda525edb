"""Lineage: real SQLite files, migrations from an older schema, transitions and their events."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest
from sqlite_utils import Database

from engine.errors import UserError
from engine.runs.lineage import (
    ArtifactRecord,
    EdgeRecord,
    IllegalTransition,
    Metric,
    PlanRecords,
    RunRecord,
    RunState,
    WaiverRecord,
    open_lineage,
)
from engine.runs.lineage.migrations import MIGRATIONS

S = RunState


def planned(lineage, *ids: str) -> None:
    runs = [RunRecord(id=i, spec_name="s", phase="p", kind="eval", config_json='{"x": 1}') for i in ids]
    lineage.record_plan_records(PlanRecords(runs=runs, edges=[EdgeRecord(parent=ids[0], child=i, flows="checkpoint") for i in ids[1:]]))


@pytest.fixture
def lineage(tmp_path: Path):
    with open_lineage(tmp_path / "lineage.sqlite") as lin:
        yield lin


def test_fresh_database_is_wal_with_every_migration_recorded(tmp_path, lineage):
    assert lineage.db.journal_mode == "wal"
    applied = [m.name for m in MIGRATIONS.applied(lineage.db)]
    assert applied == ["m001_runs_and_events", "m002_data_metrics_waivers", "m003_run_attempts",
                       "m004_dataset_content", "m005_metric_context", "m006_run_job_id",
                       "m007_dataset_verified", "m008_artifact_source",
                       "m009_leak_findings", "m010_plan_runs", "m011_spec_semantic", "m012_attempts"]
    assert lineage.schema_version == 12
    assert {"specs", "runs", "edges", "events", "datasets", "run_datasets", "protocols", "run_protocols",
            "artifacts", "metrics", "waivers"} <= set(lineage.db.table_names())


def test_an_old_schema_is_migrated_forward_keeping_its_rows(tmp_path):
    path = tmp_path / "lineage.sqlite"
    old = Database(path)
    MIGRATIONS.apply(old, stop_before="m002_data_metrics_waivers")  # what a v1 rlvr-run wrote
    old["runs"].insert({"id": "r1", "spec_name": "s", "phase": "p", "kind": "eval", "state": "succeeded", "config_json": "{}"})
    old.close()
    with open_lineage(path) as lin:
        assert lin.schema_version == 12
        assert "semantic" in lin.db["specs"].columns_dict
        assert [r.id for r in lin.plan_runs("s")] == ["r1"]  # an old lineage knew no plan: its runs stand as planned
        assert "verified" in lin.db["datasets"].columns_dict and "leaks" in lin.db.table_names()
        assert "metrics" in lin.db.table_names() and "attempt" in lin.db["runs"].columns_dict
        rec = lin.run("r1")
        assert rec.state is S.succeeded and rec.attempt == 0


def test_a_failing_migration_leaves_no_trace(tmp_path):
    path = tmp_path / "lineage.sqlite"
    db = Database(path)
    MIGRATIONS.apply(db, stop_before="m003_run_attempts")
    db["runs"].add_column("attempt", int)  # the column m003 adds already exists: m003 will fail
    with pytest.raises(sqlite3.OperationalError):
        MIGRATIONS.apply(db)
    assert [m.name for m in MIGRATIONS.applied(db)] == ["m001_runs_and_events", "m002_data_metrics_waivers"]


def test_a_newer_schema_is_refused_with_a_clear_message(tmp_path):
    path = tmp_path / "lineage.sqlite"
    open_lineage(path).close()
    db = Database(path)
    db[MIGRATIONS.migrations_table].insert({"migration_set": MIGRATIONS.name, "name": "m999_future", "applied_at": "x"})
    db.close()
    with pytest.raises(UserError, match="newer rlvr-run .*m999_future"):
        open_lineage(path)


def test_read_only_open_refuses_missing_and_outdated_databases(tmp_path):
    with pytest.raises(UserError, match="nothing has run yet"):
        open_lineage(tmp_path / "absent.sqlite", readonly=True)
    db = Database(tmp_path / "old.sqlite")
    MIGRATIONS.apply(db, stop_before="m003_run_attempts")
    db.close()
    with pytest.raises(UserError, match="older lineage schema .*m003_run_attempts"):
        open_lineage(tmp_path / "old.sqlite", readonly=True)


def test_transitions_are_validated_and_each_change_is_an_event(lineage):
    planned(lineage, "a")
    with pytest.raises(IllegalTransition, match="planned -> succeeded"):
        lineage.set_state("a", S.succeeded)
    lineage.set_state("a", S.queued, "queued")
    rec = lineage.set_state("a", S.running, "attempt 1", attempt=1, pid=4242)
    assert rec.started_at and rec.host and rec.pid == 4242 and rec.heartbeat_at == rec.started_at
    rec = lineage.set_state("a", S.failed, "exit 1", exit_code=1)
    assert rec.finished_at and rec.exit_code == 1 and rec.reason == "exit 1"
    lineage.set_state("a", S.queued, "resumed")  # resume re-queues a failure
    events = lineage.events("a")
    assert [(e.from_state, e.to_state) for e in events] == [
        (None, S.planned), (S.planned, S.queued), (S.queued, S.running), (S.running, S.failed), (S.failed, S.queued),
    ]
    assert events[3].reason == "exit 1"
    with pytest.raises(KeyError):
        lineage.set_state("nope", S.queued)


def test_a_rejected_transition_writes_nothing(lineage):
    planned(lineage, "a")
    with pytest.raises(IllegalTransition):
        lineage.set_state("a", S.cancelled, "never started")
    assert lineage.run("a").state is S.planned and len(lineage.events("a")) == 1


def test_replanning_never_resets_a_run_and_adds_no_duplicates(lineage):
    planned(lineage, "a", "b")
    for state in (S.queued, S.running, S.succeeded):
        lineage.set_state("a", state)
    planned(lineage, "a", "b")
    assert lineage.run("a").state is S.succeeded
    assert lineage.db["runs"].count == 2 and lineage.db["edges"].count == 1
    assert len(lineage.events("a")) == 4


def test_heartbeat_touches_only_running_runs(lineage):
    planned(lineage, "a", "b")
    lineage.set_state("a", S.queued)
    first = lineage.set_state("a", S.running).heartbeat_at
    time.sleep(0.005)  # timestamps have millisecond resolution: let the clock move past `first`
    lineage.heartbeat(["a", "b"])
    assert lineage.run("a").heartbeat_at > first
    assert lineage.run("b").heartbeat_at is None


def test_metrics_artifacts_and_waivers_round_trip(lineage):
    planned(lineage, "a")
    metric = Metric(run_id="a", dataset="humaneval", protocol="greedy", seed=1, name="accepted@1", value=0.5)
    lineage.record_outputs([metric])
    lineage.record_outputs([metric.model_copy(update={"value": 0.6})])
    assert [m.value for m in lineage.metrics("a")] == [0.6]  # one value per (run, dataset, protocol, name, step)
    lineage.record_outputs(artifacts=[ArtifactRecord(run_id="a", kind="checkpoint", path="model", sha256="ab")])
    assert lineage.artifacts("a")[0].created_at
    lineage.record_waivers([WaiverRecord(spec_name="s", rule=2, what="valid used for pairs", reason="ok", spec_line=9)])
    assert lineage.waivers("s")[0].spec_line == 9


def test_a_reader_sees_committed_state_while_a_writer_holds_a_transaction(tmp_path, lineage):
    planned(lineage, "a")
    lineage.db.conn.execute("BEGIN IMMEDIATE")
    lineage.db["runs"].update("a", {"state": "queued"})
    with open_lineage(tmp_path / "lineage.sqlite", readonly=True) as reader:
        assert reader.run("a").state is S.planned  # WAL: readers are not blocked by the writer
    lineage.db.conn.execute("COMMIT")


def test_a_runs_outputs_are_one_transaction(lineage):
    planned(lineage, "a")
    commits: list[str] = []
    lineage.db.conn.set_trace_callback(lambda sql: commits.append(sql) if sql.strip().upper() == "COMMIT" else None)
    steps = [Metric(run_id="a", dataset="train", name=f"loss/{i % 3}", value=i / 10, step=i) for i in range(300)]
    lineage.record_outputs(steps, [ArtifactRecord(run_id="a", kind="model", path="model")])
    lineage.db.conn.set_trace_callback(None)
    assert len(commits) == 1
    assert len(lineage.metrics("a")) == 300 and [a.kind for a in lineage.artifacts("a")] == ["model"]


def test_the_states_a_run_starts_from_are_read_from_an_older_schema_before_it_upgrades(tmp_path):
    """`rlvr-run SPEC` reads its runs' states before it opens lineage to write (and upgrade): an
    older schema must be read, not refused with advice to run the very command that failed."""
    from types import SimpleNamespace

    from engine.runs.pipeline import read_states

    old = Database(tmp_path / "lineage.sqlite")
    MIGRATIONS.apply(old, stop_before="m011_spec_semantic")
    old["runs"].insert({"id": "r1", "spec_name": "s", "phase": "p", "kind": "eval", "state": "succeeded",
                        "config_json": "{}"})
    old.close()
    assert read_states(tmp_path, SimpleNamespace(spec_name="s")) == {"r1": "succeeded"}
    with pytest.raises(UserError, match="older lineage schema"):  # other readers still ask for the upgrade
        open_lineage(tmp_path / "lineage.sqlite", readonly=True)
    with open_lineage(tmp_path / "lineage.sqlite") as lin:  # which the run then makes
        assert lin.schema_version == 12 and lin.run_states("s") == {"r1": "succeeded"}


def test_attempts_said_only_in_event_reasons_become_typed_rows(tmp_path):
    # A lineage written before attempts had a table: each `running` event's reason was the record.
    db = Database(tmp_path / "lineage.sqlite")
    MIGRATIONS.apply(db, stop_before="m012_attempts")
    db["runs"].insert({"id": "m", "spec_name": "s", "phase": "p", "kind": "eval", "state": "running", "attempt": 2,
                       "job_id": "41"})
    db["events"].insert_all([
        {"run_id": "m", "time": "2026-01-01T00:00:00+00:00", "from_state": "queued", "to_state": "running",
         "reason": "attempt 1"},
        {"run_id": "m", "time": "2026-01-01T01:00:00+00:00", "from_state": "failed", "to_state": "running",
         "reason": "attempt 2 in the process of r, queued"},
        {"run_id": "m", "time": "2026-01-01T02:00:00+00:00", "from_state": "running", "to_state": "running",
         "reason": "attempt 2 began"}])
    db.close()
    with open_lineage(tmp_path / "lineage.sqlite") as lineage:
        rows = lineage.attempts(["m"])
        times = lineage.run_times(["m"])["m"]
    assert [(a.attempt, a.leader, a.queued, a.job_id) for a in rows] == [(1, None, False, None), (2, "r", True, "41")]
    assert times.current.number == 2 and times.current.process == "r" and not times.current.queued
